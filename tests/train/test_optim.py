"""Optimizer pieces: BERT's weight-decay mask and the learning-rate schedules."""

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


def test_lamb_and_unknown_names():
  params = {'w': {'kernel': jnp.ones((3, 3))}}
  tx = make_optimizer(train_config(optimizer='lamb'))
  tx.update(params, tx.init(params), params)
  with pytest.raises(ConfigError, match='adamw, lamb'):
    make_optimizer(train_config(optimizer='sgdx'))
  with pytest.raises(ConfigError, match='linear, cosine, constant'):
    learning_rate_schedule(train_config(schedule='step'))
