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

Under `jax.jit` over a mesh (the mesh strategy), the compiler cannot partition a Pallas
kernel: the call runs in `jax.shard_map`, each device on its own rows and heads, split as the
logical axes `batch` and `heads` are (the rules in context, encoder/train/sharding.py). Under
pmap, or inside a `shard_map` already, each device holds its rows and the kernel runs as is.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from encoder.modules.attention_mask import AttentionMask

LANES = 128  # splash's blocks are whole multiples of the TPU's 128 lanes
MIN_HEAD_DIM = 64  # smaller heads leave most of each lane empty: blockwise serves them


def splash_takes(head_dim: int) -> bool:
  """Whether splash serves heads of `head_dim` (else the blockwise form does)."""
  return head_dim >= MIN_HEAD_DIM


def kernel_blocks(length: int) -> tuple[int, int]:
  """(the padded length, the kernel's block) for rows of `length`: whole 128-position blocks,
  in the largest block of 512, 256 or 128 that divides them."""
  padded = -(-length // LANES) * LANES
  return padded, next(size for size in (512, 256, LANES) if padded % size == 0)


def splash_attention(query: jax.Array, key: jax.Array, value: jax.Array,
                     mask: AttentionMask, *, interpret: bool = False) -> jax.Array:
  """Softmax(q k^T / sqrt(d)) v over the keys `mask` allows, [b, s, h, d] in and out."""
  from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_kernel as kernels,
  )
  b, s, h, d = query.shape
  padded, block = kernel_blocks(s)
  kernel = kernels.make_splash_mha(
      _head_masks(mask, padded, h), head_shards=1, q_seq_shards=1, interpret=interpret,
      block_sizes=kernels.BlockSizes(
          block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
          block_kv_dkv=block, block_kv_dkv_compute=block, block_q_dq=block, block_kv_dq=block))
  ids = jnp.pad(mask.key_ids(), ((0, 0), (0, padded - s)), constant_values=-1)

  def heads_first(x):  # [b, s, h, d] -> [b, h, padded, d]
    return jnp.pad(x, ((0, 0), (0, padded - s), (0, 0), (0, 0))).transpose(0, 2, 1, 3)

  scaled = query * jnp.asarray(1.0 / math.sqrt(d), query.dtype)

  def attend(q, k, v, i):  # [b, h, padded, d] each, i [b, padded]
    return jax.vmap(lambda q, k, v, i: kernel(q, k, v, segment_ids=kernels.SegmentIds(q=i, kv=i)))(
        q, k, v, i)
  args = (heads_first(scaled), heads_first(key), heads_first(value), ids)
  return _per_device(attend, args).transpose(0, 2, 1, 3)[:, :s]


def _per_device(attend, args):
  """`attend(*args)`, in a `shard_map` over the mesh's automatic axes when traced under a
  jit over a mesh (rows split as the logical `batch` axis, heads as `heads`, where the mesh
  axes divide them), else as it is."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or not mesh.auto_axes:
    return attend(*args)
  rows, heads = nn.logical_to_mesh_axes(('batch', 'heads'))
  b, h = args[0].shape[:2]
  rows, heads = _dividing(rows, b, mesh), _dividing(heads, h, mesh)
  spec = PartitionSpec(rows, heads, None, None)
  return jax.shard_map(attend, mesh=mesh, in_specs=(spec, spec, spec, PartitionSpec(rows, None)),
                       out_specs=spec, axis_names=set(mesh.auto_axes), check_vma=False)(*args)


def _dividing(axes, size: int, mesh):
  """`axes` (a mesh axis, a tuple of them or None) if their devices divide `size`, else None
  (the dimension stays whole on every device)."""
  names = (axes,) if isinstance(axes, str) else tuple(axes or ())
  ways = int(np.prod([mesh.shape[a] for a in names])) if names else 1
  return axes if size % ways == 0 else None


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
