"""Matrix products of low-precision operands that accumulate, and are differentiated, in float32.

Why not plain `x @ w` in bfloat16: XLA:CPU (its YNNPACK dots) runs a bfloat16 product at the
AVX-512-BF16 rate only when the product is asked for in float32; asked for in bfloat16 it
takes a path no faster than float32. Measured on the 2-core development machine, [4096, 768] x
[768, 3072]: forward 314 against 170 GFLOP/s, input gradient 407 against 170 (float32: 174
and 196). JAX's transpose rule asks the backward products for the operands' dtype, so the
gradient is written here as well. Accelerators accumulate bfloat16 products in float32 anyway,
so the result is what they compute; only the rounding of the output to the compute dtype is
explicit. Float32 operands take the plain product, and its ordinary gradient.

Dense products are taken on operands flattened to matrices ([b, s, m] -> [b * s, m]) in every
dtype: the kernel gradient of a [b, s, m] x [m, n] product is otherwise a dot contracting two
axes, which XLA:CPU runs on a slow path unless something else (a bias gradient's reduction)
happens to reshape its operand first. Measured (benchmarks/ladder_step.py, mlm_modern_tiny's
train step, float32, 2 cores): bias-free layers 112 against 72 ms a step, the whole modern
recipe 98 against 81; BERT's layers, with biases, 71 either way.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax


def _product(x: jax.Array, w: jax.Array) -> jax.Array:
  """[..., k] x [k, n] -> [..., n], accumulated in float32."""
  return lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())),
                         preferred_element_type=jnp.float32)


@jax.custom_vjp
def _mixed_matmul(x: jax.Array, w: jax.Array) -> jax.Array:
  return _product(x, w).astype(x.dtype)


def _forward(x, w):
  return _mixed_matmul(x, w), (x, w)


def _backward(residuals, g):
  x, w = residuals
  # d/dx = g w^T: contract g's last axis with w's last; d/dw = x^T g over every leading axis.
  dx = lax.dot_general(g, w, (((g.ndim - 1,), (1,)), ((), ())),
                       preferred_element_type=jnp.float32).astype(x.dtype)
  x2, g2 = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
  dw = lax.dot_general(x2, g2, (((0,), (0,)), ((), ())),
                       preferred_element_type=jnp.float32).astype(w.dtype)
  return dx, dw


_mixed_matmul.defvjp(_forward, _backward)


def matmul(x: jax.Array, w: jax.Array) -> jax.Array:
  """`x @ w` for x [..., k] and w [k, n] of one dtype, in that dtype (float32 accumulation),
  taken as one [prod(...), k] x [k, n] product (see the module's docstring for why)."""
  flat = x.reshape(-1, x.shape[-1])
  out = jnp.matmul(flat, w) if x.dtype == jnp.float32 else _mixed_matmul(flat, w)
  return out.reshape(*x.shape[:-1], w.shape[-1])


def dot_general(lhs: jax.Array, rhs: jax.Array, dimension_numbers, precision=None,
                preferred_element_type=None, **kwargs) -> jax.Array:
  """A `lax.dot_general` for Flax's dense layers, routed through `matmul` where it is one.

  A product that contracts lhs's trailing axes with rhs's leading axes, in order and without
  batch axes (Dense, DenseGeneral over (heads, head_dim)), is a matrix product of reshaped
  operands; anything else goes to `lax.dot_general` unchanged.
  """
  (lhs_contract, rhs_contract), batch = dimension_numbers
  n = len(lhs_contract)
  is_matmul = (not any(batch) and tuple(rhs_contract) == tuple(range(n))
               and tuple(lhs_contract) == tuple(range(lhs.ndim - n, lhs.ndim))
               and lhs.dtype == rhs.dtype and preferred_element_type in (None, lhs.dtype))
  if not is_matmul:
    return lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                           preferred_element_type=preferred_element_type, **kwargs)
  k = math.prod(rhs.shape[:n])
  out = matmul(lhs.reshape(*lhs.shape[:lhs.ndim - n], k), rhs.reshape(k, -1))
  return out.reshape(*lhs.shape[:lhs.ndim - n], *rhs.shape[n:])
