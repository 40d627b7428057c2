"""A run's config, resolved once: what the code reads and what `config.json` holds.

The experiment with the user's overrides leaves fields for the run to fill, in two steps:

`resolve_config(config)`, before anything is written (and without JAX: `--print_config` and
`--describe` print its result):
  origin   `init_from` (or the run a `train.decay_from` branch continues) dictates the
           architecture (`model.*`, from its config.json) and the tokenizer: fine-tuning swaps
           heads, not encoders; a branch keeps the model fields it sets explicitly;
  preset   every model field still unset takes `model.size`'s value (config_schema.py);
  checks   everything training would refuse of the config alone, each a one-line ConfigError.
`resolve(config, task, data)`, once the data is read, fills what only the data knows
(config_schema.FROM_DATA): the vocabulary size, the label names and their count
(`task.resolved_fields`), `train.num_steps` from `train.num_epochs` and `train.warmup_steps`
from `train.warmup_fraction`. Nothing changes a config after it.
"""

from __future__ import annotations

import copy
import logging
import math
import os
from typing import Any

from ml_collections import config_dict

from encoder import config_schema, configs, saved_config, storage
from encoder.checkpoint_files import decay_source, find_run_directory, resolve_checkpoint
from encoder.errors import ConfigError
from encoder.modules.config import ARCHITECTURE_FIELDS, check_electra, checked
from encoder.tasks import TASKS
from encoder.train import prng, time_budget, xla_cache

log = logging.getLogger('encoder')
HEAD_FIELDS = ('pooling',)  # model fields a run from init_from may set for itself


def resolve_config(config: config_dict.ConfigDict) -> config_dict.ConfigDict:
  """`config` (the experiment with its overrides) with its origin's architecture and
  tokenizer, every model field concrete but the vocabulary, and checked; a new config."""
  config = copy.deepcopy(config)
  if config.task not in TASKS:
    raise ConfigError(f"unknown task '{config.task}' (known: {', '.join(sorted(TASKS))})")
  origin = ('init_from', config.init_from) if config.init_from else \
      ('decay_from', config.train.decay_from)
  inherited = origin_fields(config)
  if inherited:
    log.info('From %s %s: the encoder (model.size=%s) and tokenizer', *origin,
             inherited.get('model.size', config.model.size))
  for key, value in inherited.items():  # what it changes of the settings given
    given = configs.nested_get(config.to_dict(), key.split('.'))
    if given not in (None, '') and key != 'model.size':
      log.info('From %s %s: %s=%r (not %r)', *origin, key, value, given)
  config = configs.with_fields(config, inherited)
  filled = config_schema.fill_model(config.model)
  config.model.update({k: v for k, v in filled.items() if k != 'vocab_size'})
  check(config)
  return config


def printable(config) -> dict:
  """A `resolve_config` result as `--print_config` shows it: the fields only the data answers
  say where their value will come from."""
  shown = config.to_dict()
  for key, where in config_schema.FROM_DATA.items():
    section, field = key.split('.')
    if field not in shown.get(section, {}):
      continue
    value = shown[section][field]
    if value is None or (key == 'train.num_steps' and value <= 0):
      shown[section][field] = f'(from the data: {where})'
  return shown


def origin_fields(config) -> dict[str, Any]:
  """The architecture and tokenizer of the `init_from` (or `train.decay_from`) run where they
  differ from `config` (empty without either, or for a bare checkpoint with no run directory
  around it); a CheckpointError when the checkpoint is not there."""
  if config.init_from and config.train.decay_from:
    raise ConfigError('set train.decay_from or init_from, not both: a branch starts from the '
                      'whole checkpoint (weights, optimizer state, step) of its source run')
  if config.init_from:
    origin = resolve_checkpoint(config.init_from)[0]  # fails before anything is written
  elif config.train.decay_from:
    origin = decay_source(config.train.decay_from)[0]
  else:
    return {}
  run = find_run_directory(origin)
  if run is None:
    return {}
  run_config = saved_config.read_saved(run)
  saved = run_config['model']
  # A branch keeps what its config sets (the context phase raises model.rope_theta; a shape
  # that differs fails to restore, in one line); init_from's run dictates the whole encoder.
  # The pooling is how a head reads the encoder, not part of its weights: a fine-tuning run
  # may set its own (the suite pools a causal encoder by mean: its [CLS] sees only itself).
  keep_set = not config.init_from
  fields = {f'model.{key}': saved[key] for key in ARCHITECTURE_FIELDS
            if saved[key] is not None and config.model[key] != saved[key]
            and not ((keep_set or key in HEAD_FIELDS) and config.model[key] is not None)}
  if (config.init_from and config.model.pooling is None
      and config.task not in config_schema.PRETRAINING_TASKS):
    fields['model.pooling'] = saved_config.head_pooling(run_config)  # the head's reading
  # How the origin makes sentence vectors (an imported sentence-transformers model's pooling,
  # normalisation, length), unless this config sets a value of its own.
  default = config_schema.embed_section()
  for key, value in run_config['embed'].items():
    if key in default and config.embed[key] == default[key] and value != default[key]:
      fields[f'embed.{key}'] = value
  tokenizer_dir = os.path.join(run, 'tokenizer')
  if not config.data.tokenizer and storage.isdir(tokenizer_dir):
    fields['data.tokenizer'] = tokenizer_dir
  return fields


