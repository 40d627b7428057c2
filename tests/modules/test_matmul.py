"""The float32-accumulating bfloat16 product: same values and gradients as float32 math."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from encoder.modules import matmul


def _operands(shape_x, shape_w, seed=0):
  kx, kw = jax.random.split(jax.random.key(seed))
  return jax.random.normal(kx, shape_x), jax.random.normal(kw, shape_w)


def test_bf16_product_and_gradients_match_float32_math_on_the_rounded_operands():
  x, w = _operands((3, 5, 64), (64, 48))
  xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
  cot = jax.random.normal(jax.random.key(1), (3, 5, 48))

  out, vjp = jax.vjp(matmul.matmul, xb, wb)
  dx, dw = vjp(cot.astype(jnp.bfloat16))
  assert out.dtype == dx.dtype == dw.dtype == jnp.bfloat16

  # Reference: float32 products of the same bfloat16 values, rounded once at the end.
  xr, wr, cr = xb.astype(jnp.float32), wb.astype(jnp.float32), cot.astype(jnp.bfloat16)
  cr = cr.astype(jnp.float32)
  expected = [xr @ wr, cr @ wr.T, xr.reshape(-1, 64).T @ cr.reshape(-1, 48)]
  for got, want in zip((out, dx, dw), expected, strict=True):
    want = np.asarray(want.astype(jnp.bfloat16).astype(jnp.float32))
    np.testing.assert_allclose(np.asarray(got.astype(jnp.float32)), want, rtol=1e-2, atol=1e-2)


def test_float32_is_the_plain_product():
  x, w = _operands((4, 8), (8, 3))
  np.testing.assert_array_equal(matmul.matmul(x, w), x @ w)
  g_ours = jax.grad(lambda a, b: matmul.matmul(a, b).sum(), argnums=(0, 1))(x, w)
  g_plain = jax.grad(lambda a, b: (a @ b).sum(), argnums=(0, 1))(x, w)
  for a, b in zip(g_ours, g_plain, strict=True):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize('dims, shape_x, shape_w', [
    ((((2,), (0,)), ((), ())), (2, 3, 16), (16, 4)),  # Dense
    ((((2, 3), (0, 1)), ((), ())), (2, 3, 4, 8), (4, 8, 16)),  # DenseGeneral over heads
    ((((2,), (0,)), ((), ())), (2, 3, 16), (16, 3, 2, 4)),  # the fused Q/K/V kernel
    ((((1,), (1,)), ((), ())), (6, 16), (5, 16)),  # not a plain matmul: passed through
])
def test_dot_general_reshapes_to_a_matmul_with_the_same_result(dims, shape_x, shape_w):
  x, w = _operands(shape_x, shape_w)
  xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
  want = lax.dot_general(xb.astype(jnp.float32), wb.astype(jnp.float32), dims)
  got = matmul.dot_general(xb, wb, dims)
  assert got.shape == want.shape and got.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(got.astype(jnp.float32)), np.asarray(want),
                             rtol=1e-2, atol=2e-2)


def test_dense_is_nn_dense_in_float32_and_sums_its_bias_in_float32_in_bfloat16():
  import flax.linen as nn

  from encoder.modules.layers import Dense
  x = jax.random.normal(jax.random.key(0), (4, 8, 32))
  init = dict(kernel_init=nn.initializers.normal(0.1), bias_init=nn.initializers.normal(0.1))
  ours = Dense(16, dtype=jnp.float32, **init)
  theirs = nn.Dense(16, dtype=jnp.float32, dot_general=matmul.dot_general, **init)
  params = ours.init(jax.random.key(1), x)
  theirs_params = theirs.init(jax.random.key(1), x)
  jax.tree.map(np.testing.assert_array_equal, params, theirs_params)  # same draws, same names

  def loss(module, p, x):
    return jnp.sum(jnp.sin(module.apply(p, x).astype(jnp.float32)))

  # The same arithmetic; XLA:CPU may order the two graphs' sums differently: bit for bit on
  # AVX-512 Xeons, within 2.1e-7 relative (one or two float32 ulps) on an AVX2 Zen 3.
  for a, b in zip(jax.grad(loss, argnums=(1, 2))(ours, params, x),
                  jax.grad(loss, argnums=(1, 2))(theirs, params, x), strict=True):
    jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-7), a, b)
  # bfloat16: the bias gradient is the float32 sum of the bfloat16 cotangent, and no
  # reduce-window (XLA:CPU's slow form of a bfloat16 sum) is left in the compiled gradient.
  half = Dense(16, dtype=jnp.bfloat16, **init)
  grad = jax.jit(jax.grad(functools.partial(loss, half)))
  np.testing.assert_allclose(grad(params, x)['params']['bias'],
                             jax.grad(functools.partial(loss, ours))(params, x)['params']['bias'],
                             rtol=3e-2, atol=3e-2)
  assert 'reduce-window' not in grad.lower(params, x).compile().as_text()
