"""Semantic textual similarity: how well the cosine of two sentences' embeddings orders scored
pairs (Spearman's rank correlation, the number STS benchmarks and MTEB report; Pearson too)."""

from __future__ import annotations

import csv

import numpy as np

from encoder import storage
from encoder.errors import DataError


def read_pairs(path: str) -> tuple[list[str], list[str], np.ndarray]:
  """(sentences1, sentences2, scores) of a TSV with a `sentence1, sentence2, score` header
  (the STS Benchmark's own columns)."""
  rows = list(csv.DictReader(storage.read_text(path).splitlines(), delimiter='\t',
                             quoting=csv.QUOTE_NONE))
  needed = {'sentence1', 'sentence2', 'score'}
  if not rows or not needed <= set(rows[0]):
    raise DataError(f"'{path}' needs a header with sentence1, sentence2 and score columns")
  return ([r['sentence1'] for r in rows], [r['sentence2'] for r in rows],
          np.array([float(r['score']) for r in rows]))


def ranks(x: np.ndarray) -> np.ndarray:
  """1-based ranks, ties given their average rank (as Spearman's correlation needs)."""
  order = np.argsort(x, kind='stable')
  sorted_x = x[order]
  starts = np.r_[0, np.flatnonzero(np.diff(sorted_x)) + 1]
  ends = np.r_[starts[1:], len(x)]
  average = (starts + ends + 1) / 2.0  # mean of the 1-based positions start+1 .. end
  out = np.empty(len(x))
  out[order] = np.repeat(average, ends - starts)
  return out


def pearson(a: np.ndarray, b: np.ndarray) -> float:
  return float(np.corrcoef(a, b)[0, 1])


def spearman(a: np.ndarray, b: np.ndarray) -> float:
  return pearson(ranks(np.asarray(a, float)), ranks(np.asarray(b, float)))


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Row-wise cosine similarity of two [n, dim] arrays."""
  a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
  b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
  return (a * b).sum(axis=1)
