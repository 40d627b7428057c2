"""Batches read from a bucket (the GCS emulator, behind tests/fault_proxy.py) are the bits of
the local ones, in a few coalesced requests, through transient 503s; a deleted shard is one
DataError line naming it."""

import copy
import uuid

import numpy as np
import pytest

from encoder import storage, store_retry
from encoder.data.pretrain.pretraining_data import build_pretraining_data
from encoder.errors import DataError
from tests import emulators
from tests.data.conftest import make_config
from tests.fault_proxy import FaultProxy


@pytest.fixture
def prepared(corpus_dir, tmp_path, cloud_env):
  """A corpus prepared locally in ~8 KB shards, and its copy in the bucket: (local, remote)."""
  local = tmp_path / 'prepared'
  config = make_config(corpus_dir, tmp_path, prepare_shard_mb=8192 / 2**20,
                       prepared_dir=str(local), dynamic_masking=True)
  build_pretraining_data(config, str(tmp_path / 'run'))
  remote = f'gs://{emulators.GCS_BUCKET}/prepared-{uuid.uuid4().hex[:8]}'
  storage.filesystem(remote).put(str(local), remote, recursive=True)
  return config, remote


def _on(config, prepared_dir: str):
  c = copy.deepcopy(config)
  c.data.prepared_dir = prepared_dir
  return c


def _batches(data, steps=3) -> list[dict]:
  return [data.train_batch(s) for s in range(steps)] + data.eval_batches(2)


def _assert_same(a: list[dict], b: list[dict]) -> None:
  for x, y in zip(a, b, strict=True):
    assert x.keys() == y.keys()
    for k in x:
      np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def test_bucket_batches_are_the_local_bits_on_one_host_and_two(prepared, tmp_path):
  config, remote = prepared
  local = build_pretraining_data(config, str(tmp_path / 'run'))
  assert len(local._train.offsets) > 3  # many shards: a batch reads from several objects
  bucket = build_pretraining_data(_on(config, remote), str(tmp_path / 'run2'))
  _assert_same(_batches(local), _batches(bucket))
  halves = [build_pretraining_data(_on(config, remote), str(tmp_path / f'h{h}'), h, 2)
            for h in range(2)]
  for step in range(3):
    joined = {k: np.concatenate([h.train_batch(step)[k] for h in halves]) for k in
              local.train_batch(step)}
    _assert_same([local.train_batch(step)], [joined])


def test_a_batch_takes_a_few_coalesced_requests(prepared, tmp_path, gcs_emulator, monkeypatch):
  config, remote = prepared
  with FaultProxy(gcs_emulator) as proxy:
    monkeypatch.setenv('STORAGE_EMULATOR_HOST', proxy.url)
    data = build_pretraining_data(_on(config, remote), str(tmp_path / 'run'))
    data.train_batch(0)  # opens the shards it touches (one header request each)
    proxy.reset_counts()
    reader = data._train.reader
    before = reader.requests
    rows = data.train_batch(1)['input_ids'].shape[0]
    shards = len(data._train.offsets) - 1
  # One request per row and two per pair before coalescing; now at most two per shard file
  # touched (the row round and the token round), however many rows fall in it.
  assert reader.requests - before <= 2 * shards < 3 * rows
  assert proxy.requests <= reader.requests - before + shards  # + headers of newly met shards


def test_transient_503s_are_retried_counted_and_change_no_bit(prepared, tmp_path, gcs_emulator,
                                                              monkeypatch):
  config, remote = prepared
  clean = _batches(build_pretraining_data(_on(config, remote), str(tmp_path / 'run')))
  retried = store_retry.counts().get('read', 0)
  with FaultProxy(gcs_emulator, fault_rate=0.2, seed=1) as proxy:
    monkeypatch.setenv('STORAGE_EMULATOR_HOST', proxy.url)
    faulty = _batches(build_pretraining_data(_on(config, remote), str(tmp_path / 'run')))
  # The batches' reads retried theirs (the rest met gcsfs's own retries: the manifest, ...).
  assert 0 < store_retry.counts()['read'] - retried <= proxy.faults
  _assert_same(clean, faulty)


def test_a_shard_deleted_mid_run_is_one_data_error_naming_it(prepared, tmp_path):
  config, remote = prepared
  data = build_pretraining_data(_on(config, remote), str(tmp_path / 'run'))
  data.train_batch(0)
  gone = f'{remote}/tokens/00000.train.tokens.npy'
  storage.remove(gone)
  with pytest.raises(DataError) as e:
    for step in range(1, 20):  # until a batch needs shard 0's tokens
      data.train_batch(step)
  assert gone in str(e.value) and 'does not exist' in str(e.value)
  assert '\n' not in str(e.value)
