"""suite.json, suite.csv, suite.md and suite.png (and, over pretraining steps, suite_steps.png)
from the summary results.summarise makes; rewritten after every run, so a suite still running
or stopped shows what it has."""

from __future__ import annotations

import csv
import io
import json
import os

from encoder import storage
from encoder.suite import plots
from encoder.suite.catalog import TASKS

FILES = ('suite.json', 'suite.csv', 'suite.md', 'suite.png')


def write(suite_dir: str, summary: dict) -> None:
  storage.makedirs(suite_dir)
  storage.write_atomic(os.path.join(suite_dir, 'suite.json'), json.dumps(summary, indent=2))
  storage.write_atomic(os.path.join(suite_dir, 'suite.csv'), csv_text(summary))
  storage.write_atomic(os.path.join(suite_dir, 'suite.md'), markdown(summary))
  plots.write_plots(suite_dir, summary)


def csv_text(summary: dict) -> str:
  """One row per (arm, task, metric): the seeds' values, their median, min and max."""
  table = io.StringIO(newline='')
  writer = csv.writer(table)
  writer.writerow(['arm', 'step', 'minutes', 'task', 'metric', 'official', 'learning_rate',
                   'seeds', 'median', 'min', 'max', 'done', 'failed'])
  for arm, a in summary['arms'].items():
    for task, t in a['tasks'].items():
      done = sum(r['status'] == 'done' for r in t['runs'])
      failed = sum(r['status'] == 'failed' for r in t['runs'])
      rows = [('score', t['score'])] + list(t['metrics'].items())
      for metric, s in rows:
        writer.writerow([arm, *_clock(a), task, metric,
                         metric in t['official_metrics'] or metric == 'score',
                         t['learning_rate'], ' '.join(f'{v:.6g}' for v in s['seeds']),
                         *(_num(s[k]) for k in ('median', 'min', 'max')), done, failed])
    writer.writerow([arm, *_clock(a), 'average', 'score', True, '',
                     '', _num(a['average']), '', '', '', ''])
  return table.getvalue()


def _clock(arm: dict) -> list:
  """An arm's pretraining step and minutes as CSV cells ('' where it has none)."""
  return ['' if arm.get(k) is None else arm[k] for k in ('step', 'minutes')]


