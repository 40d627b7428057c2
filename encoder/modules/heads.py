"""Task heads on top of the encoder's outputs. Logits are returned in float32."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder.modules import matmul
from encoder.modules.common import activation, compute_dtype, dense, layer_norm, zeros_init
from encoder.modules.config import ModelConfig


def gather_positions(sequence: jax.Array, positions: jax.Array) -> jax.Array:
  """[batch, seq, hidden] at [batch, k] positions -> [batch, k, hidden]."""
  return jnp.take_along_axis(sequence, positions[..., None].astype(jnp.int32), axis=1)


class MlmHead(nn.Module):
  """dense -> activation -> LayerNorm -> logits through the transposed word embeddings + bias.

  There is no output matrix of its own: the decoder is the embedding table (tied weights).
  Given `masked_positions`, only those positions are decoded, which saves the [seq, vocab]
  logits BERT never uses.
  """
  config: ModelConfig

  @nn.compact
  def __call__(self, sequence: jax.Array, embedding_table: jax.Array,
               masked_positions: jax.Array | None = None) -> jax.Array:
    cfg = self.config
    if masked_positions is not None:
      sequence = gather_positions(sequence, masked_positions)
    act = 'gelu' if cfg.activation == 'geglu' else cfg.activation
    h = activation(act, dense(cfg, cfg.hidden_size, ('embed', 'embed_out'), 'transform')(sequence))
    h = layer_norm(cfg, 'transform_norm')(h)
    bias = self.param('output_bias', zeros_init(('vocab',)), (cfg.vocab_size,), jnp.float32)
    dtype = compute_dtype(cfg)
    logits = matmul.matmul(h.astype(dtype), embedding_table.astype(dtype).T)
    return logits.astype(jnp.float32) + bias


class NspHead(nn.Module):
  """Two-way next-sentence classifier on the pooled output (0 = B follows A)."""
  config: ModelConfig

  @nn.compact
  def __call__(self, pooled: jax.Array) -> jax.Array:
    return dense(self.config, 2, ('embed', None), 'dense')(pooled).astype(jnp.float32)


class ClassificationHead(nn.Module):
  """Dropout + dense on the pooled output; `num_labels=1` is regression."""
  config: ModelConfig
  num_labels: int

  @nn.compact
  def __call__(self, pooled: jax.Array, *, deterministic: bool = True) -> jax.Array:
    x = nn.Dropout(self.config.dropout_rate)(pooled, deterministic=deterministic)
    return dense(self.config, self.num_labels, ('embed', None), 'dense')(x).astype(jnp.float32)


class TokenClassificationHead(nn.Module):
  """Dropout + dense on every token: [batch, seq, num_labels]."""
  config: ModelConfig
  num_labels: int

  @nn.compact
  def __call__(self, sequence: jax.Array, *, deterministic: bool = True) -> jax.Array:
    x = nn.Dropout(self.config.dropout_rate)(sequence, deterministic=deterministic)
    return dense(self.config, self.num_labels, ('embed', None), 'dense')(x).astype(jnp.float32)


class SpanHead(nn.Module):
  """Start and end logits per token for extractive QA: two [batch, seq] arrays."""
  config: ModelConfig

  @nn.compact
  def __call__(self, sequence: jax.Array) -> tuple[jax.Array, jax.Array]:
    logits = dense(self.config, 2, ('embed', None), 'dense')(sequence).astype(jnp.float32)
    return logits[..., 0], logits[..., 1]
