"""Test setup: eight simulated CPU devices, so pmap paths run as on a real host.

The flag must be set before JAX is first imported, hence here at collection time.
"""

import logging
import os
import sys

os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


import pytest  # noqa: E402  (after the environment is set for JAX)


def pytest_xdist_auto_num_workers(config) -> int:
  """Workers for `-n auto` (pyproject's addopts): one per CPU this process may run on, at most
  8. A test is mostly one thread compiling, so a second worker on 2 cores ran the suite 1.4x
  faster; the cap keeps a many-core host from starting dozens of JAX runtimes (a worker's peak
  RSS reached 4.9 GB on the 2-core machine)."""
  cpus = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
  return max(1, min(cpus or 1, 8))


@pytest.fixture(scope='session')
def corpus(tmp_path_factory) -> str:
  """Python's pydoc topics as a BERT-format text corpus (real text, written in milliseconds)."""
  from tests.train.conftest import write_corpus
  return write_corpus(tmp_path_factory.mktemp('corpus') / 'topics.txt')


@pytest.fixture(scope='session')
def cache_dir(tmp_path_factory) -> str:
  """One data cache for the session, so each smoke run does not retokenize the corpus."""
  return str(tmp_path_factory.mktemp('cache'))


@pytest.fixture
def encoder_log(caplog):
  """caplog for the 'encoder' logger: once a run has set it up it no longer propagates to the
  root logger, where caplog listens, so the handler goes on the logger itself."""
  logger = logging.getLogger('encoder')
  logger.addHandler(caplog.handler)
  caplog.set_level(logging.INFO, logger='encoder')
  yield caplog
  logger.removeHandler(caplog.handler)


@pytest.fixture(scope='session')
def gcs_emulator():
  """A GCS emulator on 127.0.0.1 for the session, holding the bucket `emulators.GCS_BUCKET`
  (skipped, saying why, where it cannot start); yields its URL."""
  from tests import emulators
  with emulators.gcs_server() as url:
    yield url


@pytest.fixture(scope='session')
def s3_emulator():
  """A moto S3 server on 127.0.0.1 for the session, holding `emulators.S3_BUCKET`."""
  from tests import emulators
  with emulators.s3_server() as url:
    yield url


@pytest.fixture
def cloud_env(gcs_emulator, s3_emulator, monkeypatch):
  """This process pointed at both emulators the way a user does it: one variable each."""
  from tests import emulators
  for name in list(os.environ):
    if name not in emulators.client_env():
      monkeypatch.delenv(name)
  monkeypatch.setenv('STORAGE_EMULATOR_HOST', gcs_emulator)
  monkeypatch.setenv('AWS_ENDPOINT_URL', s3_emulator)
  return emulators.client_env(gcs_emulator, s3_emulator)
