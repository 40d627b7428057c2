"""The run's final config, resolved once before training: what `config.json` holds.

An experiment leaves some fields for the run to fill:
  init_from  the architecture (`model.*`) and tokenizer (`data.tokenizer`) of the run the
             weights come from: fine-tuning swaps heads, not encoders (the same for the run
             a `train.decay_from` branch continues);
  the task   what only the data knows: the vocabulary size, the label names and their count
             (`task.resolved_fields`);
  lengths    `train.num_steps <= 0` means `train.num_epochs` passes over the training
             examples (packed data: over its `steps_per_epoch`, as the examples per step
             vary); `train.warmup_steps = None` means `train.warmup_fraction` of the run;
  model      every field the size preset fills, written out in numbers (what `encoder.load`
             rebuilds the model from).
`resolve` returns a new config with all of them. Nothing changes a config after it: the
trainer, the steps and the evaluator read the resolved one, and `config.json` is a copy of it.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from ml_collections import config_dict

from encoder import storage
from encoder.configs import with_fields
from encoder.errors import ConfigError
from encoder.modules.config import ARCHITECTURE_FIELDS, resolved_fields
from encoder.train import branch
from encoder.train.checkpoint import find_run_directory


def init_from_fields(config) -> dict[str, Any]:
  """The architecture and tokenizer of the `init_from` (or `train.decay_from`) run where they
  differ from `config` (empty without either, or for a bare checkpoint with no run directory
  around it)."""
  branch_from = config.train.get('decay_from', '')
  origin = config.init_from or (branch.source(branch_from)[0] if branch_from else '')
  run = find_run_directory(origin) if origin else None
  if run is None:
    return {}
  saved = json.loads(storage.read_text(os.path.join(run, 'config.json'))).get('model', {})
  # A branch keeps what its config sets (the context phase raises model.rope_theta; a shape
  # that differs fails to restore, in one line); init_from's run dictates the whole encoder.
  keep_set = not config.init_from
  fields = {f'model.{key}': saved[key] for key in ARCHITECTURE_FIELDS
            if saved.get(key) is not None and config.model.get(key) != saved[key]
            and not (keep_set and config.model.get(key) is not None)}
  tokenizer_dir = os.path.join(run, 'tokenizer')
  if not config.data.tokenizer and storage.isdir(tokenizer_dir):
    fields['data.tokenizer'] = tokenizer_dir
  return fields


def length_fields(train, num_examples: int | None,
                  steps_per_epoch: int | None = None) -> dict[str, int]:
  """num_steps from num_epochs (a positive num_steps wins) over the data's steps per epoch
  (given: packed batches), else over examples / batch size; warmup from its fraction."""
  fields = {}
  num_steps = train.num_steps
  if num_steps <= 0:
    epochs = train.get('num_epochs') or 0
    if epochs <= 0 or not (num_examples or steps_per_epoch):
      raise ConfigError('train.num_steps must be positive (or set train.num_epochs for a task '
                        'whose data has a known size)')
    if steps_per_epoch:
      num_steps = math.ceil(epochs * steps_per_epoch)
    else:
      num_steps = math.ceil(epochs * num_examples / train.batch_size)
    num_steps = fields['train.num_steps'] = max(1, num_steps)
  if train.get('warmup_steps') is None:
    fields['train.warmup_steps'] = round(float(train.get('warmup_fraction') or 0.0) * num_steps)
  return fields


def resolve(config, task, data) -> config_dict.ConfigDict:
  """The final config of a run of `task` on `data` (built from `with_fields(config,
  init_from_fields(config))`); `config` is the experiment with the user's overrides."""
  config = with_fields(config, init_from_fields(config))
  config = with_fields(config, task.resolved_fields(config, data))
  config = with_fields(config, length_fields(config.train, data.num_train_examples,
                                             getattr(data, 'steps_per_epoch', None)))
  return with_fields(config, {f'model.{k}': v for k, v in resolved_fields(config.model).items()})
