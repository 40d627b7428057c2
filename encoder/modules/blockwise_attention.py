"""Attention in tiles with an online softmax, visiting only the keys a mask can reach.

The flash form (Rabe and Staats, 2021, "Self-attention does not need O(n^2) memory"; Dao et
al., 2022) in plain JAX, so it runs on every backend. Queries are cut into blocks; step t of a
loop gives every query block at once its t-th tile of keys (one batched product over all
query blocks, heads and rows); a softmax over the keys seen so far is kept as its running
maximum and sum (float32), and the output is rescaled as the maximum grows. A tile is a run of
consecutive keys starting where the block's queries first reach, so what a layer costs is what
its mask keeps, rounded up to whole tiles:

- a global layer (every query sees the row's real keys) makes the whole row one query block
  and walks the real keys in tiles of `block`: one tall [s, block] product per row and head a
  step, memory linear in the length, a padded row's padding never visited;
- a local layer gives each block of queries one tile spanning its band (the block plus the
  window), so the loop runs once, however long the row;
- packed rows and causal masks cut queries into blocks of `block` too, each walking only the
  key tiles its queries' examples (or earlier positions) reach.

Which keys a query block reaches comes from `AttentionMask.key_extent` (computed from the
data, so the loop runs as many steps as the farthest reach in the batch); which pairs inside a
tile are allowed, from `attention_mask.allows`, so the result is exactly the masked softmax.

The backward is a custom VJP that walks the same tiles again and recomputes their
probabilities from the saved log-sum-exp: nothing [s, s]-sized is kept between forward and
backward. Attention dropout draws each tile's keep mask from the layer's key folded with the
step t, in the forward and again in the backward, so both see the same mask.

Shape letters: see `encoder.modules`; n counts query blocks, c is a block's queries and w a
tile's keys.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from encoder.modules.attention_mask import AttentionMask, allows

F32 = jnp.float32
BAND_BLOCK = 64  # queries per block of a local layer: its tile is this plus the window wide


class _Static(NamedTuple):
  """What the kernel's trace depends on (hashable: custom_vjp's static argument)."""
  q_block: int  # queries per block
  width: int  # keys per tile
  length: int  # the row's real length (positions past it are padding up to whole blocks)
  padded: int  # the padded length
  packed: bool
  causal: bool
  window: int
  band: bool  # one tile per query block, spanning the block and its window
  dropout_rate: float


class _Plan(NamedTuple):
  """Which keys each query block visits, and the ids tiles are masked by."""
  start: jax.Array  # [b, n] int32: the first key of the block's first tile
  count: jax.Array  # [b, n] int32: how many tiles (consecutive, `width` apart; 0: none)
  query_ids: jax.Array  # [b, n, c] int32: `AttentionMask.key_ids` of the block's queries
  key_ids: jax.Array  # [b, padded] int32: ... of every key (-1 past the length)


def _layout(mask: AttentionMask, block: int, dropout_rate: float = 0.0) -> _Static:
  """How a row of `mask`'s length is cut: see the module's docstring."""
  s = mask.length
  keys = -(-s // block) * block
  q_block = min(block, BAND_BLOCK)
  band_width = -(-(q_block + mask.window + 1) // 8) * 8
  band = bool(mask.window) and band_width < s
  if band:
    padded = -(-s // q_block) * q_block
    width = min(band_width, padded)
  elif mask.packed or mask.window or mask.causal:
    q_block, padded, width = block, keys, block
  else:
    q_block, padded, width = keys, keys, block
  return _Static(q_block=q_block, width=width, length=s, padded=padded, packed=mask.packed,
                 causal=mask.causal, window=mask.window, band=band,
                 dropout_rate=float(dropout_rate))


def blockwise_attention(query: jax.Array, key: jax.Array, value: jax.Array,
                        mask: AttentionMask, *, block: int, dropout_rate: float = 0.0,
                        dropout_rng: jax.Array | None = None) -> jax.Array:
  """Softmax(q k^T / sqrt(d)) v over the keys `mask` allows, [b, s, h, d] in and out, in the
  inputs' dtype with float32 statistics and accumulation. With `dropout_rate` > 0 and a
  `dropout_rng`, probabilities are dropped as `nn.Dropout` drops them (kept ones scaled by
  1 / (1 - rate)), from a stream of its own (not the explicit form's). `block`: the keys of
  a global layer's tile, and the queries (and keys) of a block of packed or causal rows."""
  b, s, h, d = query.shape
  dropping = dropout_rate > 0 and dropout_rng is not None
  static = _layout(mask, block, dropout_rate if dropping else 0.0)
  rng = dropout_rng if dropping else jax.random.key(0)
  n, c = static.padded // static.q_block, static.q_block
  pad = lambda x: jnp.pad(x, ((0, 0), (0, static.padded - s), (0, 0), (0, 0)))
  scaled = query * jnp.asarray(1.0 / math.sqrt(d), query.dtype)
  queries = pad(scaled).reshape(b, n, c, h, d).transpose(0, 1, 3, 2, 4)  # [b, n, h, c, d]
  out = _attend(static, queries, pad(key), pad(value), _plan(mask, static), rng)
  return out.transpose(0, 1, 3, 2, 4).reshape(b, static.padded, h, d)[:, :s]


def key_tiles_visited(mask: AttentionMask, block: int) -> tuple[jax.Array, int]:
  """([b, query blocks] how many tiles each query block visits, keys per tile): what the
  loop runs at most, and what a mask saves against visiting every key."""
  static = _layout(mask, block)
  return _plan(mask, static).count, static.width


def _plan(mask: AttentionMask, static: _Static) -> _Plan:
  """Each query block's reach, from the least first key to the greatest last key of its
  queries (`AttentionMask.key_extent`): in tiles aligned to their width, or (a band) one
  tile from the first key, which spans the block and its window. A position past the length
  reaches nothing and is reached by nothing."""
  b, s = mask.input_mask.shape
  c, w, padded = static.q_block, static.width, static.padded
  first, last = mask.key_extent()
  first = jnp.pad(first, ((0, 0), (0, padded - s)), constant_values=padded)
  last = jnp.pad(last, ((0, 0), (0, padded - s)), constant_values=-1)
  lo = first.reshape(b, padded // c, c).min(axis=-1)
  hi = last.reshape(b, padded // c, c).max(axis=-1)
  count = jnp.where(hi >= lo, (hi - lo) // w + 1, 0).astype(jnp.int32)
  ids = jnp.pad(mask.key_ids(), ((0, 0), (0, padded - s)), constant_values=-1)
  return _Plan(start=jnp.clip(lo, 0, padded - 1).astype(jnp.int32), count=count,
               query_ids=ids.reshape(b, padded // c, c), key_ids=ids)


class _Tile(NamedTuple):
  """Step t's keys for every query block: their positions, keys, values and allowed pairs."""
  positions: jax.Array  # [b, n, w] the keys' positions in the row
  key: jax.Array  # [b, n, w, h, d]
  value: jax.Array  # [b, n, w, h, d]
  allowed: jax.Array  # [b, n, 1, c, w] bool


def _tile(static: _Static, plan: _Plan, key, value, t) -> _Tile:
  b, n = plan.start.shape
  c, w = static.q_block, static.width
  # Tile t holds keys [start + t w, start + (t + 1) w); one that would run past the row is
  # read from earlier keys, which stay masked, so no key is counted twice.
  nominal = plan.start + t * w
  positions = jnp.minimum(nominal, static.padded - w)[..., None] + jnp.arange(w)  # [b, n, w]
  rows = jnp.arange(b)[:, None, None]
  q_pos = (jnp.arange(n)[:, None] * c + jnp.arange(c))[None, :, None, :, None]
  k_pos = positions[:, :, None, None, :]
  allowed = allows(q_pos, k_pos, plan.query_ids[:, :, None, :, None],
                   plan.key_ids[rows, positions][:, :, None, None], packed=static.packed,
                   causal=static.causal, window=static.window)
  in_tile = (k_pos >= nominal[:, :, None, None, None]) & (
      k_pos < (nominal + w)[:, :, None, None, None])
  allowed = allowed & in_tile & (k_pos < static.length) & (
      t < plan.count)[:, :, None, None, None]
  return _Tile(positions=positions, key=key[rows, positions], value=value[rows, positions],
               allowed=allowed)


def _keep(static: _Static, rng, t, shape) -> jax.Array:
  """Step t's dropout keep mask, scaled: 0 or 1 / (1 - rate). Each 32 random bits give two
  16-bit draws (threefry's bits are the cost on a CPU), so a pair is dropped with
  probability round(rate * 2^16) / 2^16: the rate to 1.5e-5."""
  threshold = round(static.dropout_rate * 2**16)
  words = jax.random.bits(jax.random.fold_in(rng, t), (*shape[:-1], -(-shape[-1] // 2)),
                          jnp.uint32)
  halves = jnp.stack([words & 0xFFFF, words >> 16], axis=-1).reshape(*shape[:-1], -1)
  keep = halves[..., :shape[-1]] >= threshold
  return keep.astype(F32) * (2**16 / (2**16 - threshold))


def _scores(query, tile: _Tile) -> jax.Array:
  scores = jnp.einsum('bnhqd,bnkhd->bnhqk', query, tile.key, preferred_element_type=F32)
  return jnp.where(tile.allowed, scores, -jnp.inf)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attend(static: _Static, query, key, value, plan: _Plan, rng):
  return _forward(static, query, key, value, plan, rng)[0]


def _forward(static: _Static, query, key, value, plan: _Plan, rng):
  """The output [b, n, h, c, d] (query's dtype) and each query's log-sum-exp (float32)."""
  shape = query.shape[:-1]

  def step(t, carry):
    high, total, acc = carry
    tile = _tile(static, plan, key, value, t)
    scores = _scores(query, tile)
    new_high = jnp.maximum(high, scores.max(axis=-1))
    # A query that has seen no allowed key yet keeps -inf as its maximum: shift by 0 then,
    # so exp(-inf) gives 0 rather than exp(-inf - -inf) a NaN.
    shift = jnp.where(jnp.isfinite(new_high), new_high, 0.0)
    probs = jnp.exp(scores - shift[..., None])
    rescale = jnp.exp(high - shift)
    total = total * rescale + probs.sum(axis=-1)
    if static.dropout_rate:
      probs = probs * _keep(static, rng, t, probs.shape)
    acc = acc * rescale[..., None] + jnp.einsum(
        'bnhqk,bnkhd->bnhqd', probs.astype(value.dtype), tile.value, preferred_element_type=F32)
    return new_high, total, acc

  init = (jnp.full(shape, -jnp.inf, F32), jnp.zeros(shape, F32),
          jnp.zeros(query.shape, F32))
  high, total, acc = lax.fori_loop(0, plan.count.max(), step, init)
  seen = total > 0
  out = jnp.where(seen[..., None], acc / jnp.where(seen, total, 1.0)[..., None], 0.0)
  # exp(score - lse) recomputes a probability; a query with no key gets 0 from exp(-inf).
  lse = jnp.where(seen, jnp.where(jnp.isfinite(high), high, 0.0) + jnp.log(
      jnp.where(seen, total, 1.0)), 0.0)
  return out.astype(query.dtype), lse


def _attend_forward(static: _Static, query, key, value, plan: _Plan, rng):
  out, lse = _forward(static, query, key, value, plan, rng)
  return out, (query, key, value, plan, rng, out, lse)


def _attend_backward(static: _Static, residuals, grad_out):
  query, key, value, plan, rng, out, lse = residuals
  rows = jnp.arange(plan.start.shape[0])[:, None, None]
  # D_i = sum_j P_ij dP_ij = dO_i . O_i, dropout included (O is the dropped average).
  delta = (grad_out.astype(F32) * out.astype(F32)).sum(axis=-1)
  dtype = query.dtype

  def step(t, carry):
    d_query, d_key, d_value = carry
    tile = _tile(static, plan, key, value, t)
    probs = jnp.exp(_scores(query, tile) - lse[..., None])
    d_probs = jnp.einsum('bnhqd,bnkhd->bnhqk', grad_out, tile.value, preferred_element_type=F32)
    dropped = probs
    if static.dropout_rate:
      keep = _keep(static, rng, t, probs.shape)
      dropped, d_probs = probs * keep, d_probs * keep
    d_scores = (probs * (d_probs - delta[..., None])).astype(dtype)
    d_query = d_query + jnp.einsum('bnhqk,bnkhd->bnhqd', d_scores, tile.key,
                                   preferred_element_type=F32)
    # Tiles of neighbouring blocks may share keys (a band's): their gradients add up.
    d_key = d_key.at[rows, tile.positions].add(jnp.einsum(
        'bnhqk,bnhqd->bnkhd', d_scores, query, preferred_element_type=F32))
    d_value = d_value.at[rows, tile.positions].add(jnp.einsum(
        'bnhqk,bnhqd->bnkhd', dropped.astype(dtype), grad_out, preferred_element_type=F32))
    return d_query, d_key, d_value

  init = (jnp.zeros(query.shape, F32), jnp.zeros(key.shape, F32), jnp.zeros(value.shape, F32))
  d_query, d_key, d_value = lax.fori_loop(0, plan.count.max(), step, init)
  return (d_query.astype(query.dtype), d_key.astype(key.dtype), d_value.astype(value.dtype),
          None, None)


_attend.defvjp(_attend_forward, _attend_backward)


def dense_keep_mask(mask: AttentionMask, *, block: int, heads: int, dropout_rate: float,
                    dropout_rng: jax.Array) -> jax.Array:
  """The dropout keep mask `blockwise_attention` draws, as a float32 [b, h, q, k] matrix of 0
  and 1 / (1 - rate) (0 also where no tile was visited): what the explicit form must
  multiply its probabilities by to compute the same dropped attention."""
  b, s = mask.input_mask.shape
  static = _layout(mask, block, dropout_rate)
  plan = _plan(mask, static)
  n, c, w = static.padded // static.q_block, static.q_block, static.width
  dense = jnp.zeros((b, h := heads, static.padded, static.padded), F32)
  rows = jnp.arange(b)[:, None, None, None, None]
  queries = (jnp.arange(n)[:, None] * c + jnp.arange(c))[None, :, None, :, None]
  for t in range(int(plan.count.max())):
    nominal = plan.start + t * w
    positions = jnp.minimum(nominal, static.padded - w)[..., None] + jnp.arange(w)
    keep = _keep(static, dropout_rng, t, (b, n, h, c, w))
    in_tile = (positions >= nominal[..., None]) & (positions < (nominal + w)[..., None])
    keep = jnp.where(((t < plan.count)[..., None] & in_tile)[:, :, None, None], keep, 0.0)
    heads_ = jnp.arange(h)[None, None, :, None, None]
    keys = positions[:, :, None, None, :]
    dense = dense.at[rows, heads_, queries, keys].add(keep)  # tiles never overlap for a query
  return dense[:, :, :s, :s]
