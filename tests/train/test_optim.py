"""Optimizer pieces: BERT's weight-decay mask and the learning-rate schedules."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from encoder.errors import ConfigError
from encoder.train.optim import learning_rate_schedule, make_optimizer, weight_decay_mask


def train_config(**overrides):
  fields = dict(learning_rate=1e-3, warmup_steps=10, num_steps=110, schedule='linear',
                optimizer='adamw', weight_decay=0.5, b1=0.9, b2=0.999, eps=1e-6, clip_norm=1.0)
  fields.update(overrides)
  return ml_collections.ConfigDict(fields)


def test_weight_decay_skips_biases_and_layer_norms():
  params = {'layer': {'dense': {'kernel': 1, 'bias': 2}, 'norm': {'scale': 3, 'bias': 4}},
            'embed': {'embedding': 5}, 'mlm': {'output_bias': 6}}
  mask = weight_decay_mask(params)
  assert mask == {'layer': {'dense': {'kernel': True, 'bias': False},
                            'norm': {'scale': False, 'bias': False}},
                  'embed': {'embedding': True}, 'mlm': {'output_bias': False}}


def test_decay_changes_kernels_only_when_gradients_are_zero():
  params = {'dense': {'kernel': jnp.ones((2, 2)), 'bias': jnp.ones(2)}}
  tx = make_optimizer(train_config(warmup_steps=0, schedule='constant'))
  grads = {'dense': {'kernel': jnp.zeros((2, 2)), 'bias': jnp.zeros(2)}}
  updates, _ = tx.update(grads, tx.init(params), params)
  new = optax.apply_updates(params, updates)
  np.testing.assert_allclose(new['dense']['kernel'], 1 - 1e-3 * 0.5)
  np.testing.assert_allclose(new['dense']['bias'], 1.0)


@pytest.mark.parametrize('schedule', ['linear', 'cosine', 'constant'])
def test_schedules_warm_up_then_follow_their_shape(schedule):
  lr = learning_rate_schedule(train_config(schedule=schedule))
  values = np.array([float(lr(s)) for s in range(111)])
  np.testing.assert_allclose(values[:11], np.linspace(0, 1e-3, 11), rtol=1e-5, atol=1e-9)
  if schedule == 'constant':
    np.testing.assert_allclose(values[10:], 1e-3, rtol=1e-6)
  else:
    assert np.all(np.diff(values[10:]) <= 1e-12) and values[110] == pytest.approx(0, abs=1e-9)
  if schedule == 'linear':
    assert values[60] == pytest.approx(0.5e-3, rel=1e-4)


def test_lamb_scales_each_step_by_the_trust_ratio():
  # LAMB (You et al., 2020) rescales each tensor's Adam-plus-decay update u to
  # lr * ||w|| / ||u|| * u. With uniform weights and gradients every element of u is equal,
  # so each element moves by exactly lr * |w|: a step proportional to the weight, whatever
  # the gradient, the decay or the clipping. AdamW moves it by lr * (~1 + decay * w).
  params = {'w': {'kernel': jnp.full((3, 3), 3.0), 'bias': jnp.full(3, 4.0)}}
  grads = jax.tree.map(jnp.ones_like, params)
  stepped = {}
  for name in ('lamb', 'adamw'):
    tx = make_optimizer(train_config(optimizer=name, warmup_steps=0, schedule='constant'))
    updates, _ = tx.update(grads, tx.init(params), params)
    stepped[name] = optax.apply_updates(params, updates)['w']
  np.testing.assert_allclose(stepped['lamb']['kernel'], 3.0 * (1 - 1e-3), rtol=1e-6)
  np.testing.assert_allclose(stepped['lamb']['bias'], 4.0 * (1 - 1e-3), rtol=1e-6)
  # AdamW: the kernel's decay (0.5 * 3) adds to the unit Adam step; the bias takes no decay.
  np.testing.assert_allclose(stepped['adamw']['kernel'], 3.0 - 1e-3 * 2.5, rtol=1e-5)
  np.testing.assert_allclose(stepped['adamw']['bias'], 4.0 - 1e-3, rtol=1e-5)


def test_unknown_optimizer_and_schedule_names():
  with pytest.raises(ConfigError, match='adamw, lamb'):
    make_optimizer(train_config(optimizer='sgdx'))
  with pytest.raises(ConfigError, match='linear, cosine, constant'):
    learning_rate_schedule(train_config(schedule='step'))
