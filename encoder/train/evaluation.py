"""What the trainer needs beyond the step loop, for any task: evaluation and the best step.

- `Evaluator`: metric sums from `eval_step` (reduced by `task.reduce_metrics`), or, for a task
  with `predict` + `evaluate` (metrics that are no sums: F1, MCC, correlations, entity F1),
  whole per-example predictions gathered on the host, scored by the task and written to
  `workdir/predictions/<eval set>_step<N>.jsonl` (and whatever `task.write_predictions` adds).
- `BestMarker`: `workdir/best.json` names the step that scored highest on `train.best_metric`;
  the Checkpointer keeps that step however old it gets.
"""

from __future__ import annotations

import json
import math
import os

import jax

from encoder import storage
from encoder.errors import ConfigError


class Evaluator:
  """`evaluator(replicated_state, step) -> metrics` over the data's eval batches."""

  def __init__(self, task, data, model, eval_step, num_batches: int, workdir: str,
               strategy, enabled: bool = True):
    self.task, self.data, self.eval_step = task, data, eval_step
    self.directory = os.path.join(workdir, 'predictions')
    self.enabled = enabled
    self.strategy = strategy
    self.batches = [self.strategy.place_batch(b) for b in data.eval_batches(num_batches)]
    self.predict = None if task.evaluate is None else self.strategy.predict_step(model, task)

  def compile(self, rstate) -> None:
    """Compiles the evaluation ahead of its first call, on one batch of each shape: a run on
    a wall-clock budget then times its evaluations, not their compile."""
    run = self.eval_step if self.predict is None else self.predict
    shapes = {}
    for batch in self.batches:
      shapes.setdefault(str(jax.tree.map(lambda x: x.shape, batch)), batch)
    jax.block_until_ready([run(rstate.params, batch) for batch in shapes.values()])

  def __call__(self, rstate, step: int) -> dict:
    if self.predict is None:
      sums = [self.eval_step(rstate.params, batch) for batch in self.batches]
      return self.task.reduce_metrics(self.strategy.sum_metrics(sums))
    # One array per field in eval-set order.
    whole = self.data.collate_predictions(self.strategy.gather_predictions(
        [self.predict(rstate.params, batch) for batch in self.batches]))
    metrics, records = self.task.evaluate(self.data, whole)
    if self.enabled:
      self._write(step, records)
    return metrics

  def _write(self, step: int, records: dict) -> None:
    storage.makedirs(self.directory)
    for name, rows in records.items():
      path = os.path.join(self.directory, f'{name}_step{step}.jsonl')
      storage.write_atomic(path, ''.join(json.dumps(row, ensure_ascii=False) + '\n'
                                         for row in rows))
    if self.task.write_predictions is not None:  # extra formats, e.g. SQuAD's official files
      self.task.write_predictions(self.directory, step, records)


class BestMarker:
  """Tracks the highest `metric` seen in eval and records its step in `workdir/best.json`."""

  def __init__(self, workdir: str, metric: str, enabled: bool = True):
    self.path, self.metric, self.enabled = os.path.join(workdir, 'best.json'), metric, enabled
    self.value = -math.inf
    if metric and storage.exists(self.path):
      self.value = float(json.loads(storage.read_text(self.path))['value'])

  def checkpoint_metrics(self, metrics: dict) -> dict | None:
    """What the Checkpointer ranks this step by (None: not an eval step, or no best metric)."""
    if not self.metric or not metrics:
      return None
    if self.metric not in metrics:
      raise ConfigError(f"train.best_metric='{self.metric}' is not an eval metric (eval "
                        f"reports: {', '.join(sorted(metrics))})")
    return {self.metric: float(metrics[self.metric])}

  def improves(self, metrics: dict) -> bool:
    ranked = self.checkpoint_metrics(metrics)
    # Ties count as improvements: Orbax keeps the newest of equally ranked steps too.
    return ranked is not None and ranked[self.metric] >= self.value

  def mark(self, step: int, metrics: dict) -> None:
    """Records `step` as the best (call after its checkpoint was saved)."""
    self.value = float(metrics[self.metric])
    if self.enabled:
      storage.write_atomic(self.path, json.dumps(
          {'step': int(step), 'metric': self.metric, 'value': self.value,
           'checkpoint': os.path.join('checkpoints', str(int(step)))}))
