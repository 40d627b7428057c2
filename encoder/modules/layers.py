"""Initialisers and layer factories shared by the modules.

Every parameter carries logical axis names (`embed`, `heads`, `kv`, `mlp`, `vocab`, ...) so a
mesh-sharded path can map them onto device axes without touching the modules.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder.modules import matmul
from encoder.modules.config import ModelConfig

# What a kernel does, which sets its scale under `init=modern`: `in` reads the residual
# stream (Q/K/V, the MLP's first layer, embeddings), `out` writes into it (attention output,
# MLP output, the MLM head's dense), `final` produces a classifier's logits.
ROLES = ('in', 'out', 'final')


def init_stddev(config: ModelConfig, role: str = 'in') -> float:
  """The standard deviation a kernel of `role` is drawn with.

  bert: `initializer_range` for every kernel. modern (ModernBERT): `initializer_range` for
  `in`, divided by sqrt(2 * num_layers) for `out` (the residual branches' sum keeps its scale
  with depth), hidden_size ** -0.5 for `final`.
  """
  if role not in ROLES:
    raise ValueError(f'unknown kernel role {role!r}')
  if config.init == 'bert' or role == 'in':
    return config.initializer_range
  if role == 'out':
    return config.initializer_range / math.sqrt(2.0 * config.num_layers)
  return config.hidden_size ** -0.5


def truncated_normal(config: ModelConfig, role: str = 'in'):
  """The unboxed initialiser of a kernel of `role`: a normal of deviation s =
  `init_stddev(config, role)` cut at +-c s and not rescaled (its deviation is 0.88 s at c = 2),
  as BERT's TensorFlow `truncated_normal_initializer` (c = 2) and ModernBERT's
  `trunc_normal_(std=s, a=-c*s, b=c*s)` (c = `init_cutoff`) both draw."""
  cutoff = 2.0 if config.init == 'bert' else config.init_cutoff
  return nn.initializers.truncated_normal(stddev=init_stddev(config, role), lower=-cutoff,
                                          upper=cutoff)


def kernel_init(config: ModelConfig, axes: tuple[str, ...], role: str = 'in'):
  """`truncated_normal(config, role)`, annotated with logical axes."""
  return nn.with_logical_partitioning(truncated_normal(config, role), axes)


def zeros_init(axes: tuple[str, ...]):
  return nn.with_logical_partitioning(nn.initializers.zeros_init(), axes)


def compute_dtype(config: ModelConfig) -> jnp.dtype:
  return jnp.dtype(config.dtype)


class Dense(nn.Module):
  """`nn.Dense`'s parameters (`kernel` [in, features], `bias` [features], float32, created in
  that order from the same initialisers), computed through `matmul.matmul`: in bfloat16 the
  bias joins the float32 accumulation and its gradient is summed in float32 (what autodiff
  of nn.Dense's bfloat16 bias add leaves to a slow reduce-window on XLA:CPU); in float32 the
  very operations nn.Dense runs."""
  features: int
  dtype: jnp.dtype
  kernel_init: nn.initializers.Initializer
  bias_init: nn.initializers.Initializer
  use_bias: bool = True

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    kernel = self.param('kernel', self.kernel_init, (x.shape[-1], self.features), jnp.float32)
    bias = (self.param('bias', self.bias_init, (self.features,), jnp.float32)
            if self.use_bias else None)
    return matmul.matmul(x.astype(self.dtype), kernel.astype(self.dtype), bias)


def dense(config: ModelConfig, features: int, axes: tuple[str, str], name: str,
          role: str = 'in', use_bias: bool | None = None) -> Dense:
  """A Dense in the compute dtype with float32 params; a bias when `config.use_bias` (or
  `use_bias`, for the classifiers, which keep theirs in ModernBERT too)."""
  return Dense(features, dtype=compute_dtype(config),
               kernel_init=kernel_init(config, axes, role),
               use_bias=config.use_bias if use_bias is None else use_bias,
               bias_init=zeros_init(axes[-1:]), name=name)


def layer_norm(config: ModelConfig, name: str) -> nn.LayerNorm:
  """LayerNorm whose statistics Flax computes in float32 whatever the compute dtype; a bias
  when `config.use_bias`."""
  return nn.LayerNorm(
      epsilon=config.layer_norm_eps, dtype=compute_dtype(config), name=name,
      use_bias=config.use_bias,
      scale_init=nn.with_logical_partitioning(nn.initializers.ones_init(), ('embed',)),
      bias_init=zeros_init(('embed',)))


def activation(name: str, x: jax.Array) -> jax.Array:
  """GELU in the exact erf form (BERT's paper, Hugging Face) or the tanh form (BERT's TF code)."""
  if name == 'gelu_tanh':
    return jax.nn.gelu(x, approximate=True)
  return jax.nn.gelu(x, approximate=False)
