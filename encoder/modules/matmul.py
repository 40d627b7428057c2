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
def _mixed_matmul(x: jax.Array, w: jax.Array, b: jax.Array | None) -> jax.Array:
  out = _product(x, w)
  return (out if b is None else out + b.astype(jnp.float32)).astype(x.dtype)


def _forward(x, w, b):
  return _mixed_matmul(x, w, b), (x, w, b)


def _backward(residuals, g):
  x, w, b = residuals
  # d/dx = g w^T: contract g's last axis with w's last; d/dw = x^T g over every leading axis.
  dx = lax.dot_general(g, w, (((g.ndim - 1,), (1,)), ((), ())),
                       preferred_element_type=jnp.float32).astype(x.dtype)
  x2, g2 = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
  dw = lax.dot_general(x2, g2, (((0,), (0,)), ((), ())),
                       preferred_element_type=jnp.float32).astype(w.dtype)
  # The bias's gradient sums g over the rows in float32: the sum of a bfloat16 cotangent that
  # autodiff would take, through the bias's cast, becomes a reduce-window on XLA:CPU, 15x
  # slower ([512, 1536]: 2.5 against 0.16 ms; a dozen of them a MiniLM step).
  db = None if b is None else g2.astype(jnp.float32).sum(axis=0).astype(b.dtype)
  return dx, dw, db


_mixed_matmul.defvjp(_forward, _backward)


def matmul(x: jax.Array, w: jax.Array, b: jax.Array | None = None) -> jax.Array:
  """`x @ w (+ b)` for x [..., k] and w [k, n] of one dtype, in that dtype (float32
  accumulation), taken as one [prod(...), k] x [k, n] product (see the module's docstring for
  why). A bias b [n] (float32 parameters) is added to the float32 accumulation, and its
  gradient summed in float32; in float32 it is added after the product, as `nn.Dense` adds
  it."""
  flat = x.reshape(-1, x.shape[-1])
  if x.dtype == jnp.float32:
    out = jnp.matmul(flat, w)
    out = out if b is None else out + b.astype(out.dtype)
  else:
    out = _mixed_matmul(flat, w, b)
  return out.reshape(*x.shape[:-1], w.shape[-1])


def dot_general(lhs: jax.Array, rhs: jax.Array, dimension_numbers, precision=None,
                preferred_element_type=None, *, bias: jax.Array | None = None,
                **kwargs) -> jax.Array:
  """A `lax.dot_general` for Flax's dense layers, routed through `matmul` where it is one.

  A product that contracts lhs's trailing axes with rhs's leading axes, in order and without
  batch axes (Dense, DenseGeneral over (heads, head_dim)), is a matrix product of reshaped
  operands; anything else goes to `lax.dot_general` unchanged. `bias` (shaped as rhs's free
  axes) is added as `matmul` adds it (only to a product that is a matmul).
  """
  (lhs_contract, rhs_contract), batch = dimension_numbers
  n = len(lhs_contract)
  is_matmul = (not any(batch) and tuple(rhs_contract) == tuple(range(n))
               and tuple(lhs_contract) == tuple(range(lhs.ndim - n, lhs.ndim))
               and lhs.dtype == rhs.dtype and preferred_element_type in (None, lhs.dtype))
  if not is_matmul:
    if bias is not None:
      raise ValueError('a bias is added only to a product that is a matmul')
    return lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                           preferred_element_type=preferred_element_type, **kwargs)
  k = math.prod(rhs.shape[:n])
  out = matmul(lhs.reshape(*lhs.shape[:lhs.ndim - n], k), rhs.reshape(k, -1),
               None if bias is None else bias.reshape(-1))
  return out.reshape(*lhs.shape[:lhs.ndim - n], *rhs.shape[n:])
