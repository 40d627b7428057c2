"""The contrastive losses against independent implementations: a NumPy transcription of the
formulas (InfoNCE over in-batch and hard negatives, CoSENT), and sentence-transformers' own
losses on the same vectors when it is installed (a reference, never a requirement)."""

import importlib.util
import types

import jax.numpy as jnp
import numpy as np
import pytest

from encoder.tasks import contrastive

SETTINGS = dict(scale=20.0, symmetric=False, matryoshka_dims='', loss='mnrl', num_negatives=1)


def _settings(**kw):
  return types.SimpleNamespace(**{**SETTINGS, **kw})


def _batch(rows=6, k=1, seed=0):
  rng = np.random.default_rng(seed)
  outputs = {'anchor': rng.normal(size=(rows, 8)), 'positive': rng.normal(size=(rows, 8)),
             'negative': rng.normal(size=(rows, k, 8))}
  batch = {'weight': np.ones(rows, np.float32), 'group': np.arange(rows, dtype=np.int32),
           'score': rng.uniform(0, 5, rows).astype(np.float32),
           'negative_mask': np.ones((rows, k, 4), np.int32)}
  return {k: v.astype(np.float32) for k, v in outputs.items()}, batch


def _unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def numpy_mnrl(outputs, batch, scale=20.0, symmetric=False):
  """InfoNCE written out: anchor i scores every usable positive (another example of the same
  anchor is no negative; weight 0 rows are no candidates) and every real hard negative."""
  a, p = _unit(outputs['anchor']), _unit(outputs['positive'])
  n = _unit(outputs['negative']).reshape(-1, a.shape[1])
  w, g = batch['weight'], batch['group']
  real_neg = ((batch['negative_mask'].sum(-1) > 0) & (w[:, None] > 0)).reshape(-1)
  losses = []
  for i in range(len(a)):
    if w[i] == 0:
      losses.append(0.0)
      continue
    cands = [j for j in range(len(a)) if w[j] > 0 and (g[j] != g[i] or j == i)]
    logits = np.concatenate([scale * p[cands] @ a[i], scale * n[real_neg] @ a[i]])
    forward = -_log_softmax(logits)[cands.index(i)]
    if symmetric:
      back = -_log_softmax(scale * a[cands] @ p[i])[cands.index(i)]
      forward = (forward + back) / 2
    losses.append(forward)
  return float(np.dot(losses, w) / w.sum())


def numpy_cosent(outputs, batch, scale=20.0):
  cos = (_unit(outputs['anchor']) * _unit(outputs['positive'])).sum(-1) * scale
  s, w = batch['score'], batch['weight']
  terms = [0.0] + [cos[j] - cos[i] for i in range(len(s)) for j in range(len(s))
                   if s[i] > s[j] and w[i] > 0 and w[j] > 0]
  return float(np.log(np.exp(terms).sum()))


def _ours(outputs, batch, **settings):
  jb = {k: jnp.asarray(v) for k, v in batch.items()}
  loss, sums = contrastive.loss_and_metrics({k: jnp.asarray(v) for k, v in outputs.items()}, jb,
                                            settings=_settings(**settings))
  return float(loss), sums


@pytest.mark.parametrize('symmetric', [False, True])
def test_mnrl_equals_the_written_out_formula_with_padding_duplicates_and_negatives(symmetric):
  outputs, batch = _batch(rows=7, k=2)
  batch['weight'][5] = 0.0  # a filler row: no anchor, no candidate
  batch['group'][3] = batch['group'][1]  # one anchor, two positives: not each other's negative
  batch['negative_mask'][2, 1] = 0  # an absent hard negative
  ours, sums = _ours(outputs, batch, symmetric=symmetric)
  np.testing.assert_allclose(ours, numpy_mnrl(outputs, batch, symmetric=symmetric), rtol=1e-5)
  assert float(sums['count']) == 6


def test_cosent_and_matryoshka_equal_the_formulas():
  outputs, batch = _batch(rows=8)
  batch['weight'][2] = 0.0
  np.testing.assert_allclose(_ours(outputs, batch, loss='cosent')[0],
                             numpy_cosent(outputs, batch), rtol=1e-5)
  # Matryoshka: the loss at full width plus the loss of the first 4 dimensions, renormalised.
  truncated = {k: v[..., :4] for k, v in outputs.items()}
  np.testing.assert_allclose(_ours(outputs, batch, matryoshka_dims='4')[0],
                             numpy_mnrl(outputs, batch) + numpy_mnrl(truncated, batch),
                             rtol=1e-5)


@pytest.mark.skipif(importlib.util.find_spec('sentence_transformers') is None,
                    reason='sentence-transformers (a reference only) is not installed')
def test_losses_equal_sentence_transformers_own():
  import torch
  from sentence_transformers import losses

  class Fixed(torch.nn.Module):
    """A 'model' that hands the losses fixed vectors, one batch per input feature dict."""

    def forward(self, features):
      return {'sentence_embedding': features['vectors']}

  outputs, batch = _batch(rows=6, k=1, seed=3)
  features = [{'vectors': torch.tensor(outputs['anchor'])},
              {'vectors': torch.tensor(outputs['positive'])},
              {'vectors': torch.tensor(outputs['negative'][:, 0])}]
  mnrl = losses.MultipleNegativesRankingLoss(Fixed(), scale=20.0)
  np.testing.assert_allclose(_ours(outputs, batch)[0], float(mnrl(features, None)), rtol=1e-5)
  symmetric = losses.MultipleNegativesSymmetricRankingLoss(Fixed(), scale=20.0)
  no_negatives = {k: v for k, v in outputs.items() if k != 'negative'}
  np.testing.assert_allclose(_ours(no_negatives, batch, symmetric=True)[0],
                             float(symmetric(features[:2], None)), rtol=1e-5)
  cosent = losses.CoSENTLoss(Fixed(), scale=20.0)
  np.testing.assert_allclose(_ours(outputs, batch, loss='cosent')[0],
                             float(cosent(features[:2], torch.tensor(batch['score']))), rtol=1e-5)


def test_retrieval_scores_rank_each_anchor_among_every_positive():
  rng = np.random.default_rng(0)
  anchor, positive = _unit(rng.normal(size=(9, 5))), _unit(rng.normal(size=(9, 5)))
  group = np.array([0, 0, 1, 2, 3, 4, 5, 6, 7])
  scores, ranks = contrastive.retrieval_scores(anchor, positive, group, block=4)
  sims = anchor @ positive.T
  hits, rr = [], []
  for i in (0, 2, 3, 4, 5, 6, 7, 8):  # each group's first example is its query
    order = np.argsort(-sims[i])
    first = next(r for r, j in enumerate(order) if group[j] == group[i]) + 1
    hits.append(first == 1)
    rr.append(1 / first if first <= 10 else 0.0)
  assert scores == pytest.approx({'accuracy': np.mean(hits), 'mrr@10': np.mean(rr)})
  own = [1 + sum(sims[i, j] > sims[i, i] for j in range(9) if group[j] != group[i])
         for i in range(9)]
  np.testing.assert_array_equal(ranks, own)
