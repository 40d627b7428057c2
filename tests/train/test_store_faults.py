"""A run whose store fails under it, end to end on the GCS emulator (tests/emulators.py), with
the workdir and the prepared corpus in gs://:

- behind tests/fault_proxy.py, 5% of requests answered 503 and 50 ms on every request: the
  metrics are the clean run's, and the log says how many transient errors were retried;
- a prepared shard deleted mid-run: one `error:` line naming it, exit status 2, the save in
  flight committed; with the shard back the same command resumes from that checkpoint and ends
  as the clean run;
- SIGTERM during an evaluation, inside a checkpoint write and inside a metrics upload
  (tests/train/fault_launch.py's points with `:term`): each launch exits 0 with the step it
  stopped at committed, the next one resumes there, and the chain ends as the clean run.
"""

import os
import re
import subprocess
import sys
import tempfile
import threading
import uuid

import pytest

from encoder import storage
from encoder.data.pretrain.pretraining_data import PretrainingData
from encoder.train.metric_writer import read_metrics
from tests import emulators
from tests.fault_proxy import FaultProxy
from tests.train.conftest import launch_cmd, smoke_overrides
from tests.train.test_kill_resume import FAULT_LAUNCH, TIMING
from tests.train.test_trainer import train

# Every step logged, so a run stopped at any step resumes into the same log windows.
COMMON = ('train.num_steps=16', 'train.log_every=1', 'train.eval_every=4',
          'train.checkpoint_every=4')
RETRIED = re.compile(r'storage: (\d+) transient error\(s\) retried in this run \((.*)\)')


