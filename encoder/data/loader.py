"""Deterministic, resumable, host-sharded batches over cached instance arrays.

Why not grain: our records are five integers each and a batch is built by vectorised gathers, so
a per-record pipeline would only add overhead (a grain DataLoader moves records one by one through
Python). Position is a single integer, the global step: global batch s holds the instances at
positions [s*G, (s+1)*G) of an endless stream made of one fresh permutation per epoch, drawn from
(seed, epoch). Host h of H takes the h-th slice of each global batch, so hosts never overlap and
resuming is exact: a loader restored at step s yields what an uninterrupted one would.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from encoder.errors import DataError

Batch = dict[str, np.ndarray]


class Sampler:
  """Maps (step, host) to instance indices; epochs are fresh seeded permutations, forever."""

  def __init__(self, num_instances: int, global_batch: int, seed: int):
    self.n, self.global_batch, self.seed = num_instances, global_batch, seed
    self._perms: dict[int, np.ndarray] = {}
    self._lock = threading.Lock()  # the prefetch thread and the caller may both sample

  def permutation(self, epoch: int) -> np.ndarray:
    with self._lock:
      if epoch not in self._perms:
        if len(self._perms) >= 4:
          self._perms.pop(min(self._perms))
        self._perms[epoch] = np.random.default_rng([self.seed, 0x5348, epoch]).permutation(self.n)
      return self._perms[epoch]

  def indices(self, step: int, process_index: int = 0, process_count: int = 1) -> np.ndarray:
    return stream_indices(step, self.global_batch, self.n, lambda e, o: self.permutation(e)[o],
                          process_index, process_count)


def stream_indices(step: int, global_batch: int, n: int,
                   permuted: Callable[[int, np.ndarray], np.ndarray], process_index: int = 0,
                   process_count: int = 1) -> np.ndarray:
  """This host's share of global batch `step`: stream positions [step*G, (step+1)*G), each
  mapped by `permuted(epoch, offsets in that epoch)` to an instance (a batch may span epochs)."""
  per_host = global_batch // process_count
  first = step * global_batch + process_index * per_host
  positions = np.arange(first, first + per_host, dtype=np.int64)
  epochs = positions // n
  out = np.empty(per_host, np.int64)
  for e in np.unique(epochs):
    sel = epochs == e
    out[sel] = permuted(int(e), positions[sel] % n)
  return out


class BatchIterator(Iterator[Batch]):
  """Yields make_batch(step) for step = start, start+1, ...; a thread prepares `prefetch` ahead.

  `state()` is the position after the last batch handed out (not after the prefetched ones), so it
  can be saved with a checkpoint and passed back to resume exactly.
  """

  def __init__(self, make_batch: Callable[[int], Batch], step: int = 0, prefetch: int = 0):
    self._make, self._step, self._prefetch = make_batch, int(step), int(prefetch)
    self._queue: queue.Queue | None = None
    self._stop = threading.Event()
    self._thread: threading.Thread | None = None

  def state(self) -> dict[str, Any]:
    return {'step': self._step}

  def __iter__(self) -> BatchIterator:
    return self

  def __next__(self) -> Batch:
    if self._prefetch <= 0:
      batch = self._make(self._step)
    else:
      if self._thread is None:
        self._start()
      batch = self._queue.get()
      if isinstance(batch, BaseException):
        raise batch
    self._step += 1
    return batch

  def _start(self) -> None:
    self._queue = queue.Queue(maxsize=self._prefetch)
    self._thread = threading.Thread(target=self._work, args=(self._step,), daemon=True,
                                    name='data-prefetch')
    self._thread.start()

  def _work(self, step: int) -> None:
    while not self._stop.is_set():
      try:
        item = self._make(step)
      except BaseException as e:  # noqa: BLE001 - handed to the consumer, which re-raises it
        item = e
      while not self._stop.is_set():
        try:
          self._queue.put(item, timeout=0.1)
          break
        except queue.Full:
          continue
      if isinstance(item, BaseException):
        return
      step += 1

  def close(self) -> None:
    """Stops the prefetch thread (it is a daemon, so forgetting this never blocks exit)."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join(timeout=5)

  def __del__(self):
    self._stop.set()


def restore_step(state: dict[str, Any] | None) -> int:
  """The step a saved `state()` resumes at (0 for None)."""
  if state is None:
    return 0
  if not isinstance(state, dict) or not isinstance(state.get('step'), int) or state['step'] < 0:
    raise DataError(f'bad data iterator state {state!r}: pass what iterator.state() returned')
  return state['step']
