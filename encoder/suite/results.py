"""The suite's results, rebuilt from the runs' status records alone: per (arm, task) every
seed's metrics with their median, min and max, the learning rate chosen (grid: the best median
of the task's score), and per arm the GLUE-style average of the task scores.

A task's score is the mean of its leaderboard's metrics (GLUE's convention: MRPC and QQP
average F1 and accuracy, STS-B Pearson and Spearman; CoLA is MCC, CoNLL entity F1, SQuAD the
mean of EM and F1; accuracy elsewhere); an arm's `glue_average` is the mean of its GLUE tasks'
median scores, `average` that of all its tasks'.

Each task also states the score of a model that learned nothing (`baseline_score`: the
majority class, or 0) and `did_not_learn` (why, or '') when its median is within its seeds'
range of that; `within_seed_spread` lists the arms whose medians on a task differ by less than
their seeds' range (encoder.sweep.seed_spread).
"""

from __future__ import annotations

import statistics

from encoder.suite.catalog import GLUE, TASKS
from encoder.suite.plan import RunSpec
from encoder.sweep.seed_spread import close_calls, did_not_learn, spread
from encoder.sweep.status import read_status


def task_score(task: str, metrics: dict) -> float | None:
  wanted = TASKS[task].metrics
  if any(metrics.get(m) is None for m in wanted):
    return None
  return sum(float(metrics[m]) for m in wanted) / len(wanted)


def baseline_score(task: str, metrics: dict) -> float:
  """The task's score of a model that learned nothing: the mean of its metrics'
  `baseline_<metric>` (the majority class: accuracy, F1), 0 for those without one (MCC,
  correlations, entity F1, EM: a constant prediction scores 0)."""
  wanted = TASKS[task].metrics
  return sum(float(metrics.get(f'baseline_{m}', 0.0)) for m in wanted) / len(wanted)


def learned_nothing(score: dict, baseline: float | None, metrics: dict) -> str:
  """Why a task's result reads as no learning ('' when it does not): the median score within
  its seeds' range of the baseline, or (regression) a squared error no better than
  predicting the mean."""
  if did_not_learn(score, baseline):
    return f"median {score['median']:.4f} within its seed range of the baseline {baseline:.4f}"
  mse, base = metrics.get('mse'), metrics.get('baseline_mse')
  if mse and base and mse['median'] is not None and mse['median'] >= base['median']:
    return (f"squared error {mse['median']:.4g} no better than predicting the mean "
            f"({base['median']:.4g})")
  return ''


def collect(runs: list[RunSpec]) -> dict:
  """{arm: {task: {lr: [status record, ...]}}} in plan order."""
  grouped: dict = {}
  for spec in runs:
    record = read_status(spec.workdir) or {**spec.to_json(), 'status': 'pending'}
    by_lr = grouped.setdefault(spec.arm, {}).setdefault(spec.task, {})
    by_lr.setdefault(spec.learning_rate, []).append(record)
  return grouped


def grid_choice(task: str, by_lr: dict, grid_seeds: int = 0) -> tuple[float, dict]:
  """(the learning rate with the best median score, each rate's median or None): over the
  seeds below `grid_seeds` where the grid ran only those at every rate (0: every seed)."""
  choices = {}
  for lr, records in by_lr.items():
    scores = [s for r in records if r.get('status') == 'done'
              and (not grid_seeds or int(r.get('seed') or 0) < grid_seeds)
              and (s := task_score(task, r.get('metrics', {}))) is not None]
    choices[lr] = statistics.median(scores) if scores else None
  return max(choices, key=lambda lr: -1e9 if choices[lr] is None else choices[lr]), choices


def chosen_rates(runs: list[RunSpec], grid_seeds: int) -> dict[tuple[str, str], float]:
  """{(arm, task): the rate its remaining seeds run at}, from the grid's finished runs."""
  return {(arm, task): grid_choice(task, by_lr, grid_seeds)[0]
          for arm, tasks in collect(runs).items() for task, by_lr in tasks.items()}


