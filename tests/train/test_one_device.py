"""One device: `parallel.strategy=pmap` runs the same step under `jax.jit` (no replicated
copies, no one-device all-reduce), with the same losses, state and dropout stream as pmap."""

import json
import os
import subprocess
import sys

import jax
import numpy as np

from encoder.train.strategy import OneDeviceStrategy
from tests.train.test_mesh import random_batches, tiny_setup

HERE = os.path.dirname(os.path.abspath(__file__))


def test_one_device_jit_equals_one_device_pmap_over_20_steps_with_dropout():
  env = {**os.environ, 'XLA_FLAGS': '', 'JAX_PLATFORMS': 'cpu'}
  out = subprocess.run([sys.executable, os.path.join(HERE, 'one_device_check.py')], env=env,
                       capture_output=True, text=True, timeout=600, check=True)
  result = json.loads(out.stdout.strip().splitlines()[-1])
  assert result['devices'] == 1 and result['chosen'] == 'OneDeviceStrategy'
  assert result['losses_move'] > 0.01  # the steps train: equal losses are not equal constants
  assert result['loss_diff'] <= 1e-6 and result['state_diff'] <= 1e-6, result


def test_one_device_state_has_no_device_axis_and_round_trips_a_checkpoint():
  config, task, model, tx = tiny_setup()
  strategy = OneDeviceStrategy()
  state = strategy.init_state(model, tx, task.dummy_batch(config), seed=0)
  like = strategy.checkpoint_like(model, tx, task.dummy_batch(config))
  assert jax.tree.map(np.shape, strategy.to_checkpoint(state)) == jax.tree.map(np.shape, like)
  train, evaluate = strategy.steps(model, task, tx, 1)
  batch = random_batches(config, 1)[0]
  state, sums = train(state, strategy.place_batch(batch))
  restored = strategy.place_state(strategy.to_checkpoint(state))
  assert int(restored.step) == 1
  metrics = strategy.sum_metrics([evaluate(restored.params, strategy.place_batch(batch))])
  assert np.isfinite(task.reduce_metrics(metrics)['loss'])
