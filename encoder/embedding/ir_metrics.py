"""nDCG@k, Recall@k and MRR@k of a ranking against relevance judgements, as trec_eval counts
them (BEIR and MTEB call trec_eval through pytrec_eval; tests/embedding compares with it).

A run is {query: {document: score}}, qrels {query: {document: relevance}}. Documents are ranked
by score, highest first; equal scores by document id, highest first (trec_eval's order). Only
queries with judgements are scored, and a query of the qrels the run lacks scores 0; the
result is the mean over the judged queries. nDCG uses the graded relevance as the gain
(rel / log2(rank + 1)) against the ideal ordering of that query's judgements; Recall@k and
MRR@k count documents with relevance > 0.
"""

from __future__ import annotations

import math


def ranked(scores: dict[str, float]) -> list[str]:
  """Documents by score, highest first; ties by document id, highest first (trec_eval)."""
  return [doc for doc, _ in sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]


def ndcg(ranking: list[str], judged: dict[str, int], k: int) -> float:
  gains = [judged.get(doc, 0) for doc in ranking[:k]]
  dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains) if g > 0)
  ideal = sorted((r for r in judged.values() if r > 0), reverse=True)[:k]
  idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
  return dcg / idcg if idcg else 0.0


def recall(ranking: list[str], judged: dict[str, int], k: int) -> float:
  relevant = {doc for doc, r in judged.items() if r > 0}
  return len(relevant.intersection(ranking[:k])) / len(relevant) if relevant else 0.0


def mrr(ranking: list[str], judged: dict[str, int], k: int) -> float:
  for i, doc in enumerate(ranking[:k]):
    if judged.get(doc, 0) > 0:
      return 1.0 / (i + 1)
  return 0.0


METRICS = {'ndcg': ndcg, 'recall': recall, 'mrr': mrr}


def evaluate(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]],
             measures: tuple[str, ...] = ('ndcg@10', 'recall@100', 'mrr@10')) -> dict:
  """{measure: mean over the judged queries}, measures named `<ndcg|recall|mrr>@<k>`."""
  judged = {q: docs for q, docs in qrels.items() if any(r > 0 for r in docs.values())}
  out = {}
  for measure in measures:
    name, _, k = measure.partition('@')
    fn = METRICS[name]
    values = [fn(ranked(run.get(q, {})), docs, int(k)) for q, docs in judged.items()]
    out[measure] = sum(values) / len(values) if values else 0.0
  return out
