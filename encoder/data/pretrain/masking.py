"""BERT's masked-LM corruption, vectorised over a batch in numpy.

Semantics follow create_pretraining_data.py: choose min(max_predictions, max(1, round(n * rate)))
positions among the n maskable tokens, then replace 80% with [MASK], 10% with a random token and
keep 10%. Whole-word masking picks words in random order and skips a word that would overshoot the
budget, as the original does. One deliberate difference: n counts only maskable tokens (the
original also counted [CLS] and the [SEP]s), so `mask_rate` is exactly the masked share of text.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from encoder.data.pretrain import mask_schedule
from encoder.data.tokenizer import Tokenizer
from encoder.errors import ConfigError

_STATIC_TAG = 0x53544154


@dataclasses.dataclass(frozen=True)
class MaskConfig:
  mask_rate: float
  max_predictions: int
  mask_token_prob: float
  random_token_prob: float
  whole_word: bool
  mask_id: int
  random_ids: np.ndarray  # the ids a "random token" is drawn from (the non-special vocabulary)
  word_starts: np.ndarray  # bool [vocab]


class RowSlice:
  """Draws random numbers for all `total` rows of a global batch and keeps rows [first, first+n).

  Passed as `rng` to `apply`: a host masking its slice of the global batch then draws exactly the
  numbers one process masking the whole batch would, so the global batch does not depend on how
  many hosts share it. (Drawing the unused rows costs a few floats per token, no tokenization.)
  """

  def __init__(self, rng: np.random.Generator, first: int, total: int):
    self.rng, self.first, self.total = rng, first, total

  def _rows(self, full: np.ndarray, shape) -> np.ndarray:
    return full[self.first:self.first + shape[0]]

  def random(self, shape, dtype=np.float64) -> np.ndarray:
    return self._rows(self.rng.random((self.total, *shape[1:]), dtype=dtype), shape)

  def integers(self, low, high, shape) -> np.ndarray:
    return self._rows(self.rng.integers(low, high, (self.total, *shape[1:])), shape)


def num_to_predict(eligible: np.ndarray, cfg: MaskConfig) -> np.ndarray:
  """Per row: how many positions to predict (0 for a row without maskable tokens)."""
  n = eligible.sum(axis=1)
  k = np.minimum(cfg.max_predictions, np.maximum(1, np.round(n * cfg.mask_rate).astype(np.int64)))
  return np.minimum(k, n)


def select(ids: np.ndarray, eligible: np.ndarray, rng: np.random.Generator,
           cfg: MaskConfig) -> np.ndarray:
  """Bool [B, L]: the positions to predict."""
  k = num_to_predict(eligible, cfg)
  keys = rng.random(ids.shape, dtype=np.float32)
  if cfg.whole_word:
    return _select_words(ids, eligible, keys, k, cfg.word_starts)
  keys = np.where(eligible, keys, 2.0)
  # Rank of each position's key within its row: the k smallest keys are a uniform k-subset.
  order = np.argsort(keys, axis=1)
  ranks = np.empty_like(order)
  np.put_along_axis(ranks, order, np.arange(ids.shape[1])[None, :], axis=1)
  return ranks < k[:, None]


def _select_words(ids, eligible, keys, k, word_starts) -> np.ndarray:
  """Whole words in random order, each taken if it still fits the row's budget k."""
  b, length = ids.shape
  starts = word_starts[ids] | ~eligible
  starts[:, 1:] |= ~eligible[:, :-1]  # a piece right after [CLS]/[SEP] starts a word
  word = np.cumsum(starts, axis=1) - 1  # word index of each position, < length
  flat = word + np.arange(b)[:, None] * length
  size = np.bincount(flat.ravel(), weights=eligible.ravel(), minlength=b * length)
  size = size.reshape(b, length).astype(np.int64)
  word_keys = np.where(size > 0, keys, 2.0)  # one key per word slot
  order = np.argsort(word_keys, axis=1)
  sorted_size = np.take_along_axis(size, order, axis=1)
  taken_sorted = np.zeros((b, length), bool)
  used = np.zeros(b, np.int64)
  for r in range(int((size > 0).sum(axis=1).max(initial=0))):
    s = sorted_size[:, r]
    take = (s > 0) & (used + s <= k)
    used += np.where(take, s, 0)
    taken_sorted[:, r] = take
  taken = np.zeros((b, length), bool)
  np.put_along_axis(taken, order, taken_sorted, axis=1)
  return np.take_along_axis(taken, word, axis=1) & eligible


