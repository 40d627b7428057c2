"""Token + learned absolute position + segment embeddings, then LayerNorm and dropout."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder.modules.common import compute_dtype, kernel_init, layer_norm
from encoder.modules.config import ModelConfig


def sinusoid_table(num: int, features: int) -> jnp.ndarray:
  """Vaswani et al.'s table: sin on the even features, cos on the odd, geometric wavelengths."""
  positions = jnp.arange(num, dtype=jnp.float32)[:, None]
  rates = 1.0 / 10000.0 ** (jnp.arange(0, features, 2, dtype=jnp.float32) / features)
  table = jnp.zeros((num, features), jnp.float32)
  table = table.at[:, 0::2].set(jnp.sin(positions * rates))
  return table.at[:, 1::2].set(jnp.cos(positions * rates[:features // 2]))


def position_init(cfg: ModelConfig):
  """BERT's truncated normal, or a sinusoid start for the same learned table.

  A sinusoid table makes "attend to my neighbour" one linear map of the query, so a small model
  uses word order from the first steps instead of first having to discover positions from noise
  (with the normal start a 2-layer model trails a causal one, which gets order for free from its
  mask). Scaled so each entry has the normal start's spread: the same table, another start.
  """
  if cfg.position_init == 'normal':
    return kernel_init(cfg, (None, 'embed'))

  def init(_key, shape, dtype=jnp.float32):
    scale = cfg.initializer_range * jnp.sqrt(2.0)  # a sinusoid's entries have variance 1/2
    return (scale * sinusoid_table(*shape)).astype(dtype)
  return nn.with_logical_partitioning(init, (None, 'embed'))


class Embeddings(nn.Module):
  """BERT's input embeddings. `word_embeddings` is also the MLM decoder (tied weights)."""
  config: ModelConfig

  def setup(self):
    cfg = self.config

    def embed(num, axes):
      return nn.Embed(num, cfg.hidden_size, dtype=compute_dtype(cfg),
                      embedding_init=kernel_init(cfg, axes))

    self.word_embeddings = embed(cfg.vocab_size, ('vocab', 'embed'))
    self.position_embeddings = nn.Embed(
        cfg.max_position_embeddings, cfg.hidden_size, dtype=compute_dtype(cfg),
        embedding_init=position_init(cfg))
    self.segment_embeddings = embed(cfg.type_vocab_size, (None, 'embed'))
    self.norm = layer_norm(cfg, 'norm')
    self.dropout = nn.Dropout(cfg.dropout_rate)

  def __call__(self, input_ids: jax.Array, segment_ids: jax.Array, *,
               deterministic: bool = True) -> jax.Array:
    positions = jnp.arange(input_ids.shape[-1])[None, :]
    x = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
         + self.segment_embeddings(segment_ids))
    return self.dropout(self.norm(x), deterministic=deterministic)
