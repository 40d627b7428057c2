"""Training reads prepared shards by index; it never loads a split.

Why .npy files: a shard's arrays are flat and fixed-width, so row i of the instances and token
range [a, a+n) are at computable byte offsets, read as byte ranges: os.pread locally, and from
a bucket, where nothing can be mapped, coalesced ranged requests issued concurrently
(byte_ranges.py). A batch is read in two rounds, whatever the shard count: every instance row
(and fixed mask) it needs, then every token run those rows point at. Not memory-mapped even
locally: the kernel maps page-cache folios of up to 2 MB per fault, so a process that samples
at random soon has every touched shard file in its RSS (633 MB after 51 batches of 256 on a
400 MB corpus, against a constant 54 MB with pread, which was no slower). array_record
through grain would add a per-record (de)serialisation layer for records that are five
integers, and the token ranges would still need a second random-access store, so it buys
nothing here (docs/scaling.md has the measurements).
"""

from __future__ import annotations

import io
import threading

import numpy as np

from encoder import store_retry
from encoder.data.pretrain import packed_rows, shard_worker
from encoder.data.pretrain.byte_ranges import DEFAULT_CONCURRENCY, RangeReader
from encoder.data.pretrain.instances import A_LEN, A_START, B_LEN, B_START
from encoder.errors import DataError

_STATIC = ('masked_positions', 'masked_ids', 'shown', 'weights')


class NpyRows:
  """Where the rows (or 1-D ranges) of one .npy lie: byte ranges for a RangeReader."""

  def __init__(self, path: str, header: bytes):
    self.path = path
    f = io.BytesIO(header)
    read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                   (2, 0): np.lib.format.read_array_header_2_0}[np.lib.format.read_magic(f)]
    self.shape, _, self.dtype = read_header(f)
    self._offset = f.tell()
    self._row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

  def row_requests(self, rows: np.ndarray) -> list[tuple[str, int, int]]:
    first = self._offset + np.asarray(rows, np.int64) * self._row_bytes
    return [(self.path, int(a), int(a) + self._row_bytes) for a in first]

  def rows(self, chunks: list[bytes]) -> np.ndarray:
    return np.frombuffer(b''.join(chunks), self.dtype).reshape(len(chunks), *self.shape[1:])

  def range_requests(self, starts: np.ndarray, lengths: np.ndarray) -> list[tuple[str, int, int]]:
    """Slices [s, s+n) of a 1-D array."""
    size = self.dtype.itemsize
    return [(self.path, self._offset + int(s) * size, self._offset + (int(s) + int(n)) * size)
            for s, n in zip(starts, lengths, strict=True)]

  def ranges(self, chunks: list[bytes]) -> list[np.ndarray]:
    return [np.frombuffer(c, self.dtype) for c in chunks]


def read_safely(reader: RangeReader, requests: list, allow_short: bool = False) -> list[bytes]:
  """reader.read, with a bucket's final refusal (a shard deleted mid-run, no permission) made
  one DataError line naming the object."""
  try:
    return reader.read(requests, allow_short=allow_short)
  except store_retry.StoreError as e:
    raise DataError(f'cannot read the prepared corpus: {e}. The checkpoints are untouched; '
                    'restore the object (or prepare the corpus again) and run the same command '
                    'to resume') from None
  except FileNotFoundError as e:
    raise DataError(f'prepared corpus file {e.filename or e} is missing: restore it (or '
                    'prepare the corpus again) and run the same command to resume') from None


