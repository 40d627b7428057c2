"""Optimizer pieces: BERT's weight-decay mask and the learning-rate schedules."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from encoder import config_schema
from encoder.errors import ConfigError
from encoder.train.optim import learning_rate_schedule, make_optimizer, weight_decay_mask


def train_config(**overrides):
  fields = dict(learning_rate=1e-3, warmup_steps=10, num_steps=110, schedule='linear',
                optimizer='adamw', weight_decay=0.5, b1=0.9, b2=0.999, eps=1e-6, clip_norm=1.0)
  fields.update(overrides)
  train = config_schema.train_section()
  train.update(fields)
  return train


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


def stable_adamw_reference(params, grads_per_step, lr, b1, b2, eps, wd, decays):
  """StableAdamW in numpy, from Wortsman et al. (2023), Algorithm 2, as written there: the
  moments use beta-hat_t = beta (1 - beta^(t-1)) / (1 - beta^t), which makes them the
  bias-corrected estimates directly; RMS_t = sqrt(mean(g^2 / max(v, eps^2))) per tensor;
  eta_t = lr / max(1, RMS_t); w <- w - lr wd w - eta_t u / (sqrt(v) + eps)."""
  w = {k: np.array(v, np.float64) for k, v in params.items()}
  u = {k: np.zeros_like(v) for k, v in w.items()}
  v = {k: np.zeros_like(x) for k, x in w.items()}
  clipped = []
  for t, grads in enumerate(grads_per_step, start=1):
    hat1 = b1 * (1 - b1 ** (t - 1)) / (1 - b1 ** t)
    hat2 = b2 * (1 - b2 ** (t - 1)) / (1 - b2 ** t)
    for k in w:
      g = np.asarray(grads[k], np.float64)
      v[k] = hat2 * v[k] + (1 - hat2) * g * g
      u[k] = hat1 * u[k] + (1 - hat1) * g
      rms = np.sqrt(np.mean(g * g / np.maximum(v[k], eps ** 2)))
      eta = lr / max(1.0, rms)
      if rms > 1:
        clipped.append((t, k))
      w[k] = w[k] - (lr * wd * w[k] if decays[k] else 0) - eta * u[k] / (np.sqrt(v[k]) + eps)
  return w, clipped


def stepped(tx, params, grads_per_step):
  """`params` after `tx` applied the given gradients one step each, in float32."""
  p = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
  state = tx.init(p)
  for grads in grads_per_step:
    updates, state = tx.update({k: jnp.asarray(g, jnp.float32) for k, g in grads.items()},
                               state, p)
    p = optax.apply_updates(p, updates)
  return p


def test_stable_adamw_matches_the_papers_update_in_numpy():
  rng = np.random.default_rng(0)
  params = {'kernel': rng.normal(size=(4, 3)), 'bias': rng.normal(size=3),
            'scale': 1 + 0.1 * rng.normal(size=3)}
  steps = [{k: rng.normal(size=v.shape) * 0.1 for k, v in params.items()} for _ in range(6)]
  steps[3] = {k: g * 30 for k, g in steps[3].items()}  # a spike: the clipping has work to do
  steps[4]['kernel'] = steps[4]['kernel'] * 10
  lr, b1, b2, eps, wd = 1e-2, 0.9, 0.98, 1e-6, 0.1
  want, clipped = stable_adamw_reference(params, steps, lr, b1, b2, eps, wd,
                                         {'kernel': True, 'bias': False, 'scale': False})
  # Both branches of max(1, RMS_t) are taken: the spike is clipped on every tensor, and some
  # later steps are not (step 1's RMS is exactly 1: g^2 / v = 1).
  assert {k for t, k in clipped if t == 4} == {'kernel', 'bias', 'scale'}
  assert len([c for c in clipped if c[0] > 1]) < 3 * 5
  tx = make_optimizer(train_config(optimizer='stable_adamw', schedule='constant', warmup_steps=0,
                                   learning_rate=lr, b1=b1, b2=b2, eps=eps, weight_decay=wd,
                                   clip_norm=0.0))
  p = stepped(tx, params, steps)
  for k in params:
    np.testing.assert_allclose(np.asarray(p[k]), want[k], rtol=2e-5, atol=1e-6)
  # Without the clipping (AdamW), the spike moves the weights elsewhere: the test can tell.
  plain = make_optimizer(train_config(optimizer='adamw', schedule='constant', warmup_steps=0,
                                      learning_rate=lr, b1=b1, b2=b2, eps=eps, weight_decay=wd,
                                      clip_norm=0.0))
  q = stepped(plain, params, steps)
  assert np.abs(np.asarray(q['kernel']) - want['kernel']).max() > 1e-3


@pytest.mark.parametrize('shape', ['linear', 'cosine', '1-sqrt'])
def test_wsd_warms_up_holds_then_decays_in_its_shape(shape):
  lr = learning_rate_schedule(train_config(schedule='wsd', decay_steps=40, decay_shape=shape))
  values = np.array([float(lr(s)) for s in range(111)])
  np.testing.assert_allclose(values[:11], np.linspace(0, 1e-3, 11), rtol=1e-5, atol=1e-9)
  np.testing.assert_allclose(values[10:71], 1e-3, rtol=1e-6)  # stable until 40 before the end
  progress = (np.arange(70, 111) - 70) / 40
  expected = {'linear': 1 - progress, 'cosine': 0.5 * (1 + np.cos(np.pi * progress)),
              '1-sqrt': 1 - np.sqrt(progress)}[shape]
  np.testing.assert_allclose(values[70:], 1e-3 * expected, rtol=1e-5, atol=1e-9)


def test_wsd_stable_phase_does_not_depend_on_the_run_length():
  short = learning_rate_schedule(train_config(schedule='wsd', num_steps=60, decay_steps=20))
  long = learning_rate_schedule(train_config(schedule='wsd', num_steps=1000, decay_steps=0))
  assert [float(short(s)) for s in range(41)] == [float(long(s)) for s in range(41)]
  assert float(long(999)) == pytest.approx(1e-3)


def test_wsd_refuses_a_decay_longer_than_the_run_and_an_unknown_shape():
  with pytest.raises(ConfigError, match='decay_steps=200 must lie in 0..100'):
    learning_rate_schedule(train_config(schedule='wsd', decay_steps=200))
  with pytest.raises(ConfigError, match="decay_shape='sqrt'"):
    learning_rate_schedule(train_config(schedule='wsd', decay_steps=10, decay_shape='sqrt'))
  with pytest.raises(ConfigError, match='stable_adamw'):
    make_optimizer(train_config(optimizer='adam'))