@pytest.fixture(scope='module')
def gs_env(gcs_emulator):
  """This process pointed at the GCS emulator for the module, as a user does it (one
  variable); yields the environment of a launch, with a persistent compilation cache shared
  with tests/train/test_kill_resume.py (the same programs, so the same bits)."""
  env = emulators.client_env(gcs_emulator)
  with pytest.MonkeyPatch.context() as patch:
    for name in set(os.environ) - set(env):
      patch.delenv(name)
    patch.setenv('STORAGE_EMULATOR_HOST', gcs_emulator)
    cache = os.environ.get('ENCODER_TEST_JAX_CACHE',
                           os.path.join(tempfile.gettempdir(), 'encoder-tests-jax-cache'))
    yield {**env, 'JAX_COMPILATION_CACHE_DIR': cache,
           'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '0'}


@pytest.fixture(scope='module')
def root(gs_env) -> str:
  """This module's prefix in the session's bucket; `ROOT/cache` holds the prepared corpus."""
  return f'gs://{emulators.GCS_BUCKET}/store-faults-{uuid.uuid4().hex[:8]}'


@pytest.fixture(scope='module')
def reference(root, corpus):
  """The clean run of COMMON, in this process."""
  workdir = f'{root}/reference'
  train(workdir, corpus, f'{root}/cache', *COMMON)
  return workdir


def records(workdir) -> list[dict]:
  return [{k: v for k, v in r.items() if k not in TIMING} for r in read_metrics(workdir)]


def committed(workdir) -> list[int]:
  steps = f'{workdir}/checkpoints'
  return sorted(int(n) for n in storage.listdir(steps) if n.isdigit()
                and storage.exists(f'{steps}/{n}/commit_success.txt'))


def launch(env, workdir, corpus, cache, *args, point=None) -> subprocess.CompletedProcess:
  cmd = launch_cmd(workdir, corpus, cache, *args)
  if point:
    cmd = [sys.executable, FAULT_LAUNCH, point, *cmd[2:]]
  return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow  # ~70 s: the checkpoint and metadata requests wait 50 ms each, in a row
def test_503s_and_latency_change_no_metric_and_the_log_counts_the_retries(gs_env, root, corpus):
  """The issue's 200 steps: ~1,000 requests, two evaluations, one checkpoint (the last)."""
  workdirs = {run: f'{root}/{run}-200' for run in ('clean', 'faulty')}
  args = ('train.num_steps=200', 'train.log_every=10', 'train.eval_every=100',
          'train.checkpoint_every=200')
  cache = f'{root}/cache'
  clean = launch(gs_env, workdirs['clean'], corpus, cache, *args)
  assert clean.returncode == 0, clean.stderr[-3000:]
  assert not RETRIED.search(clean.stderr)  # nothing failed: no line
  with FaultProxy(gs_env['STORAGE_EMULATOR_HOST'], latency_s=0.05, fault_rate=0.05,
                  seed=0) as proxy:
    faulty = launch({**gs_env, 'STORAGE_EMULATOR_HOST': proxy.url}, workdirs['faulty'], corpus,
                    cache, *args)
  assert faulty.returncode == 0, faulty.stderr[-3000:]
  assert records(workdirs['faulty']) == records(workdirs['clean'])
  assert {r['split'] for r in records(workdirs['clean'])} == {'train', 'eval'}
  [(total, kinds)] = RETRIED.findall(faulty.stderr)
  print(f'200 steps: {proxy.requests} requests, {proxy.faults} answered 503; the log: '
        f'{total} retried ({kinds})')
  # Each 503 is one retry, of whoever met it (tests/test_storage.py checks the sum); the run's
  # line leaves out those met before its loop (the lock), after its line (the lock's release),
  # and the reads still in flight when the process exits.
  assert 0 < int(total) <= proxy.faults


def shard_deleted_at(monkeypatch, step: int, path: str) -> dict:
  """Deletes `path` from the bucket when batch `step` (0-based) is made, once every earlier
  batch was (the loader makes several at once): the batches before it are whole, and batch
  `step` is the first to miss the object. Returns the object's bytes, to put it back."""
  kept = {'bytes': storage.read_bytes(path)}
  made, done = set(), threading.Condition()
  original = PretrainingData.train_batch

  def train_batch(self, s):
    if s == step:
      with done:
        assert done.wait_for(lambda: made >= set(range(step)), timeout=120)
      storage.remove(path)
    batch = original(self, s)
    with done:
      made.add(s)
      done.notify_all()
    return batch

  monkeypatch.setattr(PretrainingData, 'train_batch', train_batch)
  return kept


@pytest.mark.slow  # ~60 s with its clean run (two runs here, one there), at load ~5
def test_a_shard_deleted_mid_run_stops_with_one_line_and_the_newest_checkpoint_resumes(
    root, corpus, reference, monkeypatch, capsys, encoder_log):
  from encoder import launch as launch_lib
  workdir, cache = f'{root}/deleted', f'{root}/cache'
  [shard] = storage.glob(f'{cache}/prepared-*/tokens/00000.train.tokens.npy')
  argv = ['launch.py', '--exp', 'mlm_nsp_tiny:smoke', '--workdir', workdir,
          *(f'--config.{o}' for o in smoke_overrides(corpus, cache, *COMMON))]
  monkeypatch.setattr(sys, 'argv', argv)
  # Batch 8 is step 9's: steps 1-8 train, and checkpoint 8's save is in flight when it fails.
  with monkeypatch.context() as patch:
    kept = shard_deleted_at(patch, 8, shard)
    try:
      with pytest.raises(SystemExit) as exit_:
        launch_lib.main()
    finally:
      storage.write_atomic(shard, kept['bytes'])
  err = capsys.readouterr().err
  assert exit_.value.code == 2, err[-3000:]
  errors = [line for line in err.splitlines() if line.startswith('error:')]
  assert len(errors) == 1, err[-3000:]
  assert errors[0].startswith('error: cannot read the prepared corpus: object ')
  assert f'{shard} does not exist' in errors[0]
  assert 'Traceback' not in err
  assert committed(workdir) == [4, 8]  # the save in flight committed before the run stopped
  assert records(workdir) == records(reference)[:len(records(workdir))]
  assert max(r['step'] for r in read_metrics(workdir)) == 8
  with pytest.raises(SystemExit) as exit_:  # the shard back: the same command resumes
    launch_lib.main()
  err = capsys.readouterr().err
  assert exit_.value.code == 0, err[-3000:]
  assert re.search(r'Resuming from checkpoint at step 8 in gs://', encoder_log.text)
  assert records(workdir) == records(reference)
  assert committed(workdir) == committed(reference)


# (fault_launch point, the steps a launch may stop at): the signal is handled at the step after
# it arrives; sent from the asynchronous checkpoint write's thread, it may arrive a step or two
# later.
SIGTERM_CHAIN = [('eval:4:term', {5}), ('writing:8:term', {9, 10, 11}), ('upload:13:term', {14})]


@pytest.mark.slow
def test_sigterm_during_eval_a_checkpoint_write_and_an_upload_exits_0_and_resumes(
    gs_env, root, corpus, reference):
  workdir, cache = f'{root}/sigterm', f'{root}/cache'
  for point, steps in SIGTERM_CHAIN:
    out = launch(gs_env, workdir, corpus, cache, *COMMON, point=point)
    assert out.returncode == 0, f'{point}: {out.stderr[-3000:]}'
    stopped = re.findall(r'Stopped by SIGTERM at step (\d+): checkpoint saved', out.stderr)
    assert len(stopped) == 1 and int(stopped[0]) in steps, f'{point}: {out.stderr[-3000:]}'
    print(f'{point}: exit 0, stopped at step {stopped[0]}, committed {committed(workdir)}')
    assert int(stopped[0]) in committed(workdir), point
    assert 'Traceback' not in out.stderr
    assert records(workdir) == records(reference)[:len(records(workdir))], point
  out = launch(gs_env, workdir, corpus, cache, *COMMON)
  assert out.returncode == 0 and 'Resuming from checkpoint at step 14' in out.stderr, \
      out.stderr[-3000:]
  assert records(workdir) == records(reference)
  assert committed(workdir)[-1] == 16

