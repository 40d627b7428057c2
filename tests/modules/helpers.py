"""Small models and inputs for module tests."""

import jax
import jax.numpy as jnp

from encoder.modules.config import ModelConfig
from encoder.modules.transformer import Encoder


def tiny_config(**overrides) -> ModelConfig:
  fields = dict(vocab_size=97, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                max_position_embeddings=16, dropout_rate=0.1, attention_dropout_rate=0.1)
  fields.update(overrides)
  return ModelConfig(**fields)


def random_inputs(batch=2, seq=8, vocab=97, seed=0):
  ids = jax.random.randint(jax.random.key(seed), (batch, seq), 5, vocab)
  segments = (jnp.arange(seq)[None, :] >= seq // 2).astype(jnp.int32).repeat(batch, 0)
  mask = jnp.ones((batch, seq), jnp.int32)
  return ids, segments, mask


def init_encoder(config: ModelConfig, seq=8):
  model = Encoder(config)
  ids, segments, mask = random_inputs(seq=seq, vocab=config.vocab_size)
  variables = model.init(jax.random.key(1), ids, segments, mask)
  return model, variables
