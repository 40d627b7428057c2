"""Reading medians against their seeds' spread, for the suite's and the sweep's reports.

A fine-tuning score moves by a point or more between seeds on small GLUE sets (Dodge et al.,
2020), so a difference between two arms smaller than the seeds' own range is no evidence for
either, and a median inside its range of the no-learning baseline says the run learned nothing.
The spread used is the range (max - min) of the seeds' values: with few seeds it is the honest
summary, and it needs no distributional assumption.
"""

from __future__ import annotations

import itertools
import statistics


def spread(values: list[float]) -> dict:
  """The seeds' values, their median, min and max (None where there are none)."""
  if not values:
    return {'seeds': [], 'median': None, 'min': None, 'max': None}
  return {'seeds': values, 'median': statistics.median(values), 'min': min(values),
          'max': max(values)}


def seed_range(s: dict) -> float:
  return s['max'] - s['min'] if s.get('seeds') else 0.0


def did_not_learn(score: dict, baseline: float | None) -> bool:
  """Whether the median is within its seeds' range of (or below) the baseline's score."""
  if score.get('median') is None or baseline is None:
    return False
  return score['median'] - baseline <= seed_range(score)


def within_spread(a: dict, b: dict) -> bool | None:
  """Whether two medians differ by no more than the wider of their seeds' ranges; None when
  either side has fewer than two seeds (no range to judge by)."""
  if len(a.get('seeds', [])) < 2 or len(b.get('seeds', [])) < 2:
    return None
  return abs(a['median'] - b['median']) <= max(seed_range(a), seed_range(b))


def close_calls(scores: dict[str, dict[str, dict]]) -> list[dict]:
  """{arm: {task: score spread}} -> every (task, pair of arms) whose medians differ by no more
  than the seeds' range: {'task', 'arms', 'difference', 'range'}."""
  calls = []
  tasks = list(dict.fromkeys(t for by_task in scores.values() for t in by_task))
  for task in tasks:
    arms = [a for a in scores if task in scores[a]]
    for first, second in itertools.combinations(arms, 2):
      a, b = scores[first][task], scores[second][task]
      if within_spread(a, b):
        calls.append({'task': task, 'arms': [first, second],
                      'difference': round(abs(a['median'] - b['median']), 6),
                      'range': round(max(seed_range(a), seed_range(b)), 6)})
  return calls
