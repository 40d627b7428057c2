"""The set-up of a run without data (benchmarks, tests) is seeded by train.seed.

setup_train_loop, the trainer's, is exercised by every trainer test (resume included), and
setup_steps' compiled step by tests/train/test_mesh.py, which steps through it."""

import jax
import numpy as np

from encoder import configs
from encoder.train import run_setup
from tests.train.test_mesh import tiny_setup


def _params(run) -> list[np.ndarray]:
  return [np.asarray(x) for x in jax.tree.leaves(run.strategy.to_checkpoint(run.state).params)]


def test_setup_steps_is_seeded_by_train_seed():
  config, *_ = tiny_setup()
  first, again = run_setup.setup_steps(config), run_setup.setup_steps(config)
  other = run_setup.setup_steps(configs.with_fields(config, {'train.seed': 1}))
  assert all(np.array_equal(a, b) for a, b in zip(_params(first), _params(again), strict=True))
  assert not all(np.array_equal(a, b) for a, b in zip(_params(first), _params(other),
                                                      strict=True))
  assert first.num_params == sum(p.size for p in _params(first))
