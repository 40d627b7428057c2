"""Bucket calls against a store that accepts connections and never answers: each ends within
store_retry's bound with one line naming the call and the path, never a hang; and gs:// never
waits on gcsfs's gRPC bucket-type lookup (the stall behind issue 71)."""

import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from encoder import storage, store_retry
from encoder.errors import CheckpointError
from tests import emulators

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = f'gs://{emulators.GCS_BUCKET}'
QUICK = store_retry.Policy(timeout_s=0.5, budget_s=1.0)  # the default's shape, in seconds


@pytest.fixture
def silent_store(monkeypatch):
  """This process pointed at a silent store, with a bound of about 1.5 s a call."""
  with emulators.silent_server() as url:
    for name, value in emulators.client_env(gcs_url=url).items():
      monkeypatch.setenv(name, value)
    monkeypatch.setattr(store_retry, 'DEFAULT', QUICK)
    yield url


@pytest.mark.parametrize('call, name', [
    (lambda p: storage.exists(p), 'exists'),
    (lambda p: storage.listdir(p), 'ls'),
    (lambda p: storage.read_text(p), 'info'),
    (lambda p: storage.write_atomic(p, 'x'), 'upload'),
    (lambda p: storage.rmtree(p), 'rm'),
    (lambda p: storage.glob(p + '/*'), 'glob'),
])
def test_each_call_to_a_silent_store_ends_within_its_bound_naming_the_call(
    silent_store, call, name):
  path = f'{BUCKET}/run/file.txt'
  before = store_retry.counts()
  start = time.monotonic()
  with pytest.raises(store_retry.StoreError) as e:
    call(path)
  elapsed = time.monotonic() - start
  assert elapsed < 6 * QUICK.budget_s, elapsed
  assert str(e.value).startswith(f'{name} of ') and path in str(e.value)
  assert 'still failing after' in str(e.value) and '\n' not in str(e.value)
  after = store_retry.counts()
  assert sum(after.values()) > sum(before.values())  # the timed-out try was retried


def test_the_bucket_check_names_the_silence(silent_store):
  from encoder.errors import ConfigError
  with pytest.raises(ConfigError, match=r'cannot reach bucket gs://encoder-test: info of '
                                        r'gs://encoder-test still failing .* check the network'):
    storage.check_bucket(f'{BUCKET}/run')


def test_checkpoints_on_a_store_that_goes_silent_end_in_one_line(
    gcs_emulator, monkeypatch, encoder_log):
  """Saved on a live store; the store then stops answering: the next save ends within the
  bound with one CheckpointError line after a logged warning about the trash; a resume (a new
  Checkpointer) ends with one StoreError line."""
  from encoder.train.checkpoint import Checkpointer
  from tests.toy_state import toy_state
  for name, value in emulators.client_env(gcs_url=gcs_emulator).items():
    monkeypatch.setenv(name, value)
  workdir = f'{BUCKET}/silent'
  params = {'encoder': {'w': np.arange(6.0, dtype=np.float32).reshape(2, 3)}}
  checkpointer = Checkpointer(workdir, keep=1)
  checkpointer.save(1, toy_state(params, 1), {'position': 1})
  checkpointer.wait()
  with emulators.silent_server() as url:
    monkeypatch.setenv('STORAGE_EMULATOR_HOST', url)
    monkeypatch.setattr(store_retry, 'DEFAULT', QUICK)
    start = time.monotonic()
    with pytest.raises(CheckpointError) as e:
      checkpointer.save(2, toy_state(params, 2), {'position': 2})
    assert time.monotonic() - start < 12 * QUICK.budget_s
    assert 'could not write the checkpoint of step 2' in str(e.value)
    assert 'still failing after' in str(e.value) and '\n' not in str(e.value)
    assert any('not deleted yet' in r.getMessage() and r.levelno == logging.WARNING
               for r in encoder_log.records)
    start = time.monotonic()
    with pytest.raises(store_retry.StoreError, match=r'^isdir of gs://encoder-test/silent/'):
      Checkpointer(workdir, keep=1)
    assert time.monotonic() - start < 6 * QUICK.budget_s
  monkeypatch.setenv('STORAGE_EMULATOR_HOST', gcs_emulator)
  checkpointer.close()
  assert Checkpointer(workdir, keep=1).latest_step() == 1  # the store answers again: intact
  storage.rmtree(workdir)


def test_the_cli_on_a_silent_store_stops_with_one_line_within_the_variable_bound(tmp_path):
  with emulators.silent_server() as url:
    env = {**emulators.client_env(gcs_url=url), store_retry.TIMEOUT_VARIABLE: '0.5'}
    start = time.monotonic()
    out = subprocess.run([sys.executable, os.path.join(ROOT, 'launch.py'), '--exp',
                          'mlm_nsp_tiny:smoke', '--workdir', f'{BUCKET}/run'], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - start
  assert out.returncode == 2, out.stderr[-2000:]
  assert out.stderr.startswith('error: cannot reach bucket gs://encoder-test: info of ')
  assert out.stderr.count('\n') == 1 and list(tmp_path.iterdir()) == []
  assert elapsed < 60, elapsed


def test_gs_uses_the_json_api_client_whatever_imported_gcsfs_first():
  """gcsfs imported before any gs:// path is seen (its experimental class, which asks the
  Storage Control API over gRPC before each call) is still not what gs:// gets; a user who
  sets GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=true keeps gcsfs's choice."""
  probe = ('import gcsfs, fsspec\n'
           'first = gcsfs.GCSFileSystem.__name__\n'
           'from encoder import storage\n'
           "storage.check('gs://encoder-test/run')\n"
           "print(first, type(storage.filesystem('gs://encoder-test/run')).__name__,\n"
           "      fsspec.get_filesystem_class('gcs').__name__)\n")
  env = {k: v for k, v in os.environ.items() if k != 'GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT'}
  env['STORAGE_EMULATOR_HOST'] = 'http://127.0.0.1:9'  # never asked: nothing is read
  run = subprocess.run([sys.executable, '-c', probe], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
  assert run.stdout.split() == ['ExtendedGcsFileSystem', 'GCSFileSystem', 'GCSFileSystem'], \
      run.stderr[-2000:]
  env['GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT'] = 'true'
  run = subprocess.run([sys.executable, '-c', probe], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
  assert run.stdout.split() == ['ExtendedGcsFileSystem'] * 3, run.stderr[-2000:]
