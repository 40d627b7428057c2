"""The workdir lock on object stores (train/object_lock.py), against real storage servers.

The create-if-absent precondition is tested on moto (S3 `If-None-Match: *`), which honours it;
the GCS emulator ignores preconditions, so there only the read-before-create refusal is tested.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from encoder import storage
from encoder.errors import ConfigError
from encoder.train import object_lock, workdir_lock
from tests import emulators

BUCKETS = {'gs': f'gs://{emulators.GCS_BUCKET}', 's3': f's3://{emulators.S3_BUCKET}'}


def lock_of(workdir):
  """The lock object's record. s3fs reads a file as HEAD then GETs that must match its ETag, so
  a read that meets the holder's renewal in between fails (PreconditionFailed): read again."""
  path = f'{workdir}/{object_lock.LOCK_FILE}'
  for attempt in range(5):
    try:
      return json.loads(storage.read_text(path)) if storage.exists(path) else None
    except OSError:
      if attempt == 4:
        raise
      time.sleep(0.05)


@pytest.mark.parametrize('kind', ['gs', 's3'])
def test_a_held_lock_refuses_a_second_run_and_is_gone_after(cloud_env, kind):
  workdir = f'{BUCKETS[kind]}/lock-{kind}'
  with workdir_lock.hold(workdir):
    owner = lock_of(workdir)
    assert owner['pid'] == os.getpid() and owner['host'] == socket.gethostname()
    with pytest.raises(ConfigError, match=f"workdir '{workdir}' is in use by another run "
                                          rf'\(pid {os.getpid()} on host'):
      with object_lock.hold(workdir):
        pass
    assert lock_of(workdir)['token'] == owner['token']  # the refused run changed nothing
  assert lock_of(workdir) is None
  with object_lock.hold(workdir):  # free again
    assert lock_of(workdir)['pid'] == os.getpid()


def test_of_runs_racing_for_a_free_workdir_exactly_one_wins(cloud_env):
  """The create-if-absent precondition itself (moto honours it, as S3 does)."""
  workdir = f"{BUCKETS['s3']}/race"
  start, results = threading.Barrier(6), []

  def contend():
    start.wait()
    try:
      with object_lock.hold(workdir):
        results.append('won')
        time.sleep(1.0)  # still holding while the others try
    except ConfigError:
      results.append('refused')
  threads = [threading.Thread(target=contend) for _ in range(6)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert sorted(results) == ['refused'] * 5 + ['won']


@pytest.mark.parametrize('owner', [
    {'pid': 1, 'host': 'a-vm-that-died', 'started': 'then', 'renewed': 0},  # not renewed
    {'pid': 2 ** 22 + 7, 'host': socket.gethostname(), 'renewed': 'now'},  # dead on this host
    'not json'])
def test_a_stale_lock_is_taken_over_with_a_warning(cloud_env, owner, encoder_log):
  workdir = f"{BUCKETS['s3']}/stale"
  if isinstance(owner, dict) and owner['renewed'] == 'now':
    owner['renewed'] = time.time()
  storage.write_atomic(f'{workdir}/{object_lock.LOCK_FILE}',
                       owner if isinstance(owner, str) else json.dumps(owner))
  with object_lock.hold(workdir):
    assert lock_of(workdir)['pid'] == os.getpid()
  assert 'taking over the stale lock of a run that died' in encoder_log.text


def test_a_live_lock_on_another_host_is_refused(cloud_env):
  workdir = f"{BUCKETS['gs']}/other-host"
  owner = {'pid': 1, 'host': 'another-vm', 'started': 'now', 'renewed': time.time()}
  storage.write_atomic(f'{workdir}/{object_lock.LOCK_FILE}', json.dumps(owner))
  with pytest.raises(ConfigError, match='pid 1 on host another-vm'):
    with object_lock.hold(workdir):
      pass
  assert lock_of(workdir) == owner
  storage.remove(f'{workdir}/{object_lock.LOCK_FILE}')


def test_the_lock_is_renewed_while_the_run_lives(cloud_env, monkeypatch):
  monkeypatch.setattr(object_lock, 'RENEW_SECONDS', 0.2)
  workdir = f"{BUCKETS['s3']}/renew"
  with object_lock.hold(workdir):
    first = lock_of(workdir)['renewed']
    deadline = time.time() + 30
    while lock_of(workdir)['renewed'] == first and time.time() < deadline:
      time.sleep(0.1)
    assert lock_of(workdir)['renewed'] > first


def test_a_run_killed_holding_the_lock_blocks_until_stale(cloud_env, monkeypatch, encoder_log):
  """SIGKILL leaves the object behind: a run on another host is refused while it is fresh, and
  takes it over once it has not been renewed for STALE_SECONDS."""
  workdir = f"{BUCKETS['s3']}/killed"
  code = ('import time\nfrom encoder.train import object_lock\n'
          f"with object_lock.hold('{workdir}'):\n  print('held', flush=True)\n  time.sleep(60)\n")
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  proc = subprocess.Popen([sys.executable, '-c', code], cwd=root, env=cloud_env,
                          stdout=subprocess.PIPE, text=True)
  try:
    assert proc.stdout.readline().strip() == 'held'
  finally:
    proc.kill()
    proc.wait()
  owner = lock_of(workdir)
  owner['host'] = 'another-vm'  # as seen from elsewhere: no pid to check
  storage.write_atomic(f'{workdir}/{object_lock.LOCK_FILE}', json.dumps(owner))
  with pytest.raises(ConfigError, match='in use by another run'):
    with object_lock.hold(workdir):
      pass
  monkeypatch.setattr(object_lock, 'STALE_SECONDS', 0.0)
  with object_lock.hold(workdir):
    assert lock_of(workdir)['pid'] == os.getpid()
  assert 'taking over the stale lock' in encoder_log.text


def test_local_workdirs_keep_the_flock(tmp_path):
  with workdir_lock.hold(str(tmp_path / 'w')):
    assert json.loads((tmp_path / 'w' / 'run.lock').read_text())['pid'] == os.getpid()
    with pytest.raises(ConfigError, match='in use by another run'):
      with workdir_lock.hold(str(tmp_path / 'w')):
        pass
  assert not (tmp_path / 'w').exists()  # nothing written: no workdir left behind, as before

