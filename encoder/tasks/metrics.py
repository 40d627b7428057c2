"""Classification metrics in numpy: accuracy, binary F1, MCC, Pearson and Spearman.

Computed once per evaluation on the host from whole predictions, because F1, MCC and the
correlations are not sums over examples (they cannot be psum-ed per batch and divided later).
"""

from __future__ import annotations

import numpy as np


def accuracy(gold: np.ndarray, pred: np.ndarray) -> float:
  return float(np.mean(np.asarray(gold) == np.asarray(pred))) if len(gold) else 0.0


def binary_f1(gold: np.ndarray, pred: np.ndarray, positive: int = 1) -> float:
  """F1 of the positive class (GLUE's MRPC/QQP convention); 0 when it is never predicted."""
  gold, pred = np.asarray(gold) == positive, np.asarray(pred) == positive
  tp = float(np.sum(gold & pred))
  denominator = float(np.sum(gold) + np.sum(pred))
  return 2 * tp / denominator if denominator else 0.0


def mcc(gold: np.ndarray, pred: np.ndarray) -> float:
  """Matthews correlation, multi-class form (Gorodkin 2004); 0 when undefined, as sklearn."""
  gold, pred = np.asarray(gold), np.asarray(pred)
  labels = np.union1d(gold, pred)
  confusion = np.zeros((len(labels), len(labels)), np.float64)
  np.add.at(confusion, (np.searchsorted(labels, gold), np.searchsorted(labels, pred)), 1)
  t, p = confusion.sum(1), confusion.sum(0)
  c, s = np.trace(confusion), confusion.sum()
  denominator = np.sqrt((s * s - p @ p) * (s * s - t @ t))
  return float((c * s - t @ p) / denominator) if denominator else 0.0


def pearson(x: np.ndarray, y: np.ndarray) -> float:
  """Pearson's r; 0 when either side is constant (undefined)."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  x, y = x - x.mean(), y - y.mean()
  denominator = np.sqrt((x @ x) * (y @ y))
  return float(x @ y / denominator) if denominator else 0.0


def rankdata(x: np.ndarray) -> np.ndarray:
  """1-based ranks with ties given their average rank (scipy's default 'average')."""
  x = np.asarray(x)
  order = np.argsort(x, kind='stable')
  sorted_x = x[order]
  starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
  ends = np.r_[starts[1:], len(x)]
  average = (starts + ends + 1) / 2.0  # mean of the 1-based ranks starts+1 .. ends
  ranks = np.empty(len(x), np.float64)
  ranks[order] = np.repeat(average, ends - starts)
  return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
  """Spearman's rho: Pearson's r of the (tie-averaged) ranks."""
  return pearson(rankdata(x), rankdata(y))


def classification_scores(gold: np.ndarray, pred: np.ndarray, metrics: tuple[str, ...]) -> dict:
  """The named metrics of integer labels (`accuracy`, `f1`, `mcc`)."""
  fns = {'accuracy': accuracy, 'f1': binary_f1, 'mcc': mcc}
  return {name: fns[name](gold, pred) for name in metrics}


def regression_scores(gold: np.ndarray, pred: np.ndarray) -> dict:
  return {'pearson': pearson(gold, pred), 'spearman': spearman(gold, pred),
          'mse': float(np.mean((np.asarray(gold) - np.asarray(pred)) ** 2)) if len(gold) else 0.0}


def baseline_scores(gold: np.ndarray, metrics: tuple[str, ...] = (),
                    regression: bool = False) -> dict:
  """What a model that learned nothing scores on this eval set, as `baseline_<metric>`:
  predicting the set's most frequent class (accuracy, F1; its MCC is 0, not logged), or, for
  regression,
  its mean (the squared error is the targets' variance; correlations of a constant are 0).
  The suite flags a task whose score does not clear these ("did not learn")."""
  gold = np.asarray(gold)
  if regression:
    return {'baseline_mse': float(np.var(gold.astype(np.float64))) if len(gold) else 0.0}
  if not len(gold):
    return {f'baseline_{m}': 0.0 for m in metrics}
  values, counts = np.unique(gold, return_counts=True)
  constant = np.full_like(gold, values[np.argmax(counts)])
  kept = tuple(m for m in metrics if m != 'mcc')  # a constant prediction's MCC is 0 by definition
  return {f'baseline_{k}': v for k, v in classification_scores(gold, constant, kept).items()}
