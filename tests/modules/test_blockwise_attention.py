"""The blockwise form equals the explicit one: values and gradients, for every mask it skips
by (global, local windows that do not divide the block or span several tiles, padding, packed
rows, causal, rotary positions through the encoder), with attention dropout, and in bfloat16;
and it keeps what it is for (a band's or a packed row's reach, memory linear in the length)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.modules.attention_mask import AttentionMask
from encoder.modules.blockwise_attention import (
  blockwise_attention,
  dense_keep_mask,
  key_tiles_visited,
)
from encoder.modules.transformer import Encoder
from tests.modules.helpers import blockwise_walk, runs_forms, tiny_config

HEADS, HEAD_DIM = 3, 8


def explicit(query, key, value, mask: AttentionMask, keep=None):
  """The reference: the masked softmax over the whole score matrix, [b, s, h, d]."""
  scores = jnp.einsum('bqhd,bkhd->bhqk', query, key) / np.sqrt(query.shape[-1])
  probs = jax.nn.softmax(jnp.where(mask.dense(), scores, jnp.finfo(jnp.float32).min), -1)
  if keep is not None:
    probs = probs * keep
  return jnp.einsum('bhqk,bkhd->bqhd', probs, value)


def packed_ids(batch, length, rng, tail=4):
  """Rows of examples 2-11 tokens long, ids 1, 2, ..., then `tail` padding tokens (id 0)."""
  seg = np.zeros((batch, length), np.int32)
  for row in range(batch):
    pos, example = 0, 1
    while pos < length - tail:
      size = int(rng.integers(2, 12))
      seg[row, pos:min(pos + size, length - tail)] = example
      pos, example = pos + size, example + 1
  return seg


def make_mask(kind: str, batch: int, length: int, rng) -> AttentionMask:
  # A window of 10 on blocks of 8 takes the band layout (one tile per block); one of 24 is
  # wider than a tile, so its blocks walk several tiles of 8 (`blockwise_walk`).
  causal = 'causal' in kind
  window = 24 if 'wide window' in kind else 10 if 'window' in kind else 0
  if 'packed' in kind:
    seg = packed_ids(batch, length, rng)
    return AttentionMask(jnp.asarray(seg > 0, jnp.int32), jnp.asarray(seg), causal=causal,
                         window=window)
  real = np.ones((batch, length), np.int32)
  if 'padded' in kind:
    for row in range(batch):
      real[row, length - 3 - 9 * row:] = 0  # 3 and 12 padding tokens
  return AttentionMask(jnp.asarray(real), causal=causal, window=window)


def inputs(batch, length, seed=0, dtype=jnp.float32):
  rng = np.random.default_rng(seed)
  return tuple(jnp.asarray(rng.normal(size=(batch, length, HEADS, HEAD_DIM)), dtype)
               for _ in range(3))


def loss_and_grads(fn, q, k, v, weights):
  return jax.jit(jax.value_and_grad(lambda *a: jnp.sum(fn(*a).astype(jnp.float32) * weights),
                                    argnums=(0, 1, 2)))(q, k, v)


# 37 positions in blocks of 8: five blocks, the last one partial; a window of 10 (5 each side)
# does not divide the block. Each kind takes the walk named (`blockwise_walk`): the whole row
# one query block over 5 tiles, the band (one tile a block), or blocks over several tiles.
WALKS = {'global': 'one query block', 'padded': 'one query block', 'window': 'band',
         'padded window': 'band', 'causal': 'query blocks', 'packed': 'query blocks',
         'packed causal': 'query blocks', 'packed window': 'band',
         'wide window': 'query blocks', 'causal wide window': 'query blocks'}


@pytest.mark.parametrize('kind', WALKS)
def test_values_and_gradients_equal_the_explicit_form(kind):
  rng = np.random.default_rng(1)
  mask = make_mask(kind, 2, 37, rng)
  walk, tiles = blockwise_walk(mask, 8)
  assert walk == WALKS[kind] and (tiles == 1 if walk == 'band' else tiles > 1)
  q, k, v = inputs(2, 37)
  # Only real positions are read (a padding query's output is never used).
  real = (mask.input_mask != 0)[:, :, None, None] if 'padded' in kind or 'packed' in kind \
      else jnp.ones((2, 37, 1, 1), bool)
  weights = jnp.asarray(rng.normal(size=q.shape), jnp.float32) * real
  ours = jax.jit(functools.partial(blockwise_attention, mask=mask, block=8))
  got_value, got_grads = loss_and_grads(ours, q, k, v, weights)
  want_value, want_grads = loss_and_grads(functools.partial(explicit, mask=mask), q, k, v,
                                          weights)
  np.testing.assert_allclose(np.asarray(ours(q, k, v)) * real,
                             np.asarray(explicit(q, k, v, mask)) * real, atol=1e-5)
  np.testing.assert_allclose(got_value, want_value, rtol=1e-5)
  for got, want in zip(got_grads, want_grads, strict=True):
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_a_local_layer_visits_its_band_and_a_packed_row_its_examples():
  rng = np.random.default_rng(0)
  # Window 10: each block of queries visits one tile of its block plus the window (rounded
  # to 8), however long the row: the row of 512 is not visited whole.
  for length in (128, 512):
    count, width = key_tiles_visited(make_mask('window', 1, length, rng), 8)
    assert int(count.max()) == 1 and width < length
  # Packed examples of at most 11 tokens: a block of 8 queries spans at most 3 examples'
  # worth of tiles of 8, never the whole row of 24 tiles.
  count, width = key_tiles_visited(make_mask('packed', 2, 192, rng), 8)
  assert width == 8 and 2 <= int(count.max()) <= 4
  # A global layer's row is one query block visiting its real keys: the row with 12 padding
  # tokens of 40 visits 4 tiles of 8, not 5.
  count, width = key_tiles_visited(make_mask('padded', 2, 40, rng), 8)
  np.testing.assert_array_equal(count, [[5], [4]])
  # Causal: query block i visits tiles 0..i.
  count, _ = key_tiles_visited(make_mask('causal', 1, 40, rng), 8)
  np.testing.assert_array_equal(count, [[1, 2, 3, 4, 5]])


def test_dropout_is_the_explicit_form_with_the_same_keep_mask_in_both_passes():
  rng = np.random.default_rng(2)
  mask = make_mask('packed window', 2, 37, rng)
  q, k, v = inputs(2, 37, seed=3)
  key, rate = jax.random.key(7), 0.3
  keep = dense_keep_mask(mask, block=8, heads=HEADS, dropout_rate=rate, dropout_rng=key)
  allowed = np.broadcast_to(np.asarray(mask.dense()), keep.shape)
  dropped = float((np.asarray(keep)[allowed] == 0).mean())
  assert abs(dropped - rate) < 0.05, dropped  # ~3,000 allowed pairs
  real = (mask.input_mask != 0)[:, :, None, None]
  weights = jnp.asarray(rng.normal(size=q.shape), jnp.float32) * real
  ours = functools.partial(blockwise_attention, mask=mask, block=8, dropout_rate=rate,
                           dropout_rng=key)
  got_value, got_grads = loss_and_grads(ours, q, k, v, weights)
  want_value, want_grads = loss_and_grads(functools.partial(explicit, mask=mask, keep=keep),
                                          q, k, v, weights)
  np.testing.assert_allclose(got_value, want_value, rtol=1e-5)
  for got, want in zip(got_grads, want_grads, strict=True):
    np.testing.assert_allclose(got, want, atol=1e-5)
  # Another key draws another mask.
  other = dense_keep_mask(mask, block=8, heads=HEADS, dropout_rate=rate,
                          dropout_rng=jax.random.key(8))
  assert not np.array_equal(np.asarray(other), np.asarray(keep))


def test_bfloat16_keeps_float32_statistics_and_stays_close():
  rng = np.random.default_rng(4)
  mask = make_mask('packed window', 2, 37, rng)
  q, k, v = inputs(2, 37, seed=5)
  out = blockwise_attention(*(t.astype(jnp.bfloat16) for t in (q, k, v)), mask, block=8)
  assert out.dtype == jnp.bfloat16
  real = np.asarray(mask.input_mask != 0)[:, :, None, None]
  # bfloat16 keeps 8 bits of mantissa: 2^-8 of an output of order 1, a few roundings deep.
  np.testing.assert_allclose(np.asarray(out, np.float32) * real,
                             np.asarray(explicit(q, k, v, mask)) * real, atol=3e-2)


def temp_bytes(fn, length):
  q = jax.ShapeDtypeStruct((1, length, HEADS, HEAD_DIM), jnp.float32)
  grad = jax.jit(jax.grad(lambda *a: jnp.sum(fn(*a, length)), argnums=(0, 1, 2)))
  return grad.lower(q, q, q).compile().memory_analysis().temp_size_in_bytes


def test_memory_grows_linearly_with_the_length_not_quadratically():
  def window(fn):
    return lambda q, k, v, n: fn(q, k, v, AttentionMask(jnp.ones((1, n), jnp.int32),
                                                         window=32))
  ours = window(functools.partial(blockwise_attention, block=32))
  # Twice the length: twice the memory (measured 1.71, 3.42, 6.83 MB at 1k, 2k, 4k tokens),
  # where the explicit form's [s, s] scores take four times (151 -> 605 MB from 2k to 4k).
  ratio = temp_bytes(ours, 4096) / temp_bytes(ours, 2048)
  full = temp_bytes(window(explicit), 4096) / temp_bytes(window(explicit), 2048)
  assert ratio < 2.5, ratio
  assert full > 3.5, full


def test_the_encoder_with_rotary_local_layers_and_packed_rows_equals_the_explicit_form():
  # ModernBERT's architecture in small: RoPE on Q and K, a local layer (window 6) beside a
  # global one, packed rows; blocks of 8 on rows of 30 (4 blocks, the last partial).
  base = dict(position_embedding='rope', local_window=6, global_every=2, norm='pre',
              use_bias=False, type_vocab_size=0, max_position_embeddings=64,
              dropout_rate=0.0, attention_dropout_rate=0.0, attention_block_size=8)
  models = {impl: Encoder(tiny_config(**base, attention_impl=impl))
            for impl in ('explicit', 'blockwise')}
  rng = np.random.default_rng(6)
  seg = packed_ids(2, 30, rng)
  ids = jnp.asarray(rng.integers(5, 97, (2, 30)), jnp.int32)
  positions = np.zeros_like(seg)
  for row in range(2):
    for example in set(seg[row]) - {0}:
      where = np.flatnonzero(seg[row] == example)
      positions[row, where] = np.arange(len(where))
  batch = dict(input_mask=jnp.asarray(seg > 0, jnp.int32), input_segmentation=jnp.asarray(seg),
               input_positions=jnp.asarray(positions))
  variables = models['explicit'].init(jax.random.key(0), ids, None, **batch)
  real = jnp.asarray(seg > 0)[..., None]

  def loss(model, params):
    out = model.apply(params, ids, None, **batch).sequence_output
    return jnp.sum(jnp.sin(out) * real)

  with runs_forms(global_='blockwise', local='blockwise'):
    got = jax.jit(jax.value_and_grad(functools.partial(loss, models['blockwise'])))(variables)
  want = jax.jit(jax.value_and_grad(functools.partial(loss, models['explicit'])))(variables)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), got[1], want[1])


def test_blockwise_stands_aside_for_rows_the_explicit_form_serves_as_well():
  from encoder.modules.attention import layer_form
  cfg = tiny_config(attention_impl='blockwise', attention_block_size=8)
  form = lambda n, **kw: layer_form(cfg, AttentionMask(jnp.ones((1, n), jnp.int32)),
                                    dropout=False, probs=False, **kw)
  assert form(8) == 'explicit' and form(9) == 'blockwise'  # one block: nothing to skip
  assert form(16, training=False) == 'explicit'  # a forward pass alone: up to two blocks
  assert form(17, training=False) == 'blockwise'
  assert layer_form(cfg, AttentionMask(jnp.ones((1, 64), jnp.int32)), dropout=True,
                    probs=True) == 'explicit'  # attention maps come from the explicit form
