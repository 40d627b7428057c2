"""What an attention layer may see, described rather than materialised.

Every attention form takes the same description: which tokens are real (`input_mask`), which
packed example each token belongs to (`segmentation`), whether a query sees later keys
(`causal`) and how far a local layer looks (`window`). The explicit form turns it into the
[b, 1, q, k] matrix (`dense`); the blockwise form asks it, block by block, which keys a block
of queries can reach (`key_extent`) and which pairs inside a block are allowed (`allows`); the
fused kernels read the pieces they take (lengths, segment ids, a window). So a local layer, a
packed row or a padded 8k-token document never needs the full mask to be built.

Shape letters: see `encoder.modules`.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp


@flax.struct.dataclass
class AttentionMask:
  """Unpacked (`segmentation` None): every query (padding queries too) attends to every real
  key. Packed: `segmentation` [b, s] is each token's example id within its row (t5x's
  `*_segmentation`; 0 = padding), and a token attends only to the tokens of its own example,
  padding only to padding. `causal` further keeps only keys at or before the query. `window`
  > 0 (a local layer's total window) further keeps only keys at most window // 2 positions
  from the query, as ModernBERT's sliding window does (|q - k| <= 64 for its 128). Padding
  queries' outputs are never read; they attend to something rather than to nothing."""
  input_mask: jax.Array  # [b, s], nonzero at real tokens
  segmentation: jax.Array | None = None  # [b, s] example ids (0 = padding), or None
  causal: bool = flax.struct.field(pytree_node=False, default=False)
  window: int = flax.struct.field(pytree_node=False, default=0)

  @property
  def packed(self) -> bool:
    return self.segmentation is not None

  @property
  def length(self) -> int:
    return self.input_mask.shape[-1]

  def with_window(self, window: int) -> AttentionMask:
    return self.replace(window=window)

  def key_ids(self) -> jax.Array:
    """[b, s] what a key is matched on: its example id (packed), else 1 for real and 0 for
    padding keys."""
    if self.packed:
      return self.segmentation.astype(jnp.int32)
    return (self.input_mask != 0).astype(jnp.int32)

  def allows(self, q_pos, k_pos, q_ids, k_ids) -> jax.Array:
    """Whether a query at `q_pos` with id `q_ids` may attend to a key at `k_pos` with id
    `k_ids` (`key_ids()` of each), for arrays that broadcast against each other."""
    return allows(q_pos, k_pos, q_ids, k_ids, packed=self.packed, causal=self.causal,
                  window=self.window)

  def dense(self) -> jax.Array:
    """Boolean [b, 1, q, k]: True where a query may attend to a key."""
    ids = self.key_ids()
    pos = jnp.arange(self.length)
    return self.allows(pos[:, None], pos[None, :], ids[:, None, :, None],
                       ids[:, None, None, :])

  def key_extent(self) -> tuple[jax.Array, jax.Array]:
    """(first, last) int32 [b, s]: for each query, the first and last key it may attend to
    (last < first: none). Every allowed key lies between them, so a form that visits only
    the keys between a block of queries' extremes misses none."""
    b, s = self.input_mask.shape
    pos = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
    ids = self.key_ids()
    if self.packed:
      # Each example's first and last position, whatever order its tokens come in.
      flat = (jnp.arange(b, dtype=jnp.int32)[:, None] * (s + 1) + ids).reshape(-1)
      lo = jax.ops.segment_min(pos.reshape(-1), flat, num_segments=b * (s + 1))
      hi = jax.ops.segment_max(pos.reshape(-1), flat, num_segments=b * (s + 1))
      first, last = lo[flat].reshape(b, s), hi[flat].reshape(b, s)
    else:
      real = ids != 0
      first = jnp.where(real, pos, s).min(axis=1, keepdims=True) + 0 * pos
      last = jnp.where(real, pos, -1).max(axis=1, keepdims=True) + 0 * pos
    if self.causal:
      last = jnp.minimum(last, pos)
    if self.window:
      first = jnp.maximum(first, pos - self.window // 2)
      last = jnp.minimum(last, pos + self.window // 2)
    return first, last


def allows(q_pos, k_pos, q_ids, k_ids, *, packed: bool, causal: bool, window: int) -> jax.Array:
  """`AttentionMask.allows` from the mask's static fields alone (what a kernel that holds the
  ids but not the mask needs)."""
  keep = (q_ids == k_ids) if packed else (k_ids != 0)
  if causal:
    keep = keep & (k_pos <= q_pos)
  if window:
    keep = keep & (jnp.abs(q_pos - k_pos) <= window // 2)
  return keep