def markdown(summary: dict) -> str:
  tasks = list(dict.fromkeys(t for a in summary['arms'].values() for t in a['tasks']))
  lines = [f"# Suite `{summary['suite']}` on `{summary['init_from']}`", '',
           f"{summary['seeds']} seed(s) per task; dev sets: {summary['dev_sets']}; "
           f"budget: {summary['budget']}.", '',
           'Median over seeds of each task\'s score (x100; the mean of its official metrics), '
           'min-max in brackets.', '']
  if summary.get('pooling'):
    lines[-1:-1] = ['Pooling of the sentence-level heads: ' + '; '.join(
        f'{arm} {how}' for arm, how in summary['pooling'].items()) + '.']
  if summary.get('recipes'):
    lines[-1:-1] = ['Recipe (each row states its learning rate and steps as run): ' + '; '.join(
        f'{arm} {how}' for arm, how in summary['recipes'].items()) + '.']
  if summary.get('intermediate'):
    lines[-1:-1] = [_intermediate_text(summary['intermediate'])]
  header = ['arm', *(TASKS[t].label for t in tasks), 'GLUE avg', 'avg']
  lines += ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
  for arm, a in summary['arms'].items():
    cells = [_cell(a['tasks'].get(t, {}).get('score')) + _grid_rate(a['tasks'].get(t, {}))
             + (' †' if a['tasks'].get(t, {}).get('did_not_learn') else '') for t in tasks]
    name = arm if a.get('minutes') is None else f"{arm} ({a['minutes']:.1f} min)"
    lines.append('| ' + ' | '.join([name, *cells, _pct(a['glue_average']),
                                    _pct(a['average'])]) + ' |')
  if any(t.get('grid_medians') for a in summary['arms'].values() for t in a['tasks'].values()):
    lines += ['', 'lr X: the learning rate each task ran at, chosen from the grid by the best '
              'median dev score (each rate\'s median: `grid_medians` in suite.json).']
  lines += ['', 'Every metric, every seed:', '',
            '| arm | task | metric | lr | steps x batch | seeds | median | min | max |',
            '|' + '---|' * 9]
  for arm, a in summary['arms'].items():
    for task, t in a['tasks'].items():
      for metric in t['official_metrics']:
        s = t['metrics'].get(metric)
        if s and s['seeds']:
          lr = '-' if t['learning_rate'] is None else f"{t['learning_rate']:g}"  # embed: none
          lines.append(f"| {arm} | {task} | {metric} | {lr} | {_steps(t.get('budget'))} | "
                       + ' '.join(f'{v:.4f}' for v in s['seeds'])
                       + f" | {s['median']:.4f} | {s['min']:.4f} | {s['max']:.4f} |")
  flagged = [f"- † `{arm}/{task}` did not learn: {t['did_not_learn']}"
             for arm, a in summary['arms'].items() for task, t in a['tasks'].items()
             if t.get('did_not_learn')]
  if flagged:
    lines += ['', 'Tasks whose score does not clear the no-learning baseline (majority class, '
              'or 0) by more than the seeds\' range:', '', *flagged]
  close = summary.get('within_seed_spread') or []
  if close:
    lines += ['', 'Arm differences within the seeds\' range (no evidence either way):', '',
              *(f"- {c['task']}: {c['arms'][0]} vs {c['arms'][1]}, medians "
                f"{100 * c['difference']:.1f} apart, seed range {100 * c['range']:.1f}"
                for c in close)]
  problems = [f"- `{arm}/{task}` seed {r['seed']}: {r['status']}"
              + (f": {r['error']}" if r.get('error') else '')
              for arm, a in summary['arms'].items() for task, t in a['tasks'].items()
              for r in t['runs'] if r['status'] != 'done']
  if problems:
    lines += ['', 'Runs not done:', '', *problems]
  if summary['missing']:
    lines += ['', 'Missing tasks (not run):', '',
              *(f'- {t}: {why}' for t, why in summary['missing'].items())]
  lines += ['', f"Fine-tuning wall clock, all runs: {summary['runs_wall_clock_s']:.0f} s."]
  return '\n'.join(lines) + '\n'


def _intermediate_text(intermediate: dict) -> str:
  """Which tasks started from an NLI fine-tune of each arm, and how that run went."""
  arms = []
  for arm, run in intermediate['arms'].items():
    if run['accuracy'] is not None:
      arms.append(f"{arm} {_steps(run['as_run'])} at lr {run['as_run']['learning_rate']:g}, "
                  f"held-out accuracy {run['accuracy']:.4f}")
    else:
      arms.append(f"{arm} {run['status']}" + (f" ({run['error']}); its tasks' runs wait for it"
                                              if run['status'] == 'failed' else ''))
  return (f"Intermediate fine-tuning, as RoBERTa's: {', '.join(intermediate['tasks'])} start "
          f"from each arm but scratch first fine-tuned on NLI (`{intermediate['file']}`; one "
          'run, seed 0): ' + '; '.join(arms) + '.')


def _grid_rate(result: dict) -> str:
  """' lr 3e-4' where the task's rate was chosen from a grid, else ''."""
  if not result.get('grid_medians') or result.get('learning_rate') is None:
    return ''
  return f" lr {result['learning_rate']:g}"


def _steps(budget: dict | None) -> str:
  """'94 x 32' (steps x batch as run; '388-412 x 32' where packed seeds ran different step
  counts), or '-' (no fine-tuning, or not run yet)."""
  if not budget or budget.get('num_steps') is None:
    return '-'
  steps, most = budget['num_steps'], budget.get('num_steps_max')
  return f"{f'{steps}-{most}' if most else steps} x {budget['batch_size']}"


def _num(value) -> str:
  return '' if value is None else f'{value:.6g}'


def _pct(value) -> str:
  return '' if value is None else f'{100 * value:.1f}'


def _cell(score: dict | None) -> str:
  if not score or score['median'] is None:
    return ''
  if len(score['seeds']) == 1:
    return _pct(score['median'])
  return f"{_pct(score['median'])} ({_pct(score['min'])}-{_pct(score['max'])})"
