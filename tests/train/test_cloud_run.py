"""Training with a bucket workdir, end to end on the storage emulators (tests/emulators.py): the
corpus, the data cache, config.json, metrics.jsonl, TensorBoard events, the tokenizer and the
Orbax checkpoints all live in gs:// (the GCS emulator) or s3:// (moto; Orbax's arrays through
tensorstore's s3 driver, encoder/orbax_s3.py), and a stopped run resumes exactly as a local one
does. The s3:// variants of the end-to-end runs are slow tests (each as long as its gs:// twin);
the default suite keeps s3:// checkpoints in tests/test_storage.py's round trips."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from encoder import storage
from encoder.train.metric_writer import read_metrics
from tests import emulators
from tests.train.conftest import launch_cmd
from tests.train.test_trainer import losses, train

BUCKETS = {'gs': f'gs://{emulators.GCS_BUCKET}', 's3': f's3://{emulators.S3_BUCKET}'}
BOTH = pytest.mark.parametrize('kind', ['gs', pytest.param('s3', marks=pytest.mark.slow)])
SLOW_BOTH = pytest.mark.parametrize('kind', ['gs', 's3'])


@pytest.fixture(scope='module')
def straight(tmp_path_factory, corpus, cache_dir):
  """The uninterrupted local run each bucket run is compared with."""
  workdir = tmp_path_factory.mktemp('straight') / 'w'
  return workdir, train(workdir, corpus, cache_dir, 'train.num_steps=4', 'train.log_every=1')


def bucket_corpus(bucket: str, corpus) -> str:
  """The test corpus copied into the bucket, as a `text:` glob over it."""
  with open(corpus, 'rb') as f:
    storage.write_atomic(f'{bucket}/corpus/part-0.txt', f.read())
  return f'{bucket}/corpus/*.txt'


@pytest.mark.slow  # bucket workdirs stay in the default suite through tests/test_storage.py
@SLOW_BOTH
def test_a_bucket_run_stops_at_a_step_resumes_exactly_and_loads(cloud_env, straight, corpus,
                                                                 kind):
  straight, straight_metrics = straight
  bucket = BUCKETS[kind]
  workdir, cache = f'{bucket}/stop-at-step', f'{bucket}/cache'
  glob = bucket_corpus(bucket, corpus)
  train(workdir, glob, cache, 'train.num_steps=4', 'train.log_every=1', 'train.stop_at_step=2')
  assert max(losses(workdir)) == 2
  assert storage.exists(f'{workdir}/checkpoints/2/commit_success.txt')  # committed in place
  resumed = train(workdir, glob, cache, 'train.num_steps=4', 'train.log_every=1')
  assert losses(workdir) == losses(straight)
  assert resumed == straight_metrics
  assert losses(workdir, 'eval') == losses(straight, 'eval')
  names = storage.listdir(workdir)
  assert {'config.json', 'metrics.jsonl', 'tokenizer', 'checkpoints'} <= set(names)
  assert any(n.startswith('events.out.tfevents') for n in names)  # TensorBoard, in the bucket
  assert 'run.lock' not in names  # released
  assert storage.listdir(cache)  # the data cache, in the bucket

  import encoder
  here, there = encoder.load(workdir), encoder.load(str(straight))
  for a, b in zip(*(jax_leaves(m.params) for m in (here, there)), strict=True):
    np.testing.assert_array_equal(a, b)
  text = 'The function returns a [MASK] value.'
  assert here.fill_mask(text) == there.fill_mask(text)


def jax_leaves(tree):
  import jax
  return jax.tree.leaves(tree)


def test_a_second_run_on_a_held_bucket_workdir_is_refused(cloud_env, corpus, tmp_path):
  """The lock object of a live run (this test process, on this host) refuses the CLI run."""
  from encoder.train import object_lock
  workdir = f"{BUCKETS['gs']}/held"
  with object_lock.hold(workdir):
    out = subprocess.run(launch_cmd(workdir, corpus, str(tmp_path)), env=cloud_env,
                         capture_output=True, text=True, timeout=300)
  assert out.returncode == 2, out.stderr[-2000:]
  error = [line for line in out.stderr.splitlines() if line.startswith('error:')]
  assert error == [error[0]] and f"workdir '{workdir}' is in use by another run" in error[0]
  assert not storage.exists(workdir)  # nothing written beside the (released) lock


@pytest.mark.slow
@SLOW_BOTH
def test_sigterm_stops_a_bucket_run_and_the_same_command_resumes(cloud_env, corpus, cache_dir,
                                                                  tmp_path, kind):
  args = ('train.num_steps=40', 'train.checkpoint_every=1000', 'train.eval_every=1000',
          'train.log_every=1')
  env = {**cloud_env, 'XLA_FLAGS': '--xla_force_host_platform_device_count=1'}
  local = subprocess.run(launch_cmd(tmp_path / 'straight', corpus, cache_dir, *args), env=env,
                         capture_output=True, text=True, timeout=600)
  assert local.returncode == 0, local.stderr[-2000:]
  workdir = f'{BUCKETS[kind]}/sigterm'
  cmd = launch_cmd(workdir, corpus, cache_dir, *args)
  proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
  deadline = time.time() + 300
  while time.time() < deadline and not read_metrics(workdir):
    time.sleep(0.5)
  proc.send_signal(signal.SIGTERM)
  _, err = proc.communicate(timeout=300)
  assert proc.returncode == 0, err[-2000:]
  assert 'Stopped by SIGTERM' in err
  assert max(losses(workdir)) < 40
  again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
  assert again.returncode == 0 and 'Resuming from checkpoint' in again.stderr, again.stderr[-2000:]
  assert losses(workdir) == losses(tmp_path / 'straight')


@pytest.mark.slow
@SLOW_BOTH
def test_init_from_reads_a_bucket_run(cloud_env, corpus, cache_dir, tmp_path, encoder_log, kind):
  source = f'{BUCKETS[kind]}/init-source'
  train(source, corpus, cache_dir, 'train.num_steps=2')
  train(tmp_path / 'dst', corpus, cache_dir, 'train.num_steps=1', 'train.learning_rate=0.0',
        'train.warmup_steps=0', f'init_from={source}')
  assert f'Initialised from {source}; freshly initialised: nothing' in encoder_log.text
  import encoder
  src, dst = encoder.load(source), encoder.load(str(tmp_path / 'dst'))
  for a, b in zip(jax_leaves(src.params), jax_leaves(dst.params), strict=True):
    np.testing.assert_array_equal(a, b)  # learning rate 0: the step kept the loaded weights


@pytest.mark.slow
def test_a_two_run_sweep_and_its_report_live_in_the_bucket(cloud_env, corpus, cache_dir,
                                                           tmp_path):
  sweep_dir = f"{BUCKETS['gs']}/sweep"
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  cmd = [*launch_cmd(sweep_dir, corpus, cache_dir, 'train.num_steps=2'),
         '--sweep', 'train.learning_rate=0.001,0.002']
  out = subprocess.run(cmd, env=cloud_env, capture_output=True, text=True, timeout=900,
                       cwd=tmp_path)
  assert out.returncode == 0, out.stderr[-2000:]
  runs = sorted(n for n in storage.listdir(sweep_dir) if not n.startswith('sweep.'))
  assert len(runs) == 2
  for run in runs:
    assert storage.exists(f'{sweep_dir}/{run}/run_status.json')
    assert storage.exists(f'{sweep_dir}/{run}/checkpoints/2/commit_success.txt')
  storage.remove(f'{sweep_dir}/sweep.md')
  report = subprocess.run([sys.executable, os.path.join(root, 'launch.py'), '--report',
                           sweep_dir], env=cloud_env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
  assert report.returncode == 0, report.stderr[-2000:]
  assert report.stdout == storage.read_text(f'{sweep_dir}/sweep.md')
  assert all(run in report.stdout for run in runs)
  assert storage.read_bytes(f'{sweep_dir}/sweep.png').startswith(b'\x89PNG')
  assert list(tmp_path.iterdir()) == []  # nothing local
