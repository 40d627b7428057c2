"""`clipped_adamw` is optax's clip-then-AdamW chain in one pass per tensor, to rounding: the
same expressions fused differently (and a product for optax's quotient) round differently."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

from encoder.train.clipped_adamw import clipped_adamw
from encoder.train.optim import learning_rate_schedule, make_optimizer, weight_decay_mask
from tests.train.test_optim import train_config

SETTINGS = dict(b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01, mask=weight_decay_mask)


def _params(key):
  k1, k2, k3 = jax.random.split(key, 3)
  return {'embed': {'embedding': jax.random.normal(k1, (50, 8))},
          'dense': {'kernel': jax.random.normal(k2, (8, 8)), 'bias': jax.random.normal(k3, (8,))},
          'norm': {'scale': jnp.ones(8), 'bias': jnp.zeros(8)}}


def _run(tx, params, grads_per_step):
  """Parameters and optimizer state after jitted steps of `tx` on these gradients."""
  state = tx.init(params)

  @jax.jit
  def step(params, state, grads):
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state

  for grads in grads_per_step:
    params, state = step(params, state, grads)
  return params, state


def _gradients(params, steps):
  """Gradients on both sides of the clipping norm: scaled by 10 (clipped) and by 0.01 (not)."""
  keys = jax.random.split(jax.random.key(1), steps)
  return [jax.tree.map(lambda p, k=k, s=s: s * jax.random.normal(k, p.shape), params)
          for k, s in zip(keys, [10.0, 0.01] * steps, strict=False)]


def _assert_close(got, expected):
  """Each tensor within 1e-6 of its largest value: rounding, where an error in the update would
  be of the order of the learning rate (1e-3) or the moments themselves."""
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 * float(np.max(np.abs(b))))


def test_same_parameters_and_state_as_the_optax_chain():
  schedule = optax.linear_schedule(0.0, 1e-3, 3)
  params = _params(jax.random.key(0))
  grads = _gradients(params, 6)
  norms = [float(optax.global_norm(g)) for g in grads]
  assert max(norms) > 1.0 > min(norms)  # both branches of the clip are taken
  chain = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, **SETTINGS))
  ours = clipped_adamw(schedule, clip_norm=1.0, **SETTINGS)
  expected, expected_state = _run(chain, params, grads)
  got, got_state = _run(ours, params, grads)
  assert jax.tree.structure(got_state) == jax.tree.structure(expected_state)
  _assert_close((got, got_state), (expected, expected_state))
  decayed = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(schedule, b1=0.9, b2=0.999,
                                                                   eps=1e-6))
  without_decay, _ = _run(decayed, params, grads)  # the decay is there, and on kernels only
  assert np.max(np.abs(got['dense']['kernel'] - without_decay['dense']['kernel'])) > 1e-6
  np.testing.assert_allclose(got['dense']['bias'], without_decay['dense']['bias'], atol=1e-7)


def test_boxed_parameters_of_the_mesh_strategy_update_as_unboxed_ones():
  """The mesh strategy builds the optimizer on parameters still in Flax's logical boxes."""
  schedule = optax.constant_schedule(1e-3)
  params = _params(jax.random.key(2))
  boxed = jax.tree.map(lambda p: nn.Partitioned(p, names=(None,) * p.ndim), params)
  grads = _gradients(params, 2)
  boxed_grads = [jax.tree.map(lambda p: nn.Partitioned(p, names=(None,) * p.ndim), g)
                 for g in grads]
  tx = clipped_adamw(schedule, clip_norm=1.0, **SETTINGS)
  plain, _ = _run(tx, params, grads)
  in_boxes, _ = _run(tx, boxed, boxed_grads)
  for a, b in zip(jax.tree.leaves(nn.unbox(in_boxes)), jax.tree.leaves(plain), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # the same program: same bits


def test_make_optimizer_uses_it_for_clipped_adamw_only():
  params = _params(jax.random.key(3))
  grads = _gradients(params, 2)
  train = train_config()
  chain = optax.chain(optax.clip_by_global_norm(train.clip_norm),
                      optax.adamw(learning_rate_schedule(train), b1=train.b1, b2=train.b2,
                                  eps=train.eps, weight_decay=train.weight_decay,
                                  mask=weight_decay_mask))
  expected, _ = _run(chain, params, grads)
  got, _ = _run(make_optimizer(train), params, grads)
  _assert_close(got, expected)
  assert isinstance(make_optimizer(train_config(optimizer='lamb')).init(params), tuple)