def check(config) -> None:
  """Refuses, in one line each, what training would refuse of this config before reading
  any data: the model's values, a sequence longer than a learned position table, and the
  data fields of its task."""
  checked(config.model)
  m, d = config.model, config.data
  if m.position_embedding == 'learned' and d.max_seq_length > m.max_position_embeddings:
    raise ConfigError(f'data.max_seq_length={d.max_seq_length} exceeds the learned position '
                      f'table (model.max_position_embeddings={m.max_position_embeddings})')
  xla_cache.run_cache_dir(config.train.compile_cache)
  time_budget.check(config.train)
  prng.check(config.train)
  if config.task in config_schema.PRETRAINING_TASKS:
    _check_pretraining(config)
  else:
    _check_finetuning(config)


def _check_pretraining(config) -> None:
  # lazy: the data checks import the corpus readers, which only pretraining needs
  from encoder.data.pretrain import mask_schedule, nsp_schedule, preparation, pretraining_data
  preparation.packing_layout(config.data)
  if config.task == 'electra':
    check_electra(config.electra, config.data.nsp)
  mask_schedule.check(config.data)
  nsp_schedule.check_nsp_schedule(config.train)
  pretraining_data.first_phase_config(config)


def _check_finetuning(config) -> None:
  # lazy: the fine-tuning data checks, read only for a fine-tuning task
  from encoder.data.finetune import length_buckets, packing, squad_examples, squad_features
  d = config.data
  mode = packing.packing_mode(config)
  length_buckets.parse_buckets(d.length_buckets, d.max_seq_length)
  if config.task != 'span_qa':
    return
  if mode == 'examples':
    raise ConfigError('data.packing=examples packs classification and tagging examples; SQuAD '
                      'windows stay one per row (use data.length_buckets): set '
                      'data.packing=none')
  if d.answer_start_mismatch not in squad_examples.MISMATCH_POLICIES:
    raise ConfigError(f"data.answer_start_mismatch='{d.answer_start_mismatch}' is not one of "
                      f"{', '.join(squad_examples.MISMATCH_POLICIES)}")
  squad_features.check_lengths(d.max_seq_length, d.max_query_length, d.doc_stride)


def length_fields(train, num_examples: int | None,
                  steps_per_epoch: int | None = None) -> dict[str, int]:
  """num_steps from num_epochs (a positive num_steps wins) over the data's steps per epoch
  (given: packed batches), else over examples / batch size; warmup from its fraction."""
  fields = {}
  num_steps = train.num_steps
  if num_steps <= 0:
    epochs = train.num_epochs if 'num_epochs' in train else 0
    if epochs <= 0 or not (num_examples or steps_per_epoch):
      raise ConfigError('train.num_steps must be positive (or set train.num_epochs for a task '
                        'whose data has a known size)')
    if steps_per_epoch:
      num_steps = math.ceil(epochs * steps_per_epoch)
    else:
      num_steps = math.ceil(epochs * num_examples / train.batch_size)
    num_steps = fields['train.num_steps'] = max(1, num_steps)
  if train.warmup_steps is None:
    fields['train.warmup_steps'] = round(float(train.warmup_fraction) * num_steps)
  return fields


def resolve(config, task, data) -> config_dict.ConfigDict:
  """The final config of a run of `task` on `data`: `config` (a `resolve_config` result) with
  the fields only the data answers filled in; a new config."""
  config = configs.with_fields(config, task.resolved_fields(config, data))
  return configs.with_fields(config, length_fields(config.train, data.num_train_examples,
                                           getattr(data, 'steps_per_epoch', None)))


def resolve_without_data(config) -> config_dict.ConfigDict:
  """`config` (a `resolve_config` result) completed as far as a run built from shapes alone
  needs (`--compile_for`), reading no corpus: the vocabulary is `model.vocab_size`, else the
  given tokenizer's (`data.tokenizer`: its files only), else `data.vocab_size` (the size a
  trained one gets); labels default as the tasks' models do before the data answers; a run
  counted in epochs gets one step (the schedule's length changes no shape). A new config."""
  fields = {}
  if config.model.vocab_size is None:
    if config.data.get('tokenizer'):
      from encoder.data.tokenizer import load_tokenizer  # lazy: only where a file is given
      fields['model.vocab_size'] = load_tokenizer(config.data.tokenizer).vocab_size
    else:
      fields['model.vocab_size'] = int(config.data.vocab_size)
  if config.train.num_steps <= 0:
    fields['train.num_steps'] = 1
  if config.train.warmup_steps is None:
    fields['train.warmup_steps'] = 0
  return configs.with_fields(config, fields)
