"""Tasks: each is a model (encoder + head), a loss, metric sums and data.

The trainer asks `get_task(config.task)` for a module that follows the `Task` protocol and
never branches on which task it runs. Adding a head is a module here plus an entry in `TASKS`
(and an experiment file); the trainer does not change.
"""

from __future__ import annotations

import functools
import importlib
import types
from collections.abc import Callable
from typing import Any, Protocol

from encoder.errors import ConfigError

TASKS = {'pretraining': 'encoder.tasks.pretraining', 'electra': 'encoder.tasks.electra',
         'classification': 'encoder.tasks.classification',
         'tagging': 'encoder.tasks.tagging',
         'span_qa': 'encoder.tasks.span_qa', 'contrastive': 'encoder.tasks.contrastive'}


class Task(Protocol):
  """What the trainer, the evaluator and `launch.py --describe` use of a task module.

  Losses are formed inside the compiled step from metric *sums*: `loss_denominators` are
  summed over microbatches and devices first, so the loss is the same however the batch is
  split; `reduce_metrics` divides once, on the host, when a window is logged.

  The last three members are optional, and None in a task whose metrics are all sums: a task
  with metrics that are not (F1, MCC, correlations, entity F1, EM) sets `predict` (per-example
  outputs from the compiled step) and `evaluate` (scores the gathered predictions, returns
  (metrics, records to write)); `write_predictions` adds its own files (e.g. SQuAD's).
  """

  def build_model(self, config) -> Any:
    """The Flax module (encoder + head) from the resolved config."""

  def dummy_batch(self, config, batch_size: int = 1) -> dict:
    """Zeros of the batch's shapes, for initialisation and shape inference."""

  def datasets(self, config, workdir: str, process_index: int = 0, process_count: int = 1):
    """The data: `.tokenizer`, `.train_iterator(state)`, `.eval_batches(n)`, `.stats`,
    `.num_train_examples` (None when unknown), optionally `.steps_per_epoch` (packed data,
    whose steps hold a varying number of examples: what `train.num_epochs` counts); with
    `predict`, also
    `.collate_predictions(per_batch)`: the gathered outputs of each eval batch (batches may be
    of different lengths) -> one array per field in eval-set order."""

  def resolved_fields(self, config, data) -> dict:
    """The dotted config fields only the data knows (vocabulary size, labels)."""

  def loss_denominators(self, batch: dict) -> dict:
    """What each loss term is averaged over, for this batch."""

  def loss_and_metrics(self, outputs: dict, batch: dict, denominators: dict | None = None
                       ) -> tuple[Any, dict]:
    """This batch's share of the loss, and metric sums and counts."""

  def reduce_metrics(self, sums: dict) -> dict:
    """Metric sums (over steps and devices) -> the reported values."""

  # True where an example's loss depends on the other examples of the global batch (in-batch
  # negatives): the steps then pass `loss_and_metrics` the pmap axis (`axis_name=`) to gather
  # over, and accumulate microbatches by caching their outputs (GradCache), so the loss is the
  # whole batch's however it is split (encoder.train.steps).
  couples_examples: bool
  # Corpora prepared ahead of training (pretraining): run by every process before the data is
  # built, outside any barrier, since process 0 may take hours while the others wait for it.
  prepare_data: Callable[[Any, str, int], None] | None
  predict: Callable[[dict, dict], dict] | None
  evaluate: Callable[[Any, dict], tuple[dict, dict]] | None
  write_predictions: Callable[[str, int, dict], None] | None


MEMBERS = tuple(name for name in (*vars(Task), *Task.__annotations__)
                if not name.startswith('_'))


def with_loss_settings(module_globals: dict, loss, **settings):
  """A task module (its `globals()`) with `settings` bound into its `loss_and_metrics`: what a
  module's `bind(config)` returns, since the step calls the loss without the run's config."""
  bound = types.SimpleNamespace(**{k: module_globals[k] for k in MEMBERS})
  bound.loss_and_metrics = functools.partial(loss, **settings)
  return bound


def get_task(name: str, config=None) -> Task:
  """The task module `name`; ConfigError for an unknown name, TypeError for a module that
  lacks a member of the protocol (set optional ones to None). Given the run's `config`, a
  module with a `bind(config)` (a loss with settings of its own: contrastive) returns the task
  bound to them."""
  if name not in TASKS:
    raise ConfigError(f"unknown task '{name}' (known: {', '.join(sorted(TASKS))})")
  module = importlib.import_module(TASKS[name])
  missing = [member for member in MEMBERS if not hasattr(module, member)]
  if missing:
    raise TypeError(f'{TASKS[name]} does not follow encoder.tasks.Task: no '
                    f'{", ".join(missing)}')
  bind = getattr(module, 'bind', None)
  return bind(config) if bind is not None and config is not None else module
