"""The output directory of `python -m encoder.embed`: shards of vectors and ids, and the
manifest that says which shards are finished, so a killed run resumes where it stopped.

  DIR/shard-00000.npy        float32 [n, hidden], the shard's documents in corpus order
  DIR/shard-00000.ids.json   their ids, a JSON list of strings
  DIR/manifest.json          what made them (model, corpus, settings) and the finished shards

A shard's two files are written whole (storage.write_atomic) and only then entered in the
manifest (rewritten whole too), so a shard the manifest lists is complete, and one it does not
list is computed again. A directory made by another model, corpus or settings is refused,
never overwritten: its vectors would not mix with these.
"""

from __future__ import annotations

import io
import json
import os

import numpy as np

from encoder import storage
from encoder.errors import ConfigError, DataError

MANIFEST = 'manifest.json'
FORMAT = 1


def shard_name(index: int) -> str:
  return f'shard-{index:05d}'


def check_directory(directory: str) -> None:
  """Refuses (one line) a non-empty directory that is not one of ours, before any work."""
  if storage.exists(directory) and not storage.isdir(directory):
    raise ConfigError(f"--out '{directory}' is a file: give a directory")
  if (storage.isdir(directory) and storage.listdir(directory)
      and not storage.isfile(os.path.join(directory, MANIFEST))):
    raise ConfigError(f"--out '{directory}' is not empty and has no {MANIFEST}: it is not an "
                      'embedding output; choose a new directory')


class ShardStore:
  """The output directory, for the run whose `identity` (model, corpus, settings: every value
  that changes a vector or which document it belongs to) is given."""

  def __init__(self, directory: str, identity: dict):
    check_directory(directory)
    self.directory, self.identity = directory, identity
    self.path = os.path.join(directory, MANIFEST)
    self.shards: dict[int, dict] = {}
    if storage.isfile(self.path):
      manifest = json.loads(storage.read_text(self.path))
      self._check_identity(manifest.get('identity', {}))
      self.shards = {int(s['index']): s for s in manifest.get('shards', [])}
    else:
      storage.makedirs(directory)

  def _check_identity(self, saved: dict) -> None:
    for key in sorted(set(saved) | set(self.identity)):
      if saved.get(key) != self.identity.get(key):
        raise ConfigError(f"--out '{self.directory}' holds embeddings made with {key}="
                          f'{saved.get(key)!r}, not {self.identity.get(key)!r}: resume with '
                          'the same model, corpus and settings, or choose a new --out')

  def finished(self) -> dict[int, int]:
    """{shard index: documents} of the shards the manifest lists whose files are there."""
    out = {}
    for index, shard in self.shards.items():
      name = os.path.join(self.directory, shard_name(index))
      if storage.isfile(name + '.npy') and storage.isfile(name + '.ids.json'):
        out[index] = int(shard['documents'])
    return out

  def write(self, index: int, ids: list[str], vectors: np.ndarray, **info) -> None:
    """The shard's vectors and ids, then the manifest listing it (with `info`)."""
    name = os.path.join(self.directory, shard_name(index))
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(vectors, np.float32))
    storage.write_atomic(name + '.npy', buffer.getvalue())
    storage.write_atomic(name + '.ids.json', json.dumps(ids))
    self.shards[index] = {'index': index, 'documents': len(ids), **info}
    self._write_manifest()

  def _write_manifest(self) -> None:
    shards = [self.shards[i] for i in sorted(self.shards)]
    complete = sum(s['documents'] for s in shards) == self.identity.get('documents')
    storage.write_atomic(self.path, json.dumps(
        {'format': FORMAT, 'identity': self.identity, 'complete': complete, 'shards': shards},
        indent=1) + '\n')


def read_embeddings(directory: str) -> tuple[list[str], np.ndarray]:
  """(ids, [n, hidden] vectors) of every finished shard of an output directory, in corpus
  order; a DataError if the manifest says the run has not finished."""
  path = os.path.join(directory, MANIFEST)
  if not storage.isfile(path):
    raise DataError(f"'{directory}' has no {MANIFEST}: not an embedding output")
  manifest = json.loads(storage.read_text(path))
  if not manifest.get('complete'):
    raise DataError(f"'{directory}' is not complete: run the same command again to finish it")
  ids, vectors = [], []
  for shard in sorted(manifest['shards'], key=lambda s: s['index']):
    name = os.path.join(directory, shard_name(shard['index']))
    ids.extend(json.loads(storage.read_text(name + '.ids.json')))
    vectors.append(np.load(io.BytesIO(storage.read_bytes(name + '.npy'))))
  return ids, np.concatenate(vectors)
