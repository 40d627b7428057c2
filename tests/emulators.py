"""Storage servers on 127.0.0.1 for the cloud-storage tests, started and stopped by the tests.

- GCS: the `gcp-storage-emulator` package (`python -m gcp_storage_emulator start --in-memory`),
  through tests/gcs_emulator.py, which adds the one response header tensorstore needs. It
  ignores generation preconditions and serves one request at a time.
- S3: `moto` in server mode (`python -m moto.server`), which honours `If-None-Match: *`.

A test reaches either through the one variable a user sets (`STORAGE_EMULATOR_HOST` or
`AWS_ENDPOINT_URL`); `encoder.storage.configure` maps it for every layer. Where a server
cannot start (its package missing), the test is skipped with one line saying which.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time

import pytest

GCS_BUCKET = 'encoder-test'
S3_BUCKET = 'encoder-test'


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _die_with_parent() -> None:
  """In the server's process: SIGTERM when the test process dies, however it dies (Linux), so
  a killed test session leaves no server behind."""
  if sys.platform.startswith('linux'):
    import ctypes
    import signal
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def _server(module: str, args: list[str], port: int, env: dict | None = None,
            script: str | None = None):
  if importlib.util.find_spec(module.split('.')[0]) is None:
    pytest.skip(f'storage emulator not installed: pip install -r requirements-dev.txt ({module})')
  command = [script] if script else ['-m', module]
  proc = subprocess.Popen([sys.executable, *command, *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})},
                          preexec_fn=_die_with_parent)
  try:
    deadline = time.time() + 60
    while True:
      try:
        socket.create_connection(('127.0.0.1', port), timeout=0.5).close()
        break
      except OSError:
        if proc.poll() is not None or time.time() > deadline:
          pytest.skip(f'the storage emulator {module} did not start on 127.0.0.1:{port}')
        time.sleep(0.1)
    yield f'http://127.0.0.1:{port}'
  finally:
    proc.terminate()
    try:
      proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.wait()


@contextlib.contextmanager
def gcs_server():
  """A fresh in-memory GCS emulator holding the empty bucket GCS_BUCKET; yields its URL."""
  port = _free_port()
  args = ['start', '--in-memory', '--host', '127.0.0.1', '--port', str(port), '--default-bucket',
          GCS_BUCKET]
  script = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'gcs_emulator.py')
  with _server('gcp_storage_emulator', args, port, script=script) as url:
    yield url


@contextlib.contextmanager
def s3_server(require_auth: bool = False):
  """A moto S3 server holding the empty bucket S3_BUCKET; yields its URL. With `require_auth`,
  it checks credentials as S3 does (moto's INITIAL_NO_AUTH_ACTION_COUNT=0) and knows none."""
  port = _free_port()
  env = {'INITIAL_NO_AUTH_ACTION_COUNT': '0'} if require_auth else {}
  with _server('moto.server', ['-H', '127.0.0.1', '-p', str(port)], port, env) as url:
    if not require_auth:
      import boto3
      boto3.client('s3', endpoint_url=url, region_name='us-east-1', aws_access_key_id='emulator',
                   aws_secret_access_key='emulator').create_bucket(Bucket=S3_BUCKET)
    yield url


@contextlib.contextmanager
def silent_server():
  """A server on 127.0.0.1 that accepts every connection and never answers: a store that
  hangs. Yields its URL; its thread and the connections it holds end with the block."""
  import threading
  listener = socket.socket()
  listener.bind(('127.0.0.1', 0))
  listener.listen(64)
  listener.settimeout(0.1)
  held, stop = [], threading.Event()

  def accept() -> None:
    while not stop.is_set():
      try:
        held.append(listener.accept()[0])
      except TimeoutError:
        continue
      except OSError:
        return
  thread = threading.Thread(target=accept, daemon=True)
  thread.start()
  try:
    yield f'http://127.0.0.1:{listener.getsockname()[1]}'
  finally:
    stop.set()
    thread.join(timeout=5)
    listener.close()
    for conn in held:
      conn.close()


def client_env(gcs_url: str | None = None, s3_url: str | None = None) -> dict:
  """What a user sets to use the emulators: one variable each (and nothing pointing at a cloud)."""
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(('AWS_', 'GOOGLE_', 'TENSORSTORE_', 'GCE_', 'STORAGE_EMULATOR'))}
  if gcs_url:
    env['STORAGE_EMULATOR_HOST'] = gcs_url
  if s3_url:
    env['AWS_ENDPOINT_URL'] = s3_url
  return env
