"""The suite's figures: suite.png (each task's median score per arm, bars from min to max over
the seeds) and, when the arms are steps of one pretraining run, suite_steps.png (downstream
score against pretraining step, a line per task and the average; against the minutes of the
run's training clock, steps on the top axis, where the run had a wall-clock budget: arms of
one budget compare by the time they cost)."""

from __future__ import annotations

import io
import itertools
import os

import numpy as np

from encoder import storage
from encoder.suite.catalog import TASKS


def write_plots(suite_dir: str, summary: dict) -> None:
  arms = summary['arms']
  if not arms:
    return
  _save(_bars(arms), os.path.join(suite_dir, 'suite.png'))
  stepped = {a: v for a, v in arms.items() if v['step'] is not None}
  if len(stepped) > 1:
    _save(_over_steps(stepped, arms.get('scratch')), os.path.join(suite_dir, 'suite_steps.png'))


def _bars(arms: dict):
  from matplotlib.figure import Figure  # lazy: matplotlib only when a report is drawn
  tasks = list(dict.fromkeys(t for a in arms.values() for t in a['tasks']))
  fig = Figure(figsize=(max(5, 1.3 * len(tasks) * max(1, len(arms)) / 2 + 2), 4),
               layout='constrained')
  ax = fig.add_subplot()
  width = 0.8 / len(arms)
  for i, (arm, a) in enumerate(arms.items()):
    xs, medians, low, high = [], [], [], []
    for j, task in enumerate(tasks):
      score = a['tasks'].get(task, {}).get('score', {})
      if score.get('median') is None:
        continue
      xs.append(j + (i - (len(arms) - 1) / 2) * width)
      medians.append(100 * score['median'])
      low.append(100 * (score['median'] - score['min']))
      high.append(100 * (score['max'] - score['median']))
    ax.bar(xs, medians, width, yerr=[low, high], capsize=3, label=arm)
  ax.set_xticks(range(len(tasks)), [TASKS[t].label for t in tasks], fontsize=8)
  ax.set_ylabel('dev score x100 (median; min-max over seeds)')
  ax.grid(axis='y', alpha=0.3)
  ax.legend(fontsize=8)
  return fig


def _over_steps(stepped: dict, scratch: dict | None):
  from matplotlib.figure import Figure  # lazy: as above
  fig = Figure(figsize=(7, 4.5), layout='constrained')
  ax = fig.add_subplot()
  ordered = sorted(stepped.values(), key=lambda a: a['step'])
  steps = [a['step'] for a in ordered]
  minutes = [a.get('minutes') for a in ordered]
  timed = None not in minutes and all(a < b for a, b in itertools.pairwise(minutes))
  xs = minutes if timed else steps
  tasks = list(dict.fromkeys(t for a in ordered for t in a['tasks']))
  for task in tasks:
    values = [a['tasks'].get(task, {}).get('score', {}).get('median') for a in ordered]
    line, = ax.plot(xs, [None if v is None else 100 * v for v in values], marker='o',
                    markersize=3, label=TASKS[task].label)
    baseline = ((scratch or {}).get('tasks', {}).get(task) or {}).get('score', {}).get('median')
    if baseline is not None:  # each task's scratch twin, in the task's colour
      ax.axhline(100 * baseline, color=line.get_color(), linestyle=':', linewidth=1)
  averages = [a['average'] for a in ordered]
  ax.plot(xs, [None if v is None else 100 * v for v in averages], color='black',
          linewidth=2, marker='o', label='average')
  if scratch and scratch.get('average') is not None:
    ax.axhline(100 * scratch['average'], color='gray', linestyle='--',
               label='scratch (dotted: per task)')
  if timed:
    ax.set_xlabel("pretraining minutes (the run's training clock)")
    top = ax.secondary_xaxis('top', functions=(_linear(minutes, steps), _linear(steps, minutes)))
    top.set_xlabel('pretraining step')
  else:
    ax.set_xlabel('pretraining step')
  ax.set_ylabel('dev score x100 (median over seeds)')
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  return fig


def _linear(xp: list[float], fp: list[float]):
  """The piecewise-linear map through (xp, fp), xp increasing, extended past both ends along
  its end segments (np.interp alone would flatten there, and an axis needs a map that is
  one-to-one wherever the plot's limits fall)."""
  def f(x):
    x = np.asarray(x, dtype=float)
    below = fp[0] + (x - xp[0]) * (fp[1] - fp[0]) / (xp[1] - xp[0])
    above = fp[-1] + (x - xp[-1]) * (fp[-1] - fp[-2]) / (xp[-1] - xp[-2])
    return np.where(x < xp[0], below, np.where(x > xp[-1], above, np.interp(x, xp, fp)))
  return f


def _save(fig, path: str) -> None:
  image = io.BytesIO()
  fig.savefig(image, format='png', dpi=120)
  storage.write_atomic(path, image.getvalue())
