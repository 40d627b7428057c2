"""A packed pretraining run (data.packing=documents): exact resume across a stop, and one
device equal to eight."""

import numpy as np

from encoder.train.metric_writer import read_metrics
from tests.train.conftest import launch_cmd
from tests.train.test_trainer import losses, run_cli, train

PACKED = ('data.nsp=false', 'data.packing=documents', 'train.log_every=1')


def test_packed_run_resumes_exactly_and_fills_its_rows(tmp_path, corpus, cache_dir):
  common = (*PACKED, 'train.num_steps=4', 'train.eval_every=2', 'train.checkpoint_every=2')
  straight = train(tmp_path / 'straight', corpus, cache_dir, *common)
  train(tmp_path / 'resumed', corpus, cache_dir, *common, 'train.stop_at_step=2')
  resumed = train(tmp_path / 'resumed', corpus, cache_dir, *common)
  assert resumed == straight
  assert losses(tmp_path / 'resumed') == losses(tmp_path / 'straight')
  fractions = [r['real_token_fraction'] for r in read_metrics(str(tmp_path / 'straight'), 'train')]
  assert min(fractions) >= 0.95


def test_packed_run_on_one_device_equals_eight(tmp_path, corpus, cache_dir):
  args = (*PACKED, 'train.num_steps=2', 'train.batch_size=16')
  for devices in (1, 8):
    out = run_cli(launch_cmd(tmp_path / f'd{devices}', corpus, cache_dir, *args), devices)
    assert out.returncode == 0, out.stderr[-2000:]
  one, eight = losses(tmp_path / 'd1'), losses(tmp_path / 'd8')
  assert sorted(one) == [1, 2]
  np.testing.assert_allclose([eight[s] for s in one], list(one.values()), rtol=2e-5)
