"""Task heads on top of the encoder's outputs. Logits are returned in float32."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder.modules import matmul
from encoder.modules.config import ModelConfig
from encoder.modules.layers import activation, compute_dtype, dense, layer_norm, zeros_init


def gather_positions(sequence: jax.Array, positions: jax.Array) -> jax.Array:
  """[batch, seq, hidden] at [batch, k] positions -> [batch, k, hidden]."""
  return jnp.take_along_axis(sequence, positions[..., None].astype(jnp.int32), axis=1)


class MlmHead(nn.Module):
  """dense -> activation -> LayerNorm -> logits through the transposed word embeddings + bias.

  There is no output matrix of its own: the decoder is the embedding table (tied weights), so
  the dense maps to the table's width (`embedding_width`: the hidden size but for factorized
  embeddings).
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
    h = _transform(cfg, sequence, cfg.embedding_width)
    bias = self.param('output_bias', zeros_init(('vocab',)), (cfg.vocab_size,), jnp.float32)
    dtype = compute_dtype(cfg)
    logits = matmul.matmul(h.astype(dtype), embedding_table.astype(dtype).T)
    return logits.astype(jnp.float32) + bias


def _transform(cfg: ModelConfig, x: jax.Array, width: int | None = None) -> jax.Array:
  """dense (to `width`, default the hidden size) -> activation -> LayerNorm: the MLM head's,
  and (`classifier_head=mlp`) the one ModernBERT puts before each classifier. Gated MLPs use
  GELU here, as ModernBERT does. Called inside a compact `__call__`, so its layers belong to
  the calling head."""
  act = 'gelu' if cfg.activation in ('geglu', 'swiglu') else cfg.activation
  h = activation(act, dense(cfg, width or cfg.hidden_size, ('embed', 'embed_out'), 'transform',
                            role='out')(x))
  return layer_norm(cfg, 'transform_norm')(h)


def _classifier(cfg: ModelConfig, x: jax.Array, features: int, *, deterministic: bool,
                dropout: bool = True) -> jax.Array:
  """[ModernBERT's transform ->] dropout -> dense to `features` logits (float32). The last
  dense keeps its bias whatever `use_bias` says, as ModernBERT's classifiers do."""
  if cfg.classifier_head == 'mlp':
    x = _transform(cfg, x)
  if dropout:
    x = nn.Dropout(cfg.dropout_rate)(x, deterministic=deterministic)
  logits = dense(cfg, features, ('embed', None), 'dense', role='final', use_bias=True)(x)
  return logits.astype(jnp.float32)


class NspHead(nn.Module):
  """Two-way next-sentence classifier on the pooled output (0 = B follows A)."""
  config: ModelConfig

  @nn.compact
  def __call__(self, pooled: jax.Array) -> jax.Array:
    return dense(self.config, 2, ('embed', None), 'dense', role='final',
                 use_bias=True)(pooled).astype(jnp.float32)


class ClassificationHead(nn.Module):
  """Dropout + dense on the pooled output (`classifier_head=mlp`: ModernBERT's transform
  first); `num_labels=1` is regression."""
  config: ModelConfig
  num_labels: int

  @nn.compact
  def __call__(self, pooled: jax.Array, *, deterministic: bool = True) -> jax.Array:
    return _classifier(self.config, pooled, self.num_labels, deterministic=deterministic)


class TokenClassificationHead(nn.Module):
  """Dropout + dense on every token (`classifier_head=mlp`: the transform first):
  [batch, seq, num_labels]."""
  config: ModelConfig
  num_labels: int

  @nn.compact
  def __call__(self, sequence: jax.Array, *, deterministic: bool = True) -> jax.Array:
    return _classifier(self.config, sequence, self.num_labels, deterministic=deterministic)


class SpanHead(nn.Module):
  """Start and end logits per token for extractive QA: two [batch, seq] arrays (a dense, as
  BERT's; `classifier_head=mlp`: the transform first)."""
  config: ModelConfig

  @nn.compact
  def __call__(self, sequence: jax.Array) -> tuple[jax.Array, jax.Array]:
    logits = _classifier(self.config, sequence, 2, deterministic=True, dropout=False)
    return logits[..., 0], logits[..., 1]
