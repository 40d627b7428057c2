"""Rotary position embeddings (RoFormer, Su et al. 2021), in the half-split layout ModernBERT
and GPT-NeoX use: dimension i of a head pairs with dimension i + head_dim / 2.

A query or key at position p is rotated by p times each pair's frequency, so their dot product
depends on the two positions only through their difference. Positions are each token's own
(a packed row's restart at every example), so packing changes nothing an example computes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def rope_tables(positions: jax.Array, head_dim: int, theta: float
                ) -> tuple[jax.Array, jax.Array]:
  """cos and sin, float32 [b, s, head_dim], for integer `positions` [b or 1, s].

  Frequency of pair i: theta ** (-2i / head_dim); both halves of a head share them.
  """
  inverse = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
  angles = positions.astype(jnp.float32)[..., None] * inverse  # [b, s, d / 2]
  angles = jnp.concatenate([angles, angles], axis=-1)
  return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  """`x` [..., head_dim] rotated by tables that broadcast against it; computed in float32,
  returned in x's dtype."""
  y = x.astype(jnp.float32)
  half = y.shape[-1] // 2
  rotated = jnp.concatenate([-y[..., half:], y[..., :half]], axis=-1)
  return (y * cos + rotated * sin).astype(x.dtype)
