"""Initialisers and layer factories shared by the modules.

Every parameter carries logical axis names (`embed`, `heads`, `kv`, `mlp`, `vocab`, ...) so a
mesh-sharded path can map them onto device axes without touching the modules.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder.modules import matmul
from encoder.modules.config import ModelConfig


def kernel_init(config: ModelConfig, axes: tuple[str, ...]):
  """BERT's truncated normal with stddev `initializer_range`, annotated with logical axes."""
  return nn.with_logical_partitioning(
      nn.initializers.truncated_normal(stddev=config.initializer_range), axes)


def zeros_init(axes: tuple[str, ...]):
  return nn.with_logical_partitioning(nn.initializers.zeros_init(), axes)


def compute_dtype(config: ModelConfig) -> jnp.dtype:
  return jnp.dtype(config.dtype)


def dense(config: ModelConfig, features: int, axes: tuple[str, str], name: str) -> nn.Dense:
  """A Dense with bias in the compute dtype; float32 params."""
  return nn.Dense(features, dtype=compute_dtype(config), kernel_init=kernel_init(config, axes),
                  bias_init=zeros_init(axes[-1:]), dot_general=matmul.dot_general, name=name)


def layer_norm(config: ModelConfig, name: str) -> nn.LayerNorm:
  """LayerNorm whose statistics Flax computes in float32 whatever the compute dtype."""
  return nn.LayerNorm(
      epsilon=config.layer_norm_eps, dtype=compute_dtype(config), name=name,
      scale_init=nn.with_logical_partitioning(nn.initializers.ones_init(), ('embed',)),
      bias_init=zeros_init(('embed',)))


def activation(name: str, x: jax.Array) -> jax.Array:
  """GELU in the exact erf form (BERT's paper, Hugging Face) or the tanh form (BERT's TF code)."""
  if name == 'gelu_tanh':
    return jax.nn.gelu(x, approximate=True)
  return jax.nn.gelu(x, approximate=False)
