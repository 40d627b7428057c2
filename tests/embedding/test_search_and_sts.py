"""Exact search in corpus blocks equals a full sort; Spearman and Pearson equal scipy's."""

import numpy as np
import pytest

from encoder.embedding import search, sts


@pytest.mark.parametrize('block, k', [(7, 5), (64, 20), (1000, 200)])
def test_blocked_top_k_equals_sorting_every_score(block, k):
  rng = np.random.default_rng(1)
  queries, corpus = rng.normal(size=(9, 16)), rng.normal(size=(150, 16))
  scores, where = search.top_k(queries, (corpus[i:i + block] for i in range(0, 150, block)), k)
  full = queries @ corpus.T
  kept = min(k, 150)
  # The k best scores, best first, and each index's own score (near-ties may swap order).
  np.testing.assert_allclose(scores[:, :kept], np.sort(full, axis=1)[:, ::-1][:, :kept],
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.take_along_axis(full, where[:, :kept], axis=1),
                             scores[:, :kept], rtol=1e-5, atol=1e-5)
  assert all(len(set(row[:kept])) == kept for row in where)
  if k > 150:  # fewer documents than k: the rest is empty
    assert (where[:, 150:] == -1).all() and np.isneginf(scores[:, 150:]).all()


def test_ranks_average_ties():
  np.testing.assert_array_equal(sts.ranks(np.array([3.0, 1.0, 3.0, 2.0])), [3.5, 1, 3.5, 2])


def test_correlations_equal_scipys():  # scipy comes with jax, so this always runs
  from scipy import stats
  rng = np.random.default_rng(2)
  a = rng.normal(size=200)
  b = np.round(a + rng.normal(size=200), 1)  # rounded: ties
  assert sts.spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)
  assert sts.pearson(a, b) == pytest.approx(stats.pearsonr(a, b).statistic, abs=1e-12)
