"""The set-up of a run without data (benchmarks, tests): seeded by train.seed, and its steps train.

setup_train_loop, the trainer's, is exercised by every trainer test (resume included)."""

import jax
import numpy as np

from encoder import configs
from encoder.train import run_setup
from tests.train.test_mesh import random_batches, tiny_setup


def _params(run) -> list[np.ndarray]:
  return [np.asarray(x) for x in jax.tree.leaves(run.strategy.to_checkpoint(run.state).params)]


def test_setup_steps_is_seeded_by_train_seed_and_steps():
  config, *_ = tiny_setup()
  first, again = run_setup.setup_steps(config), run_setup.setup_steps(config)
  other = run_setup.setup_steps(configs.with_fields(config, {'train.seed': 1}))
  assert all(np.array_equal(a, b) for a, b in zip(_params(first), _params(again), strict=True))
  assert not all(np.array_equal(a, b) for a, b in zip(_params(first), _params(other),
                                                      strict=True))
  assert first.num_params == sum(p.size for p in _params(first))
  [batch] = random_batches(config, 1)
  state, sums = first.train_step(first.state, first.strategy.place_batch(batch))
  assert int(first.strategy.to_checkpoint(state).step) == 1
  assert np.isfinite(first.task.reduce_metrics(first.strategy.sum_metrics([sums]))['loss'])
