"""Training reads prepared shards by index; it never loads a split.

Why .npy files: a shard's arrays are flat and fixed-width, so row i of the instances and token
range [a, a+n) are at computable byte offsets, read as byte ranges (one read per row or token
run: `NpyRows` below): os.pread locally, an epath handle in a bucket, where nothing can be
mapped. Not memory-mapped even locally: the kernel maps page-cache folios of up to 2 MB per
fault, so a process that samples at random soon has every touched shard file in its RSS
(633 MB after 51 batches of 256 on a 400 MB corpus, against a constant 54 MB with pread, which
was no slower). array_record through grain would add a per-record (de)serialisation layer for
records that are five integers, and the token ranges would still need a second random-access
store, so it buys nothing here (docs/scaling.md has the measurements).
"""

from __future__ import annotations

import io
import os
import threading
import weakref

import numpy as np
from etils import epath

from encoder.data.pretrain import packed_rows, shard_worker
from encoder.data.pretrain.instances import A_LEN, A_START, B_LEN, B_START

_STATIC = ('masked_positions', 'masked_ids', 'shown', 'weights')


def is_local(path: epath.Path) -> bool:
  """A local file (read with os.pread); anything else (gs://, s3://) through epath."""
  return os.path.exists(str(path))


class NpyRows:
  """Rows (or 1-D ranges) of one .npy, read by byte range: only what a batch needs.

  Local files are read with os.pread on a descriptor kept open (thread-safe: the prefetch thread
  and the caller may read at once), remote ones through an epath handle under a lock.
  """

  def __init__(self, path: epath.Path):
    self._fd, self._file = None, None
    if is_local(path):
      self._fd = os.open(str(path), os.O_RDONLY)
      weakref.finalize(self, os.close, self._fd)
      header = os.pread(self._fd, 4096, 0)
    else:
      self._file, self._lock = path.open('rb'), threading.Lock()
      weakref.finalize(self, self._file.close)
      header = self._file.read(4096)
    f = io.BytesIO(header)
    read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                   (2, 0): np.lib.format.read_array_header_2_0}[np.lib.format.read_magic(f)]
    self.shape, _, self.dtype = read_header(f)
    self._offset = f.tell()
    self._row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

  def _read(self, offset: int, size: int) -> bytes:
    if self._fd is not None:
      return os.pread(self._fd, size, self._offset + offset)
    with self._lock:
      self._file.seek(self._offset + offset)
      return self._file.read(size)

  def take(self, rows: np.ndarray) -> np.ndarray:
    data = b''.join(self._read(int(r) * self._row_bytes, self._row_bytes) for r in rows)
    return np.frombuffer(data, self.dtype).reshape(len(rows), *self.shape[1:])

  def ranges(self, starts: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """Slices [s, s+n) of a 1-D array."""
    size = self.dtype.itemsize
    return [np.frombuffer(self._read(int(s) * size, int(n) * size), self.dtype)
            for s, n in zip(starts, lengths, strict=True)]



class PreparedSplit:
  """The train or eval instances of a preparation, indexed globally across its shards."""

  def __init__(self, directory: str, instances_dir: str, counts: list[int], split: str,
               static: bool, packed_length: int = 0):
    """`packed_length`: the row length of packed rows (packed_rows), 0 for BERT's pairs."""
    self.directory, self.instances_dir, self.split, self.static = (
        directory, instances_dir, split, static)
    self.packed_length = packed_length
    self.offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    self._open: dict[int, dict[str, NpyRows]] = {}
    self._doc_starts: dict[int, np.ndarray] = {}
    self._lock = threading.Lock()

  def __len__(self) -> int:
    return int(self.offsets[-1])

  def _shard(self, i: int) -> dict[str, NpyRows]:
    if i not in self._open:
      names = ['instances'] + [f'static_{k}' for k in _STATIC] * self.static
      files = {n: NpyRows(shard_worker.instances_path(self.instances_dir, i, self.split, n))
               for n in names}
      files['tokens'] = NpyRows(shard_worker.tokens_path(self.directory, i, self.split,
                                                          'tokens'))
      self._open[i] = files
    return self._open[i]

  def _shard_doc_starts(self, i: int) -> np.ndarray:
    """Shard i's document starts (packed rows only), read whole once: 8 bytes a document."""
    with self._lock:  # the prefetch thread and the caller may both read
      if i not in self._doc_starts:
        path = shard_worker.instances_path(self.instances_dir, i, self.split, 'doc_starts')
        self._doc_starts[i] = shard_worker.load(path)
      return self._doc_starts[i]

  def take(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict | None,
                                           np.ndarray | None]:
    """(instances rebased onto a compact token array, that array, static masks or None, and
    for packed rows their `packed_rows.piece_starts`, else None) for global instance indices
    `idx`, in their order: only these rows and tokens are read."""
    idx = np.asarray(idx, np.int64)
    shard_of = np.searchsorted(self.offsets, idx, side='right') - 1
    local = idx - self.offsets[shard_of]
    inst = np.zeros((len(idx), 5), np.int64)
    static = {k: None for k in _STATIC} if self.static else None
    breaks = np.zeros((len(idx), self.packed_length), bool) if self.packed_length else None
    pieces, offset = [], 0
    for s in np.unique(shard_of):
      rows = np.flatnonzero(shard_of == s)
      files = self._shard(int(s))
      part = files['instances'].take(local[rows]).astype(np.int64)
      if breaks is not None:  # from absolute offsets, before the rebase below
        breaks[rows] = packed_rows.piece_starts(part, self._shard_doc_starts(int(s)),
                                                self.packed_length)
      for start, length in ((A_START, A_LEN), (B_START, B_LEN)):
        runs = files['tokens'].ranges(part[:, start], part[:, length])
        pieces.extend(runs)
        new_starts = offset + np.cumsum([0] + [len(r) for r in runs[:-1]])
        part[:, start] = new_starts
        offset += sum(len(r) for r in runs)
      inst[rows] = part
      if static is not None:
        for k in _STATIC:
          values = files[f'static_{k}'].take(local[rows])
          if static[k] is None:
            static[k] = np.zeros((len(idx), *values.shape[1:]), values.dtype)
          static[k][rows] = values
    tokens = np.concatenate(pieces).astype(np.int32) if pieces else np.zeros(0, np.int32)
    return inst, tokens, static, breaks