class PreparedSplit:
  """The train or eval instances of a preparation, indexed globally across its shards."""

  def __init__(self, directory: str, instances_dir: str, counts: list[int], split: str,
               static: bool, packed_length: int = 0,
               read_concurrency: int = DEFAULT_CONCURRENCY):
    """`packed_length`: the row length of packed rows (packed_rows), 0 for BERT's pairs;
    `read_concurrency`: bucket requests in flight at most (data.read_concurrency)."""
    self.directory, self.instances_dir, self.split, self.static = (
        directory, instances_dir, split, static)
    self.packed_length = packed_length
    self.offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    self._open: dict[int, dict[str, NpyRows]] = {}
    self._doc_starts: dict[int, np.ndarray] = {}
    self._lock = threading.Lock()
    self.reader = RangeReader(read_concurrency)

  def __len__(self) -> int:
    return int(self.offsets[-1])

  def _shards(self, indices) -> dict[int, dict[str, NpyRows]]:
    """The files of shards `indices`, their headers read (new ones at once) on first use."""
    with self._lock:
      new = [int(i) for i in indices if int(i) not in self._open]
    paths = {}
    for i in new:
      names = ['instances'] + [f'static_{k}' for k in _STATIC] * self.static
      for n in names:
        paths[i, n] = str(shard_worker.instances_path(self.instances_dir, i, self.split, n))
      paths[i, 'tokens'] = str(shard_worker.tokens_path(self.directory, i, self.split, 'tokens'))
    if paths:
      headers = read_safely(self.reader, [(p, 0, 4096) for p in paths.values()],
                            allow_short=True)
      files: dict[int, dict[str, NpyRows]] = {}
      for (i, n), path, header in zip(paths, paths.values(), headers, strict=True):
        files.setdefault(i, {})[n] = NpyRows(path, header)
      with self._lock:
        for i, f in files.items():
          self._open.setdefault(i, f)
    with self._lock:
      return {int(i): self._open[int(i)] for i in indices}

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
    shards = [int(s) for s in np.unique(shard_of)]
    opened = self._shards(shards)
    rows_of = {s: np.flatnonzero(shard_of == s) for s in shards}
    # Round 1: every row this batch needs, of every shard, in one read.
    names = ['instances'] + [f'static_{k}' for k in _STATIC] * self.static
    requests, where = [], {}
    for s in shards:
      for n in names:
        part = opened[s][n].row_requests(local[rows_of[s]])
        where[s, n] = slice(len(requests), len(requests) + len(part))
        requests.extend(part)
    chunks = read_safely(self.reader, requests)
    parts = {s: opened[s]['instances'].rows(chunks[where[s, 'instances']]).astype(np.int64)
             for s in shards}
    # Round 2: the token runs those rows point at (absolute offsets, before the rebase below).
    requests, runs_at = [], {}
    for s in shards:
      for start, length in ((A_START, A_LEN), (B_START, B_LEN)):
        part = opened[s]['tokens'].range_requests(parts[s][:, start], parts[s][:, length])
        runs_at[s, start] = slice(len(requests), len(requests) + len(part))
        requests.extend(part)
    token_chunks = read_safely(self.reader, requests)
    inst = np.zeros((len(idx), 5), np.int64)
    static = {k: None for k in _STATIC} if self.static else None
    breaks = np.zeros((len(idx), self.packed_length), bool) if self.packed_length else None
    pieces, offset = [], 0
    for s in shards:
      rows, part, files = rows_of[s], parts[s], opened[s]
      if breaks is not None:  # from absolute offsets, before the rebase below
        breaks[rows] = packed_rows.piece_starts(part, self._shard_doc_starts(s),
                                                self.packed_length)
      for start, _ in ((A_START, A_LEN), (B_START, B_LEN)):
        runs = files['tokens'].ranges(token_chunks[runs_at[s, start]])
        pieces.extend(runs)
        new_starts = offset + np.cumsum([0] + [len(r) for r in runs[:-1]])
        part[:, start] = new_starts
        offset += sum(len(r) for r in runs)
      inst[rows] = part
      if static is not None:
        for k in _STATIC:
          values = files[f'static_{k}'].rows(chunks[where[s, f'static_{k}']])
          if static[k] is None:
            static[k] = np.zeros((len(idx), *values.shape[1:]), values.dtype)
          static[k][rows] = values
    tokens = np.concatenate(pieces).astype(np.int32) if pieces else np.zeros(0, np.int32)
    return inst, tokens, static, breaks
