"""Pallas's splash attention (`jax.experimental.pallas.ops.tpu.splash_attention`), TPU's fused
kernel, fed from an `AttentionMask`.

Splash skips the blocks a static mask leaves empty (a local layer's band as a two-sided
`LocalMask`, `CausalMask`) and masks the rest by segment ids, which carry both padding and
packed examples. It takes no dropout and needs rows in whole 128-position blocks, so rows are
padded to them here, the padding in a segment of its own. Off TPU it runs in Pallas's
interpret mode (`interpret=True`: slow, exact), which is how the tests check it on a CPU.

Padding queries attend to padding keys here (each query always keeps at least itself, so no
softmax row is empty); their outputs are never read, and real tokens see exactly what the
explicit form's mask lets them see.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from encoder.modules.attention_mask import AttentionMask

LANES = 128  # splash's blocks are whole multiples of the TPU's 128 lanes
MIN_HEAD_DIM = 64  # smaller heads leave most of each lane empty: blockwise serves them


def splash_takes(head_dim: int) -> bool:
  """Whether splash serves heads of `head_dim` (else the blockwise form does)."""
  return head_dim >= MIN_HEAD_DIM


def splash_attention(query: jax.Array, key: jax.Array, value: jax.Array,
                     mask: AttentionMask, *, interpret: bool = False) -> jax.Array:
  """Softmax(q k^T / sqrt(d)) v over the keys `mask` allows, [b, s, h, d] in and out."""
  from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_kernel as kernels,
  )
  b, s, h, d = query.shape
  padded = -(-s // LANES) * LANES
  block = next(size for size in (512, 256, LANES) if padded % size == 0)
  kernel = kernels.make_splash_mha(
      _head_masks(mask, padded, h), head_shards=1, q_seq_shards=1, interpret=interpret,
      block_sizes=kernels.BlockSizes(
          block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
          block_kv_dkv=block, block_kv_dkv_compute=block, block_q_dq=block, block_kv_dq=block))
  ids = jnp.pad(mask.key_ids(), ((0, 0), (0, padded - s)), constant_values=-1)

  def heads_first(x):  # [b, s, h, d] -> [b, h, padded, d]
    return jnp.pad(x, ((0, 0), (0, padded - s), (0, 0), (0, 0))).transpose(0, 2, 1, 3)

  scaled = query * jnp.asarray(1.0 / math.sqrt(d), query.dtype)
  out = jax.vmap(lambda q, k, v, i: kernel(q, k, v, segment_ids=kernels.SegmentIds(q=i, kv=i)))(
      heads_first(scaled), heads_first(key), heads_first(value), ids)
  return out.transpose(0, 2, 1, 3)[:, :s]


def _head_masks(mask: AttentionMask, length: int, heads: int):
  """The static part of the mask (causal, the window) for every head."""
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks
  shape = (length, length)
  if mask.window:
    one = masks.LocalMask(shape, (mask.window // 2, 0 if mask.causal else mask.window // 2),
                          offset=0)
  elif mask.causal:
    one = masks.CausalMask(shape)
  else:
    one = masks.FullMask(shape)
  return masks.MultiHeadMask([one] * heads)
