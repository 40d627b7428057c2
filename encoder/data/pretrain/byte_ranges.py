"""Many byte ranges of many files, read at once: locally with os.pread, from a bucket coalesced
and concurrently.

A batch of 256 BERT pairs is 256 instance rows and ~512 token runs. Read one range per request
in a row, at a bucket's 20-50 ms per request, that is 15-40 s per batch. Two things hide it:

- Coalescing: ranges of one object whose gaps are under COALESCE_GAP_BYTES become one request
  (the gap's bytes are read and dropped). At 50-100 MB/s per stream, 256 KiB costs 3-5 ms,
  a tenth of the round trip it saves; a request is capped at MAX_REQUEST_BYTES so a dense
  batch does not turn into one huge download.
- Concurrency: the requests of a read (and of every batch being prepared at once) are issued
  together on the filesystem's event loop (gcsfs and s3fs are asyncio clients), at most
  `concurrency` in flight per process, each retried on transient failures (store_retry).

What is read, and so every batch, is the same bytes either way: only the requests differ.
Local files keep os.pread, one call per range on a descriptor kept open (thread-safe, no
seek), since a local read costs microseconds and coalescing would only copy more.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref

import numpy as np

from encoder import storage, store_retry

COALESCE_GAP_BYTES = 256 * 1024
MAX_REQUEST_BYTES = 16 * 1024 * 1024
DEFAULT_CONCURRENCY = 64

Request = tuple[str, int, int]  # (path, start, end): bytes [start, end) of a file


def coalesce(starts: np.ndarray, ends: np.ndarray, max_gap: int = COALESCE_GAP_BYTES,
             max_bytes: int = MAX_REQUEST_BYTES) -> tuple[list[tuple[int, int]], np.ndarray]:
  """Spans covering ranges [starts[i], ends[i]) of one file, merged where the gap between
  neighbours is at most `max_gap` and the span stays under `max_bytes` (a single range longer
  than that is its own span); and for each range, the index of its span."""
  starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
  order = np.argsort(starts, kind='stable')
  spans: list[list[int]] = []
  span_of = np.empty(len(starts), np.int64)
  for i in order:
    s, e = int(starts[i]), int(ends[i])
    if spans and s <= spans[-1][1] + max_gap and max(e, spans[-1][1]) - spans[-1][0] <= max_bytes:
      spans[-1][1] = max(spans[-1][1], e)
    else:
      spans.append([s, e])
    span_of[i] = len(spans) - 1
  return [(s, e) for s, e in spans], span_of


class RangeReader:
  """Reads lists of (path, start, end) and returns their bytes in order; counts its requests."""

  def __init__(self, concurrency: int = DEFAULT_CONCURRENCY):
    if concurrency < 1:
      from encoder.errors import ConfigError  # noqa: PLC0415 - only on a bad setting
      raise ConfigError(f'data.read_concurrency={concurrency} must be at least 1')
    self.concurrency = int(concurrency)
    self.requests = 0  # requests sent to a bucket (after coalescing), for benchmarks and tests
    self._lock = threading.Lock()
    self._fds: dict[str, int] = {}
    self._slots: dict[int, asyncio.Semaphore] = {}  # one per event loop, created on it
    weakref.finalize(self, _close_all, self._fds)

  def read(self, requests: list[Request], allow_short: bool = False) -> list[bytes]:
    """The bytes of each request, in order. A bucket object shorter than a range is an error
    unless `allow_short` (a header read of a small file)."""
    out: list[bytes | None] = [None] * len(requests)
    remote: dict[str, list[int]] = {}
    for i, (path, start, end) in enumerate(requests):
      if storage.is_remote(path):
        remote.setdefault(path, []).append(i)
      else:
        out[i] = os.pread(self._fd(path), end - start, start)
    if remote:
      self._read_remote(requests, remote, out, allow_short)
    return out

  def _fd(self, path: str) -> int:
    with self._lock:
      if path not in self._fds:
        self._fds[path] = os.open(path, os.O_RDONLY)
      return self._fds[path]

  def _read_remote(self, requests: list[Request], by_path: dict[str, list[int]],
                   out: list, allow_short: bool) -> None:
    jobs = []  # (path, span start, span end, [(output index, offset in span, length)])
    for path, indices in by_path.items():
      starts = np.array([requests[i][1] for i in indices])
      ends = np.array([requests[i][2] for i in indices])
      spans, span_of = coalesce(starts, ends)
      parts: list[list] = [[] for _ in spans]
      for j, i in enumerate(indices):
        parts[span_of[j]].append((i, int(starts[j]) - spans[span_of[j]][0],
                                  int(ends[j] - starts[j])))
      jobs.extend((path, s, e, p) for (s, e), p in zip(spans, parts, strict=True))
    with self._lock:
      self.requests += len(jobs)
    by_scheme: dict[str, list] = {}
    for job in jobs:
      by_scheme.setdefault(storage.scheme(job[0]), []).append(job)
    for group in by_scheme.values():
      self._fetch(storage.filesystem(group[0][0]), group, out, allow_short)

  def _fetch(self, fs, jobs: list, out: list, allow_short: bool) -> None:
    import fsspec.asyn  # noqa: PLC0415 - fsspec is only needed for bucket paths
    datas = fsspec.asyn.sync(fs.loop, self._gather, fs, jobs)
    for (path, start, end, parts), data in zip(jobs, datas, strict=True):
      if len(data) != end - start and not allow_short:
        raise store_retry.StoreError(f'{path} is shorter than expected ({start + len(data)} '
                                     f'bytes, reading to {end}): was it replaced?')
      for index, offset, length in parts:
        out[index] = data[offset:offset + length]

  async def _gather(self, fs, jobs: list) -> list[bytes]:
    loop = id(asyncio.get_running_loop())
    if loop not in self._slots:
      self._slots[loop] = asyncio.Semaphore(self.concurrency)
    slots = self._slots[loop]

    async def one(path: str, start: int, end: int) -> bytes:
      async with slots:
        return await store_retry.call_async(lambda: get_range(fs, path, start, end),
                                            f'object {path}', 'read')

    return await asyncio.gather(*(one(path, s, e) for path, s, e, _ in jobs))


async def get_range(fs, path: str, start: int, end: int) -> bytes:
  """Bytes [start, end) of a bucket object in one request, with no retry of the client's own.

  gcsfs retries a failed request inside itself, sleeping 1-2 s, then 2-3 s, ... and never
  says so: a 503 would stall the batch a second and go uncounted. Its request function's
  undecorated form (`__wrapped__`, what the `decorator` package keeps) sends one request, so
  the retries are store_retry's: short, jittered and counted. Elsewhere (s3fs; a gcsfs without
  it) the client's ranged read, with the client's retries."""
  protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
  request = getattr(getattr(type(fs), '_request', None), '__wrapped__', None)
  if 'gcs' not in protocols or request is None:
    return await fs._cat_file(path, start=start, end=end)
  headers = {'Range': f'bytes={start}-{end - 1}'}
  _, _, _, data = await request(fs, 'GET', fs.url(path), headers=headers)
  return data


def _close_all(fds: dict[str, int]) -> None:
  for fd in fds.values():
    os.close(fd)
