"""The path layer (encoder/storage.py) against real clients and storage servers on 127.0.0.1:
gcsfs on the GCS emulator, s3fs on moto; and the CLI's refusals of URLs it cannot serve."""

import os
import socket
import subprocess
import sys
import threading

import pytest

from encoder import storage
from encoder.errors import ConfigError
from tests import emulators

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKETS = {'gs': f'gs://{emulators.GCS_BUCKET}', 's3': f's3://{emulators.S3_BUCKET}'}


@pytest.mark.parametrize('kind', ['gs', 's3'])
def test_files_round_trip_through_the_bucket(cloud_env, kind):
  root = f'{BUCKETS[kind]}/roundtrip'
  storage.write_atomic(f'{root}/a.json', '{"x": 1}')
  storage.write_atomic(f'{root}/sub/b.txt', 'héllo\n'.encode())
  with storage.open(f'{root}/sub/c.txt', 'w', encoding='utf-8') as f:
    f.write('line\n')
  assert storage.read_text(f'{root}/a.json') == '{"x": 1}'
  assert storage.read_bytes(f'{root}/sub/b.txt') == 'héllo\n'.encode()
  assert sorted(storage.listdir(root)) == ['a.json', 'sub']
  assert storage.isdir(f'{root}/sub') and not storage.isfile(f'{root}/sub')
  assert storage.isfile(f'{root}/a.json') and not storage.isdir(f'{root}/a.json')
  assert not storage.exists(f'{root}/missing')
  assert storage.glob(f'{root}/sub/*.txt') == [f'{root}/sub/b.txt', f'{root}/sub/c.txt']
  storage.move(f'{root}/sub', f'{root}/moved')
  assert sorted(storage.listdir(f'{root}/moved')) == ['b.txt', 'c.txt']
  assert not storage.exists(f'{root}/sub/b.txt')
  storage.remove(f'{root}/a.json')
  storage.rmtree(root)
  assert not storage.exists(f'{root}/moved/b.txt')
  assert storage.abspath(f'{root}/') == root  # a URL is never made "absolute" locally


