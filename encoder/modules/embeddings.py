"""Token embeddings, plus learned absolute positions and segments where the config has them,
then LayerNorm (unless `embedding_norm` is off) and dropout, all `embedding_width` wide (the
encoder projects a factorized width up to its hidden size)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder.modules.config import ModelConfig
from encoder.modules.layers import compute_dtype, kernel_init, layer_norm


class Embeddings(nn.Module):
  """The input embeddings. `word_embeddings` is also the MLM decoder (tied weights).

  BERT adds a position table and a segment (sentence A/B) table; rotary or no positions
  (`position_embedding`) make no table, and `type_vocab_size=0` no segment table (ModernBERT
  has neither).
  """
  config: ModelConfig

  def setup(self):
    cfg = self.config

    def embed(num, axes):
      return nn.Embed(num, cfg.embedding_width, dtype=compute_dtype(cfg),
                      embedding_init=kernel_init(cfg, axes))

    self.word_embeddings = embed(cfg.vocab_size, ('vocab', 'embed'))
    if cfg.position_embedding == 'learned':
      self.position_embeddings = embed(cfg.max_position_embeddings, (None, 'embed'))
    if cfg.type_vocab_size:
      self.segment_embeddings = embed(cfg.type_vocab_size, (None, 'embed'))
    if cfg.embedding_norm:
      self.norm = layer_norm(cfg, 'norm')
    self.dropout = nn.Dropout(cfg.dropout_rate)

  def __call__(self, input_ids: jax.Array, segment_ids: jax.Array,
               positions: jax.Array | None = None, *, deterministic: bool = True,
               word_delta: jax.Array | None = None) -> jax.Array:
    """`positions`: per-token position ids (restarting per packed example); None: 0, 1, ...

    `word_delta` ([vocab, width]): the word table read is `stop_gradient(table) + word_delta`,
    DeBERTa-v3's gradient-disentangled sharing (He et al., 2021): a discriminator reads the
    generator's table without moving it, and learns only its own difference from it."""
    cfg = self.config
    if word_delta is None:
      x = self.word_embeddings(input_ids)
    else:
      table = jax.lax.stop_gradient(self.word_embeddings.embedding) + word_delta
      x = jnp.take(table.astype(compute_dtype(cfg)), input_ids, axis=0)
    if cfg.position_embedding == 'learned':
      if positions is None:
        positions = jnp.arange(input_ids.shape[-1])[None, :]
      x = x + self.position_embeddings(positions)
    if cfg.type_vocab_size:
      x = x + self.segment_embeddings(segment_ids)
    if cfg.embedding_norm:
      x = self.norm(x)
    return self.dropout(x, deterministic=deterministic)
