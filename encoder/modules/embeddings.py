"""Token + learned absolute position + segment embeddings, then LayerNorm and dropout."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder.modules.common import compute_dtype, kernel_init, layer_norm
from encoder.modules.config import ModelConfig


class Embeddings(nn.Module):
  """BERT's input embeddings. `word_embeddings` is also the MLM decoder (tied weights)."""
  config: ModelConfig

  def setup(self):
    cfg = self.config

    def embed(num, axes):
      return nn.Embed(num, cfg.hidden_size, dtype=compute_dtype(cfg),
                      embedding_init=kernel_init(cfg, axes))

    self.word_embeddings = embed(cfg.vocab_size, ('vocab', 'embed'))
    self.position_embeddings = embed(cfg.max_position_embeddings, (None, 'embed'))
    self.segment_embeddings = embed(cfg.type_vocab_size, (None, 'embed'))
    self.norm = layer_norm(cfg, 'norm')
    self.dropout = nn.Dropout(cfg.dropout_rate)

  def __call__(self, input_ids: jax.Array, segment_ids: jax.Array,
               positions: jax.Array | None = None, *, deterministic: bool = True) -> jax.Array:
    """`positions`: per-token position ids (restarting per packed example); None: 0, 1, ..."""
    if positions is None:
      positions = jnp.arange(input_ids.shape[-1])[None, :]
    x = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
         + self.segment_embeddings(segment_ids))
    return self.dropout(self.norm(x), deterministic=deterministic)
