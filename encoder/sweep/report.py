"""The sweep's report, rebuilt from the run workdirs alone: sweep.csv, sweep.md, sweep.png (with
the downstream scores of evaluation suites run on the sweep, SWEEP/suites/*/suite.json)."""

from __future__ import annotations

import csv
import io
import json
import os

from encoder import saved_config, storage
from encoder.sweep.status import last_step, read_status
from encoder.train.metric_writer import read_metrics

MAIN_METRIC = {'pretraining': 'mlm_accuracy', 'electra': 'disc_accuracy'}
SUITES_DIR = 'suites'  # where --eval_suite writes its suites on a sweep folder


def collect(sweep_dir: str) -> list[dict]:
  """One record per attempted run directory: its status, overrides, final eval metrics and
  curve. A run still training (or killed mid-write) is read as far as its metrics are whole."""
  records = []
  for name in sorted(storage.listdir(sweep_dir)):
    workdir = os.path.join(sweep_dir, name)
    record = read_status(workdir)
    if not record:
      continue
    evals = read_metrics(workdir, 'eval')
    record['eval_curve'], record['final'] = evals, evals[-1] if evals else {}
    record['steps'] = last_step(workdir)
    config_path = os.path.join(workdir, 'config.json')
    task = 'pretraining'  # a run that never started: its metrics are the train loss's
    if storage.exists(config_path):
      task = saved_config.read_saved(workdir)['task']
    record['main_metric'] = MAIN_METRIC.get(task, 'loss')
    records.append(record)
  return records


def downstream_scores(sweep_dir: str) -> dict[str, dict[str, float | None]]:
  """{arm: {'SUITE:TASK': median score, 'SUITE:avg': ...}} from every evaluation suite run on
  this sweep (`launch.py --eval_suite NAME --config.init_from=SWEEP_DIR` writes
  SWEEP_DIR/suites/NAME/suite.json); arms no run of the sweep has (`scratch`) included."""
  scores: dict[str, dict[str, float | None]] = {}
  suites_dir = os.path.join(sweep_dir, SUITES_DIR)
  if not storage.isdir(suites_dir):
    return scores
  for name in sorted(storage.listdir(suites_dir)):
    path = os.path.join(suites_dir, name, 'suite.json')
    if not storage.isfile(path):
      continue
    for arm, result in json.loads(storage.read_text(path)).get('arms', {}).items():
      row = scores.setdefault(arm, {})
      for task, t in result.get('tasks', {}).items():
        row[f'{name}:{task}'] = t.get('score', {}).get('median')
      row[f'{name}:avg'] = result.get('average')
  return scores


def write_report(sweep_dir: str) -> list[dict]:
  """Rewrites sweep.csv, sweep.md and sweep.png from the run directories; returns their records
  (none, and nothing written, when no run was attempted yet). Downstream scores of the
  evaluation suites run on the sweep are columns beside the pretraining metrics."""
  records = collect(sweep_dir)
  if not records:
    return records
  metric_names = sorted({k for r in records for k in r['final'] if k not in ('step', 'split')})
  downstream = downstream_scores(sweep_dir)
  suite_columns = list(dict.fromkeys(c for row in downstream.values() for c in row))
  header = ['run', 'overrides', 'status', 'steps', 'wall_clock_s', *metric_names, *suite_columns]
  rows = [[r['name'], ' '.join(r.get('overrides', [])), r.get('status', ''), r['steps'],
           r.get('wall_clock_s', ''), *(_fmt(r['final'].get(m)) for m in metric_names),
           *(_fmt(downstream.get(r['name'], {}).get(c)) for c in suite_columns)]
          for r in records]
  names = {r['name'] for r in records}
  rows += [[arm, '(baseline: no pretraining)' if arm == 'scratch' else '', '', '', '',
            *([''] * len(metric_names)), *(_fmt(row.get(c)) for c in suite_columns)]
           for arm, row in downstream.items() if arm not in names]
  table = io.StringIO(newline='')
  writer = csv.writer(table)
  writer.writerow(header)
  writer.writerows(rows)
  storage.write_atomic(os.path.join(sweep_dir, 'sweep.csv'), table.getvalue())
  lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
  lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
  lines += _close_calls(sweep_dir)
  failed = [r for r in records if r.get('status') == 'failed']
  lines += [''] + [f"- `{r['name']}` failed: {r.get('error', '')}" for r in failed]
  storage.write_atomic(os.path.join(sweep_dir, 'sweep.md'), '\n'.join(lines).rstrip() + '\n')
  _plot(records, os.path.join(sweep_dir, 'sweep.png'))
  return records


def _close_calls(sweep_dir: str) -> list[str]:
  """sweep.md's lines naming the downstream differences between arms that are within the
  suites' seed range (each suite.json lists them), so a reader does not rank arms on noise."""
  lines = []
  suites_dir = os.path.join(sweep_dir, SUITES_DIR)
  names = sorted(storage.listdir(suites_dir)) if storage.isdir(suites_dir) else []
  for name in names:
    path = os.path.join(suites_dir, name, 'suite.json')
    if storage.isfile(path):
      for c in json.loads(storage.read_text(path)).get('within_seed_spread', []):
        lines.append(f"- {name}:{c['task']}: {c['arms'][0]} vs {c['arms'][1]} differ by "
                     f"{c['difference']:.4f}, within the seeds' range {c['range']:.4f}")
  return ['', 'Downstream differences within the seed range (no evidence either way):', '',
          *lines] if lines else []


def _fmt(value) -> str:
  return '' if value is None else f'{value:.4f}'


def plot_axes(records: list[dict]) -> list[str]:
  """The x axes of sweep.png: 'step', and 'elapsed_minutes' beside it when every run's held-out
  records carry their wall clock: arms of a wall-clock
  budget take different numbers of steps in the same minutes, so they compare at equal time."""
  points = [e for r in records for e in r['eval_curve']]
  timed = bool(points) and all('elapsed_minutes' in e for e in points)
  return ['step', 'elapsed_minutes'] if timed else ['step']


def _plot(records: list[dict], path: str) -> None:
  image = io.BytesIO()
  sweep_figure(records).savefig(image, format='png', dpi=120)
  storage.write_atomic(path, image.getvalue())


def sweep_figure(records: list[dict]):
  """sweep.png's figure: one row of panels per main metric among the arms (an ELECTRA arm's
  discriminator accuracy is not an MLM accuracy: it gets its own row), one column per x
  axis."""
  from matplotlib.figure import Figure
  metrics = list(dict.fromkeys(r['main_metric'] for r in records))
  axes = plot_axes(records)
  fig = Figure(figsize=(7 * len(axes), 4.5 * len(metrics)), layout='constrained')
  for row, metric in enumerate(metrics):
    for i, x in enumerate(axes):
      ax = fig.add_subplot(len(metrics), len(axes), row * len(axes) + i + 1)
      for r in (r for r in records if r['main_metric'] == metric):
        curve = [(e[x], e[metric]) for e in r['eval_curve'] if metric in e]
        if curve:
          xs, values = zip(*curve, strict=True)
          ax.plot(xs, values, marker='o', markersize=3, label=r['name'])
      ax.set_xlabel('step' if x == 'step' else 'minutes of training (wall clock)')
      ax.set_ylabel(f'held-out {metric}')
      ax.grid(alpha=0.3)
      if ax.lines:
        ax.legend(fontsize=8)
  return fig
