"""init_from's merge and the checkpoint locator."""

import numpy as np
import pytest

from encoder.errors import CheckpointError
from encoder.train.checkpoint import find_params_directory, merge_init_from


def test_merge_keeps_fresh_leaves_that_are_new_or_reshaped():
  fresh = {'encoder': {'w': np.zeros((2, 2))}, 'head': {'w': np.zeros((2, 3)), 'b': np.zeros(3)}}
  loaded = {'encoder': {'w': np.ones((2, 2))}, 'head': {'w': np.ones((2, 5))},
            'other': {'x': np.ones(1)}}
  merged, kept = merge_init_from(fresh, loaded)
  np.testing.assert_array_equal(merged['encoder']['w'], 1.0)
  np.testing.assert_array_equal(merged['head']['w'], 0.0)
  assert sorted(kept) == ['head/b', 'head/w']


def test_locator_accepts_workdir_checkpoints_dir_and_step(tmp_path):
  for step in (3, 12):
    (tmp_path / 'checkpoints' / str(step) / 'params').mkdir(parents=True)
  (tmp_path / 'checkpoints' / '20.orbax-checkpoint-tmp').mkdir()  # an unfinished save
  newest = str(tmp_path / 'checkpoints' / '12' / 'params')
  assert find_params_directory(str(tmp_path)) == newest
  assert find_params_directory(str(tmp_path / 'checkpoints')) == newest
  assert find_params_directory(str(tmp_path / 'checkpoints' / '3')).endswith('3/params')
  with pytest.raises(CheckpointError, match='no complete checkpoint'):
    find_params_directory(str(tmp_path / 'checkpoints' / '20.orbax-checkpoint-tmp'))
