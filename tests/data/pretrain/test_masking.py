"""Masking statistics over >100k predictions, the cap, special tokens, whole words."""

import numpy as np

from encoder.data.pretrain import masking

VOCAB = 30000


def _config(max_predictions=128, whole_word=False, word_starts=None):
  return masking.MaskConfig(
    mask_rate=0.15, max_predictions=max_predictions, mask_token_prob=0.8, random_token_prob=0.1,
    whole_word=whole_word, mask_id=4, random_ids=np.arange(5, VOCAB, dtype=np.int32),
    word_starts=np.ones(VOCAB, bool) if word_starts is None else word_starts)


def _batch(rows, length=128, seed=0):
  """Rows of [CLS] text [SEP] pad; text lengths vary so rounding averages out."""
  rng = np.random.default_rng(seed)
  n = rng.integers(20, length - 1, rows)
  pos = np.arange(length)[None, :]
  eligible = (pos >= 1) & (pos <= n[:, None])
  ids = np.where(eligible, rng.integers(5, VOCAB, (rows, length)), 0)
  ids[:, 0] = 2
  ids[np.arange(rows), n + 1] = 3
  return ids, eligible


def test_rates_over_100k_predictions():
  ids, eligible = _batch(10000)
  out = masking.apply(ids, eligible, np.random.default_rng(1), _config())
  w = out['masked_weights'] > 0
  assert w.sum() > 100_000
  assert abs(w.sum() / eligible.sum() - 0.15) < 0.005
  rows = np.broadcast_to(np.arange(len(ids))[:, None], w.shape)
  original = ids[rows[w], out['masked_positions'][w]]
  shown = out['input_ids'][rows[w], out['masked_positions'][w]]
  np.testing.assert_array_equal(out['masked_ids'][w], original)
  as_mask, kept = np.mean(shown == 4), np.mean(shown == original)
  assert abs(as_mask - 0.8) < 0.01 and abs(kept - 0.1) < 0.01
  assert abs(1 - as_mask - kept - 0.1) < 0.01  # random replacements
  assert (shown[(shown != 4) & (shown != original)] >= 5).all()  # never a special token
  assert eligible[rows[w], out['masked_positions'][w]].all()  # never [CLS]/[SEP]/padding
  # Positions not selected are untouched.
  changed = out['input_ids'] != ids
  assert changed.sum() == np.sum(shown != original)


def test_cap_and_padding_fields():
  ids, eligible = _batch(500)
  out = masking.apply(ids, eligible, np.random.default_rng(2), _config(max_predictions=10))
  w = out['masked_weights']
  assert out['masked_positions'].shape == (500, 10) and w.dtype == np.float32
  assert (w.sum(1) <= 10).all() and (w.sum(1) == 10).any()
  assert (out['masked_positions'][w == 0] == 0).all() and (out['masked_ids'][w == 0] == 0).all()
  k = np.minimum(10, np.maximum(1, np.round(eligible.sum(1) * 0.15)))
  np.testing.assert_array_equal(w.sum(1), k)
  pos = np.where(w > 0, out['masked_positions'], 10**6 + np.arange(10))  # real ones first
  assert (np.diff(pos, axis=1) > 0).all()  # sorted, distinct


def test_whole_word_masking_never_splits_a_word():
  rng = np.random.default_rng(3)
  word_starts = rng.random(VOCAB) < 0.5
  word_starts[:5] = True
  ids, eligible = _batch(3000, seed=4)
  cfg = _config(max_predictions=20, whole_word=True, word_starts=word_starts)
  chosen = masking.select(ids, eligible, np.random.default_rng(5), cfg)
  assert not chosen[~eligible].any()
  assert (chosen.sum(1) <= masking.num_to_predict(eligible, cfg)).all()
  starts = word_starts[ids] | ~eligible
  starts[:, 1:] |= ~eligible[:, :-1]
  word = np.cumsum(starts, axis=1)
  for r in range(len(ids)):
    for w in np.unique(word[r][eligible[r]]):
      members = chosen[r][(word[r] == w) & eligible[r]]
      assert members.all() or not members.any()
  # Most of the budget is used even though words are taken whole.
  assert chosen.sum() / masking.num_to_predict(eligible, cfg).sum() > 0.9