def apply(ids: np.ndarray, eligible: np.ndarray, rng: np.random.Generator,
          cfg: MaskConfig) -> dict[str, np.ndarray]:
  """Masks a batch; returns the corrupted input_ids and the masked_* fields (CONTRACT names)."""
  chosen = select(ids, eligible, rng, cfg)
  length = ids.shape[1]
  pos = np.sort(np.where(chosen, np.arange(length)[None, :], length), axis=1)
  pos = pos[:, :cfg.max_predictions]
  weights = pos < length
  pos = np.where(weights, pos, 0).astype(np.int32)
  original = np.take_along_axis(ids, pos, axis=1)
  u = rng.random(pos.shape, dtype=np.float32)
  random_tokens = cfg.random_ids[rng.integers(0, len(cfg.random_ids), pos.shape)]
  replace = np.where(u < cfg.mask_token_prob + cfg.random_token_prob, random_tokens, original)
  shown = np.where(u < cfg.mask_token_prob, cfg.mask_id, replace)
  out = ids.copy()
  rows = np.broadcast_to(np.arange(ids.shape[0])[:, None], pos.shape)
  out[rows[weights], pos[weights]] = shown[weights]
  return {
    'input_ids': out.astype(np.int32),
    'masked_positions': pos,
    'masked_ids': np.where(weights, original, 0).astype(np.int32),
    'masked_weights': weights.astype(np.float32),
  }


def max_predictions(d) -> int:
  """The width of a batch's masked_* fields: data.max_predictions_per_seq, else the most
  predictions the mask-rate schedule asks of one row (round(length x peak rate))."""
  given = d.max_predictions_per_seq
  return int(given) if given is not None else int(round(d.max_seq_length *
                                                        mask_schedule.peak_rate(d)))


def mask_config(config, tokenizer: Tokenizer) -> MaskConfig:
  """The training masks of step 0 (`at_rate` gives another step's, of the same width)."""
  d = config.data
  mask_schedule.check(d)  # every rate of the schedule in (0, 1)
  max_pred = max_predictions(d)
  if max_pred < 1:
    raise ConfigError(f'data.mask_rate={d.mask_rate} and data.max_predictions_per_seq={max_pred}'
                      ' must give at least one prediction: use 0 < mask_rate < 1')
  if d.mask_token_prob < 0 or d.random_token_prob < 0 or \
     d.mask_token_prob + d.random_token_prob > 1:
    raise ConfigError('data.mask_token_prob + data.random_token_prob must lie in [0, 1]')
  specials = tokenizer.special_ids
  return MaskConfig(
    mask_rate=float(d.mask_rate), max_predictions=max_pred,
    mask_token_prob=float(d.mask_token_prob), random_token_prob=float(d.random_token_prob),
    whole_word=bool(d.whole_word_masking), mask_id=tokenizer.mask_id,
    random_ids=np.setdiff1d(np.arange(tokenizer.vocab_size), specials).astype(np.int32),
    word_starts=tokenizer.word_starts)


def at_rate(cfg: MaskConfig, rate: float) -> MaskConfig:
  """`cfg` masking `rate` of each row's tokens, its fields' width unchanged."""
  return cfg if rate == cfg.mask_rate else dataclasses.replace(cfg, mask_rate=float(rate))


def static_masks(instances, config, tokenizer, seed, build_rows) -> dict[str, np.ndarray]:
  """Masks fixed once per instance (dupe_factor copies differ), from `seed`, in chunks;
  `build_rows(instances)` gives their padded rows (pairs or packed: see shard_worker)."""
  cfg = mask_config(config, tokenizer)
  rng = np.random.default_rng([seed, _STATIC_TAG])
  parts = []
  for i in range(0, len(instances), 4096):
    batch = build_rows(instances[i:i + 4096])
    m = apply(batch['input_ids'], batch['eligible'], rng, cfg)
    shown = np.take_along_axis(m['input_ids'], m['masked_positions'], axis=1)
    parts.append({'masked_positions': m['masked_positions'], 'masked_ids': m['masked_ids'],
                  'shown': np.where(m['masked_weights'] > 0, shown, 0),
                  'weights': m['masked_weights'] > 0})
  return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {}


def overlay(input_ids: np.ndarray, static: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Applies stored masks to freshly materialised rows."""
  weights = static['weights']
  pos = static['masked_positions']
  out = input_ids.copy()
  rows = np.broadcast_to(np.arange(len(out))[:, None], pos.shape)
  out[rows[weights], pos[weights]] = static['shown'][weights]
  return {'input_ids': out, 'masked_positions': pos.astype(np.int32),
          'masked_ids': static['masked_ids'].astype(np.int32),
          'masked_weights': weights.astype(np.float32)}
