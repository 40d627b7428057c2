"""Multi-head self-attention over the full score matrix, masked only by padding (or causally)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder.modules.common import compute_dtype, kernel_init, zeros_init
from encoder.modules.config import ModelConfig


def attention_mask(input_mask: jax.Array, kind: str) -> jax.Array:
  """Boolean [batch, 1, query, key] mask: True where a query may attend to a key.

  Every query (padding queries too) attends to every real key; `causal` further keeps only
  keys at or before the query. Padding queries' outputs are never read, so we let them
  attend rather than produce all-masked rows.
  """
  keys = input_mask.astype(bool)[:, None, None, :]
  if kind == 'causal':
    seq = input_mask.shape[-1]
    keys = keys & jnp.tril(jnp.ones((seq, seq), bool))[None, None]
  return keys


class SelfAttention(nn.Module):
  """Q/K/V and output projections with bias, scaled dot-product, dropout on the probabilities.

  The fast path calls `jax.nn.dot_product_attention`, which backends with a fused kernel
  replace by it. It cannot return probabilities or drop them out, so when either is needed
  the scores are computed explicitly (same mathematics, float32 softmax).
  """
  config: ModelConfig

  @nn.compact
  def __call__(self, x: jax.Array, input_mask: jax.Array, *, deterministic: bool = True,
               return_probs: bool = False) -> tuple[jax.Array, jax.Array | None]:
    cfg = self.config
    dtype = compute_dtype(cfg)

    def project(name):
      return nn.DenseGeneral(
          (cfg.num_heads, cfg.head_dim), dtype=dtype, name=name,
          kernel_init=kernel_init(cfg, ('embed', 'heads', 'kv')),
          bias_init=zeros_init(('heads', 'kv')))(x)

    query, key, value = project('query'), project('key'), project('value')  # [b, s, h, d]
    mask = attention_mask(input_mask, cfg.attention)
    dropout_active = not deterministic and cfg.attention_dropout_rate > 0
    probs = None
    if return_probs or dropout_active:
      scores = jnp.einsum('bqhd,bkhd->bhqk', query, key) / jnp.sqrt(cfg.head_dim).astype(dtype)
      scores = jnp.where(mask, scores.astype(jnp.float32), jnp.finfo(jnp.float32).min)
      probs = jax.nn.softmax(scores, axis=-1)
      dropped = nn.Dropout(cfg.attention_dropout_rate)(probs, deterministic=deterministic)
      context = jnp.einsum('bhqk,bkhd->bqhd', dropped.astype(dtype), value)
    else:
      context = jax.nn.dot_product_attention(query, key, value, mask=mask)
    out = nn.DenseGeneral(
        cfg.hidden_size, axis=(-2, -1), dtype=dtype, name='out',
        kernel_init=kernel_init(cfg, ('heads', 'kv', 'embed')),
        bias_init=zeros_init(('embed',)))(context)
    return out, probs