def task_result(task: str, by_lr: dict, grid_seeds: int = 0) -> dict:
  """One (arm, task): the chosen learning rate's seeds, every metric's spread, failures."""
  best, choices = grid_choice(task, by_lr, grid_seeds)
  records = by_lr[best]
  done = [r for r in records if r.get('status') == 'done']
  # As run: a user's override of the rate beats the recipe's (the grid's key).
  ran = next((r['as_run'] for r in done if r.get('as_run')), {})
  # Packed rows hold a seed-dependent number of examples, so the seeds' step counts differ.
  steps = sorted({r['as_run']['num_steps'] for r in done
                  if r.get('as_run', {}).get('num_steps') is not None})
  if len(steps) > 1:
    ran = {**ran, 'num_steps': steps[0], 'num_steps_max': steps[-1]}
  names = sorted({k for r in done for k in r.get('metrics', {})
                  if isinstance(r['metrics'][k], int | float)})
  score = spread([s for r in done if (s := task_score(task, r.get('metrics', {}))) is not None])
  metrics = {m: spread([float(r['metrics'][m]) for r in done if m in r['metrics']])
             for m in names}
  baseline = (statistics.median(baseline_score(task, r.get('metrics', {})) for r in done)
              if done and TASKS[task].fine_tunes else None)  # an embedder learns nothing here
  return {
      'official_metrics': list(TASKS[task].metrics),
      'learning_rate': ran.get('learning_rate', best),
      'budget': ran,
      'grid_medians': {f'{lr:g}': m for lr, m in choices.items()} if len(choices) > 1 else {},
      'score': score,
      'metrics': metrics,
      'baseline_score': baseline,
      'did_not_learn': learned_nothing(score, baseline, metrics),
      'runs': [{'seed': r.get('seed'), 'status': r.get('status'),
                'wall_clock_s': r.get('wall_clock_s'), **({'error': r['error']}
                                                          if r.get('error') else {})}
               for r in records],
  }


def summarise(runs: list[RunSpec], missing: dict[str, str], meta: dict,
              arm_clocks: dict[str, dict], grid_seeds: int = 0) -> dict:
  """The whole of suite.json; `arm_clocks` gives an arm its pretraining step and minutes;
  `grid_seeds`: the seeds each rate of the grid ran before one was chosen (0: all)."""
  arms, grouped = {}, collect(runs)
  every = [r for tasks in grouped.values() for by_lr in tasks.values()
           for records in by_lr.values() for r in records]
  for arm, tasks in grouped.items():
    results = {task: task_result(task, by_lr, grid_seeds) for task, by_lr in tasks.items()}
    medians = {t: r['score']['median'] for t, r in results.items()}
    glue = [m for t, m in medians.items() if t in GLUE]
    arms[arm] = {'step': None, 'minutes': None, **arm_clocks.get(arm, {}), 'tasks': results,
                 'glue_average': _mean(glue) if glue and None not in glue else None,
                 'average': _mean(list(medians.values()))
                 if medians and None not in medians.values() else None}
  wall = sum(r.get('wall_clock_s') or 0 for r in every)
  wall += sum(a.get('wall_clock_s') or 0  # the intermediate runs the tasks started from
              for a in meta.get('intermediate', {}).get('arms', {}).values())
  counts: dict = {}
  for r in every:
    counts[r['status']] = counts.get(r['status'], 0) + 1
  within = close_calls({arm: {t: r['score'] for t, r in a['tasks'].items()}
                       for arm, a in arms.items()})
  return {**meta, 'missing': missing, 'arms': arms, 'within_seed_spread': within,
          'run_counts': counts, 'runs_wall_clock_s': round(wall, 1)}


def _mean(values: list[float]) -> float:
  return sum(values) / len(values)
