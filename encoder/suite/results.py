"""The suite's results, rebuilt from the runs' status records alone: per (arm, task) every
seed's metrics with their median, min and max, the learning rate chosen (grid: the best median
of the task's score), and per arm the GLUE-style average of the task scores.

A task's score is the mean of its leaderboard's metrics (GLUE's convention: MRPC and QQP
average F1 and accuracy, STS-B Pearson and Spearman; CoLA is MCC, CoNLL entity F1, SQuAD the
mean of EM and F1; accuracy elsewhere); an arm's `glue_average` is the mean of its GLUE tasks'
median scores, `average` that of all its tasks'.
"""

from __future__ import annotations

import statistics

from encoder.suite.catalog import GLUE, TASKS
from encoder.suite.plan import RunSpec
from encoder.sweep.status import read_status


def spread(values: list[float]) -> dict:
  if not values:
    return {'seeds': [], 'median': None, 'min': None, 'max': None}
  return {'seeds': values, 'median': statistics.median(values), 'min': min(values),
          'max': max(values)}


def task_score(task: str, metrics: dict) -> float | None:
  wanted = TASKS[task].metrics
  if any(metrics.get(m) is None for m in wanted):
    return None
  return sum(float(metrics[m]) for m in wanted) / len(wanted)


def collect(runs: list[RunSpec]) -> dict:
  """{arm: {task: {lr: [status record, ...]}}} in plan order."""
  grouped: dict = {}
  for spec in runs:
    record = read_status(spec.workdir) or {**spec.to_json(), 'status': 'pending'}
    by_lr = grouped.setdefault(spec.arm, {}).setdefault(spec.task, {})
    by_lr.setdefault(spec.learning_rate, []).append(record)
  return grouped


def task_result(task: str, by_lr: dict) -> dict:
  """One (arm, task): the chosen learning rate's seeds, every metric's spread, failures."""
  choices = {}
  for lr, records in by_lr.items():
    scores = [s for r in records if r.get('status') == 'done'
              and (s := task_score(task, r.get('metrics', {}))) is not None]
    choices[lr] = statistics.median(scores) if scores else None
  best = max(choices, key=lambda lr: -1e9 if choices[lr] is None else choices[lr])
  records = by_lr[best]
  done = [r for r in records if r.get('status') == 'done']
  # As run: a user's override of the rate beats the recipe's (the grid's key).
  ran = next((r['as_run'] for r in done if r.get('as_run')), {})
  names = sorted({k for r in done for k in r.get('metrics', {})
                  if isinstance(r['metrics'][k], int | float)})
  return {
      'official_metrics': list(TASKS[task].metrics),
      'learning_rate': ran.get('learning_rate', best),
      'budget': ran,
      'grid_medians': {f'{lr:g}': m for lr, m in choices.items()} if len(choices) > 1 else {},
      'score': spread([s for r in done
                       if (s := task_score(task, r.get('metrics', {}))) is not None]),
      'metrics': {m: spread([float(r['metrics'][m]) for r in done if m in r['metrics']])
                  for m in names},
      'runs': [{'seed': r.get('seed'), 'status': r.get('status'),
                'wall_clock_s': r.get('wall_clock_s'), **({'error': r['error']}
                                                          if r.get('error') else {})}
               for r in records],
  }


def summarise(runs: list[RunSpec], missing: dict[str, str], meta: dict,
              arm_steps: dict[str, int | None]) -> dict:
  """The whole of suite.json."""
  arms, grouped = {}, collect(runs)
  every = [r for tasks in grouped.values() for by_lr in tasks.values()
           for records in by_lr.values() for r in records]
  for arm, tasks in grouped.items():
    results = {task: task_result(task, by_lr) for task, by_lr in tasks.items()}
    medians = {t: r['score']['median'] for t, r in results.items()}
    glue = [m for t, m in medians.items() if t in GLUE]
    arms[arm] = {'step': arm_steps.get(arm), 'tasks': results,
                 'glue_average': _mean(glue) if glue and None not in glue else None,
                 'average': _mean(list(medians.values()))
                 if medians and None not in medians.values() else None}
  wall = sum(r.get('wall_clock_s') or 0 for r in every)
  counts: dict = {}
  for r in every:
    counts[r['status']] = counts.get(r['status'], 0) + 1
  return {**meta, 'missing': missing, 'arms': arms, 'run_counts': counts,
          'runs_wall_clock_s': round(wall, 1)}


def _mean(values: list[float]) -> float:
  return sum(values) / len(values)