def test_local_paths_take_the_plain_calls(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  storage.write_atomic('f.txt', 'text')
  assert (tmp_path / 'f.txt').read_text() == 'text'
  assert not (tmp_path / 'f.txt.tmp').exists()
  assert storage.abspath('f.txt') == str(tmp_path / 'f.txt')
  assert storage.glob('*.txt') == ['f.txt']
  storage.check_bucket('f.txt')  # nothing to check locally


@pytest.mark.parametrize('url', ['ftp://host/run', 'file:///tmp/run', 'gcs://bucket/run',
                                 'gs:///no-bucket'])
def test_urls_we_cannot_serve_are_refused(url):
  with pytest.raises(ConfigError, match='unsupported storage URL|names no bucket'):
    storage.check(url)


@pytest.mark.parametrize('url', ['gs://rb/run', 's3://ab/run', 'gs://Upper/run',
                                 's3://under_score/run', 'gs://-dash/run', 'gs://a..b/run'])
def test_bucket_names_the_store_would_refuse_are_refused_in_one_line(url):
  with pytest.raises(ConfigError, match='is not a valid .* bucket name') as e:
    storage.check(url)
  assert '\n' not in str(e.value)


@pytest.mark.parametrize('url', ['gs://abc/run', 'gs://under_score/run', 'gs://a.b.c/run',
                                 's3://encoder-test/run', 's3://my.bucket-1/run'])
def test_valid_bucket_names_pass(url):
  assert storage.check(url) == url


def test_the_cli_refuses_a_short_bucket_name_before_writing(tmp_path, cloud_env):
  fs = storage.filesystem(BUCKETS['gs'])
  before = fs.find(emulators.GCS_BUCKET)
  out = launch(['--exp', 'mlm_nsp_tiny:smoke', '--workdir', 'gs://rb/run'], cloud_env, tmp_path)
  assert out.returncode == 2, out.stderr[-2000:]
  assert out.stderr.startswith("error: 'rb' (in 'gs://rb/run') is not a valid gs:// bucket")
  assert out.stderr.count('\n') == 1
  assert list(tmp_path.iterdir()) == [] and fs.find(emulators.GCS_BUCKET) == before


def test_uploads_ride_out_503s(cloud_env, gcs_emulator, monkeypatch):
  """Half the requests fail: every upload still lands whole (gcsfs retries a 503 itself, one
  to two seconds later; what it gives up on, store_retry retries again), and each 503 is one
  retry in store_retry.counts(), whoever retried it."""
  from encoder import store_retry
  from tests.fault_proxy import FaultProxy
  before = store_retry.counts()
  with FaultProxy(gcs_emulator, fault_rate=0.5, seed=3) as proxy:
    monkeypatch.setenv('STORAGE_EMULATOR_HOST', proxy.url)
    for i in range(3):
      storage.write_atomic(f"{BUCKETS['gs']}/faulty/{i}.txt", f'record {i}')
    monkeypatch.setenv('STORAGE_EMULATOR_HOST', gcs_emulator)
  assert proxy.faults > 0
  assert retried_since(before, 'gcsfs', 'upload') == proxy.faults
  assert [storage.read_text(f"{BUCKETS['gs']}/faulty/{i}.txt") for i in range(3)] == [
      f'record {i}' for i in range(3)]


def retried_since(before: dict, *kinds: str) -> int:
  from encoder import store_retry
  now = store_retry.counts()
  return sum(now.get(k, 0) - before.get(k, 0) for k in kinds)


@pytest.mark.slow  # the retry itself is tested in tests/train/test_store_faults.py
def test_checkpoint_retries_are_counted(cloud_env, gcs_emulator, monkeypatch):
  """A checkpoint saved through 30% of 503s: tensorstore retries the arrays' requests and gcsfs
  Orbax's metadata requests, each inside itself; store_retry.counts() holds both, one per 503
  (the trainer logs that figure), and the step restores."""
  import numpy as np

  from encoder import store_retry
  from encoder.train.checkpoint import Checkpointer
  from tests.fault_proxy import FaultProxy
  from tests.toy_state import toy_state
  workdir = f"{BUCKETS['gs']}/counted"
  params = {'encoder': {'w': np.arange(6.0, dtype=np.float32).reshape(2, 3)}}
  before = store_retry.counts()
  with FaultProxy(gcs_emulator, fault_rate=0.3, seed=0) as proxy:
    monkeypatch.setenv('STORAGE_EMULATOR_HOST', proxy.url)
    checkpointer = Checkpointer(workdir, keep=1)
    checkpointer.save(1, toy_state(params, 1), {'position': 1})
    checkpointer.close()
    monkeypatch.setenv('STORAGE_EMULATOR_HOST', gcs_emulator)
  assert retried_since(before, 'checkpoint') > 0  # some of the 503s met tensorstore
  # Each 503 is one retry, but for the Checkpointer's two bounded looks at the bucket (its
  # constructor's and the save's `isdir`): gcsfs's `_info` may take a 503 on the object as
  # "no such object" and list the prefix instead, absorbing it without a retry.
  retried = retried_since(before, 'checkpoint', 'gcsfs', 'upload', 'call')
  assert proxy.faults - 2 <= retried <= proxy.faults
  saved = Checkpointer(workdir, keep=1).restore_newest_readable(toy_state(params))
  assert saved.step == 1
  np.testing.assert_array_equal(saved.state.params['encoder']['w'], params['encoder']['w'])
  storage.rmtree(workdir)


def test_store_errors_are_sorted_into_transient_and_permanent():
  from encoder import store_retry

  class Http(Exception):
    def __init__(self, code):
      self.code = code
  assert all(store_retry.is_transient(Http(c)) for c in (408, 429, 500, 502, 503, 504))
  assert not any(store_retry.is_transient(Http(c)) for c in (400, 401, 403, 404, 412))
  assert store_retry.is_transient(ConnectionResetError()) and store_retry.is_transient(
      TimeoutError())
  assert not store_retry.is_transient(FileNotFoundError('gs://b/x'))
  calls = []

  def flaky():
    calls.append(1)
    if len(calls) < 3:
      raise Http(503)
    return 'ok'
  policy = store_retry.Policy(attempts=5, base_s=0.001)
  assert store_retry.call(flaky, 'object gs://b/x', 'test', policy) == 'ok' and len(calls) == 3
  with pytest.raises(store_retry.StoreError, match='object gs://b/x does not exist'):
    store_retry.call(lambda: (_ for _ in ()).throw(FileNotFoundError()), 'object gs://b/x',
                     'test', policy)
  with pytest.raises(store_retry.StoreError, match='still failing after 5 tries'):
    store_retry.call(lambda: (_ for _ in ()).throw(Http(503)), 'object gs://b/x', 'test', policy)


@pytest.mark.parametrize('kind', ['gs', 's3'])
def test_a_missing_bucket_is_one_config_error(cloud_env, kind):
  with pytest.raises(ConfigError, match=rf'bucket {kind}://no-such-bucket does not exist'):
    storage.check_bucket(f'{kind}://no-such-bucket/run')


def test_no_credentials_is_one_config_error(monkeypatch):
  # moto checking signatures, as S3 does, and knowing no key: every request is refused.
  with emulators.s3_server(require_auth=True) as url:
    for name, value in emulators.client_env(s3_url=url).items():
      monkeypatch.setenv(name, value)
    for name in set(os.environ) - set(emulators.client_env(s3_url=url)):
      monkeypatch.delenv(name)
    with pytest.raises(ConfigError, match='cannot reach bucket s3://encoder-test .*credentials'):
      storage.check_bucket('s3://encoder-test/run')


def launch(args, env, cwd):
  return subprocess.run([sys.executable, os.path.join(ROOT, 'launch.py'), *args], cwd=cwd,
                        env=env, capture_output=True, text=True, timeout=300)


def test_cli_refuses_an_unknown_scheme_before_writing(tmp_path):
  out = launch(['--exp', 'mlm_nsp_tiny:smoke', '--workdir', 'ftp://host/run'], os.environ,
               tmp_path)
  assert out.returncode == 2
  assert out.stderr.startswith('error: unsupported storage URL') and out.stderr.count('\n') == 1
  assert list(tmp_path.iterdir()) == []  # no local directory named 'ftp:'


def test_cli_refuses_a_missing_bucket_and_no_credentials_before_writing(
    tmp_path, gcs_emulator, cloud_env):
  fs = storage.filesystem(BUCKETS['gs'])
  before = fs.find(emulators.GCS_BUCKET)
  out = launch(['--exp', 'mlm_nsp_tiny:smoke', '--workdir', 'gs://no-such-bucket/run'],
               cloud_env, tmp_path)
  assert out.returncode == 2, out.stderr[-2000:]
  assert out.stderr.startswith('error: bucket gs://no-such-bucket does not exist')
  assert out.stderr.count('\n') == 1
  with emulators.s3_server(require_auth=True) as url:
    out = launch(['--report', 's3://encoder-test/sweep'], emulators.client_env(s3_url=url),
                 tmp_path)
  assert out.returncode == 2, out.stderr[-2000:]
  assert out.stderr.startswith('error: cannot reach bucket s3://encoder-test')
  assert out.stderr.count('\n') == 1
  assert list(tmp_path.iterdir()) == [] and fs.find(emulators.GCS_BUCKET) == before


@pytest.mark.parametrize('kind', ['gs', 's3'])
def test_bucket_checkpoints_commit_in_place_keep_the_newest_and_skip_unfinished_steps(
    cloud_env, kind, tmp_path, monkeypatch):
  """Orbax's arrays go into the bucket itself (tensorstore's gcs or s3 driver), each step is
  committed by `commit_success.txt`, retention deletes old steps there, and a step without the
  file (a save cut short) is neither listed, restored nor loaded."""
  import numpy as np

  from encoder.checkpoint_files import checkpoint_candidates, restore_newest_params
  from encoder.train.checkpoint import Checkpointer
  from tests.toy_state import toy_state
  monkeypatch.chdir(tmp_path)
  workdir = f'{BUCKETS[kind]}/ckpt'
  like = {'encoder': {'w': np.zeros((2, 3), np.float32)}}

  def params(step):
    return {'encoder': {'w': np.full((2, 3), step, np.float32)}}
  checkpointer = Checkpointer(workdir, keep=2)
  for step in (1, 2, 3):
    checkpointer.save(step, toy_state(params(step), step), {'position': step})
  checkpointer.close()
  steps = f'{workdir}/checkpoints'
  assert sorted(storage.listdir(steps)) == ['2', '3']  # step 1 deleted, nothing renamed aside
  assert storage.exists(f'{steps}/3/commit_success.txt')
  assert storage.exists(f'{steps}/3/params/manifest.ocdbt')  # tensorstore's, in the bucket
  storage.write_atomic(f'{steps}/4/params/_METADATA', '{')  # a save of step 4, cut short

  checkpointer = Checkpointer(workdir, keep=2)
  assert checkpointer.latest_step() == 3
  saved = checkpointer.restore_newest_readable(toy_state(like))
  assert (saved.step, int(saved.state.step), saved.data_state) == (3, 3, {'position': 3})
  np.testing.assert_array_equal(saved.state.params['encoder']['w'], params(3)['encoder']['w'])
  checkpointer.save(4, toy_state(params(4), 4), {'position': 4}, force=True)
  checkpointer.close()
  assert sorted(storage.listdir(steps)) == ['3', '4']
  assert checkpoint_candidates(workdir)[1] == [f'{steps}/4/params', f'{steps}/3/params']
  np.testing.assert_array_equal(restore_newest_params(workdir)[2]['encoder']['w'],
                                params(4)['encoder']['w'])
  assert list(tmp_path.iterdir()) == []  # no local directory named 'gs:' or 's3:'
  storage.rmtree(workdir)


def test_s3_checkpoints_are_refused_in_one_line_by_an_orbax_without_the_spec_builder(
    cloud_env, monkeypatch):
  """encoder/orbax_s3.py reaches s3:// through one private Orbax function; an Orbax that moved
  it gets one line before anything is written, not a half-written checkpoint."""
  from orbax.checkpoint._src.serialization import tensorstore_utils
  monkeypatch.delattr(tensorstore_utils, 'build_kvstore_tspec')
  with pytest.raises(ConfigError, match=r"'s3://encoder-test/run': this Orbax .* has no "
                                        r'tensorstore_utils.build_kvstore_tspec'):
    storage.check_checkpoint_location(f"{BUCKETS['s3']}/run")
  storage.check_checkpoint_location(f"{BUCKETS['gs']}/run")  # gs:// is Orbax's own


def test_one_variable_points_every_layer_at_the_emulator_and_no_metadata_server(
    cloud_env, monkeypatch):
  """Orbax (tensorstore's gcs and s3 drivers), epath/gcsfs and s3fs all reach the emulators
  from the one variable each, and none of them asks a metadata server: the metadata hosts are
  pointed at a local listener that counts connections."""
  listener = socket.socket()
  listener.bind(('127.0.0.1', 0))
  listener.listen()
  knocks = []

  def count():
    while True:
      try:
        conn, _ = listener.accept()
      except OSError:
        return
      knocks.append(1)
      conn.close()
  threading.Thread(target=count, daemon=True).start()
  metadata = f'127.0.0.1:{listener.getsockname()[1]}'
  for name in ('GCE_METADATA_HOST', 'GCE_METADATA_IP', 'GCE_METADATA_ROOT'):
    monkeypatch.setenv(name, metadata)
  monkeypatch.setenv('AWS_EC2_METADATA_SERVICE_ENDPOINT', f'http://{metadata}')
  try:
    import numpy as np

    from encoder.checkpoint_files import restore_newest_params
    from encoder.train.checkpoint import Checkpointer
    from tests.toy_state import toy_state
    params = {'encoder': {'w': np.arange(6.0, dtype=np.float32).reshape(2, 3)}}
    for kind in ('gs', 's3'):
      workdir = f'{BUCKETS[kind]}/layers'
      checkpointer = Checkpointer(workdir, keep=1)
      checkpointer.save(1, toy_state(params, 1), {'position': 1})
      checkpointer.close()
      _, params_dir, restored = restore_newest_params(workdir)
      assert params_dir == f'{workdir}/checkpoints/1/params'
      np.testing.assert_array_equal(restored['encoder']['w'], params['encoder']['w'])
      storage.write_atomic(f'{BUCKETS[kind]}/layers/x', 'x')
      assert storage.listdir(f'{BUCKETS[kind]}/layers')
      storage.rmtree(f'{BUCKETS[kind]}/layers')
    assert os.environ['TENSORSTORE_GCS_HTTP_URL'] == cloud_env['STORAGE_EMULATOR_HOST']
  finally:
    listener.close()
  assert knocks == []
