"""Two sequence-length phases (data.first_phase_seq_length / first_phase_steps): which batches
each phase serves, that both are pure functions of the step, and the bad settings refused."""

import numpy as np
import pytest

from encoder.data.pretrain import preparation
from encoder.data.pretrain.pretraining_data import (
  build_pretraining_data,
  ensure_prepared,
  first_phase_config,
)
from encoder.errors import ConfigError
from tests.data.conftest import make_config


def _phased(corpus_dir, tmp_path, length=32, steps=5):
  return make_config(corpus_dir, tmp_path, first_phase_seq_length=length, first_phase_steps=steps)


def test_steps_before_the_switch_are_short_and_eval_is_at_the_final_length(corpus_dir, tmp_path):
  config = _phased(corpus_dir, tmp_path)
  data = build_pretraining_data(config, str(tmp_path / 'run'))
  for step in (0, 4):
    batch = data.train_batch(step)
    assert batch['input_ids'].shape == (16, 32)
    assert batch['masked_positions'].shape == (16, round(32 * 0.15))  # its own default
  for step in (5, 9):
    assert data.train_batch(step)['input_ids'].shape == (16, 64)
  assert all(b['input_ids'].shape == (16, 64) for b in data.eval_batches(2))
  assert data.stats['first_phase_train_instances'] > data.stats['train_instances']

  # Each phase serves what a one-phase run at its length would: the same batch for a step.
  alone = build_pretraining_data(first_phase_config(config), str(tmp_path / 'run'))
  final = build_pretraining_data(make_config(corpus_dir, tmp_path), str(tmp_path / 'run'))
  for step, reference in ((3, alone), (7, final)):
    for key, value in reference.train_batch(step).items():
      np.testing.assert_array_equal(data.train_batch(step)[key], value)

  # Resuming after the switch gives the batches of the uninterrupted run.
  it = data.train_iterator()
  first = [next(it) for _ in range(7)]
  resumed = data.train_iterator({'step': 4})
  for expected in first[4:]:
    got = next(resumed)
    for key in expected:
      np.testing.assert_array_equal(got[key], expected[key])


def test_preparing_makes_both_phases_instances(corpus_dir, tmp_path):
  config = _phased(corpus_dir, tmp_path)
  ensure_prepared(config, str(tmp_path / 'run'))
  for phase in (first_phase_config(config), config):
    assert preparation.is_prepared(preparation.settings(phase, str(tmp_path / 'run')))


def test_one_phase_when_unset(corpus_dir, tmp_path):
  assert first_phase_config(make_config(corpus_dir, tmp_path)) is None


@pytest.mark.parametrize('length,steps', [(64, 5), (128, 5), (4, 5), (32, 0)])
def test_a_first_phase_that_is_not_shorter_or_has_no_steps_is_refused(corpus_dir, tmp_path,
                                                                     length, steps):
  with pytest.raises(ConfigError, match='first_phase_seq_length'):
    build_pretraining_data(_phased(corpus_dir, tmp_path, length, steps), str(tmp_path / 'run'))
