"""Retrieval metrics against trec_eval (through pytrec_eval, what BEIR and MTEB call) when it is
installed, and against hand-computed values always."""

import importlib.util
import math

import numpy as np
import pytest

from encoder.embedding import ir_metrics


def test_hand_computed_values():
  run = {'q': {'a': 0.9, 'b': 0.8, 'c': 0.7, 'd': 0.1}}
  qrels = {'q': {'b': 1, 'd': 2, 'z': 1}}
  got = ir_metrics.evaluate(run, qrels, ('ndcg@3', 'recall@3', 'mrr@10', 'recall@4'))
  # b at rank 2 (gain 1), d at rank 4: past the cut; ideal: 2, 1, 1 at ranks 1-3.
  ideal = 2 + 1 / math.log2(3) + 1 / math.log2(4)
  assert got['ndcg@3'] == pytest.approx((1 / math.log2(3)) / ideal)
  assert got['recall@3'] == pytest.approx(1 / 3) and got['recall@4'] == pytest.approx(2 / 3)
  assert got['mrr@10'] == pytest.approx(0.5)


def test_ties_go_to_the_higher_document_id_and_unjudged_queries_are_skipped():
  run = {'q': {'a': 0.5, 'b': 0.5}, 'other': {'a': 1.0}}
  assert ir_metrics.ranked(run['q']) == ['b', 'a']
  assert ir_metrics.evaluate(run, {'q': {'a': 1}}, ('mrr@10',))['mrr@10'] == 0.5


@pytest.mark.skipif(importlib.util.find_spec('pytrec_eval') is None,
                    reason='pytrec-eval-terrier is a reference, never a requirement')
def test_equal_to_trec_eval_on_a_random_run():
  import pytrec_eval
  rng = np.random.default_rng(0)
  docs = [f'd{i}' for i in range(300)]
  run, qrels = {}, {}
  for q in range(40):
    scores = rng.random(len(docs))
    run[f'q{q}'] = {d: float(s) for d, s in zip(docs, scores, strict=True)}
    judged = rng.choice(len(docs), size=rng.integers(1, 12), replace=False)
    qrels[f'q{q}'] = {docs[j]: int(rng.integers(1, 3)) for j in judged}
  ours = ir_metrics.evaluate(run, qrels, ('ndcg@10', 'recall@100', 'mrr@10'))
  evaluator = pytrec_eval.RelevanceEvaluator(qrels, {'ndcg_cut.10', 'recall.100'})
  per_query = evaluator.evaluate(run)
  assert ours['ndcg@10'] == pytest.approx(np.mean([v['ndcg_cut_10'] for v in per_query.values()]),
                                          abs=1e-12)
  assert ours['recall@100'] == pytest.approx(
      np.mean([v['recall_100'] for v in per_query.values()]), abs=1e-12)
  # MRR@10: trec_eval's reciprocal rank over each query's top 10 only.
  top10 = {q: {d: scores[d] for d in ir_metrics.ranked(scores)[:10]} for q, scores in run.items()}
  rr = pytrec_eval.RelevanceEvaluator(qrels, {'recip_rank'}).evaluate(top10)
  assert ours['mrr@10'] == pytest.approx(np.mean([v['recip_rank'] for v in rr.values()]),
                                         abs=1e-12)
