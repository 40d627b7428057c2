"""Deterministic, resumable, host-sharded batches over cached instance arrays.

Why not grain: our records are five integers each and a batch is built by vectorised gathers, so
a per-record pipeline would only add overhead (a grain DataLoader moves records one by one through
Python). Position is a single integer, the global step: global batch s holds the instances at
positions [s*G, (s+1)*G) of an endless stream made of one fresh permutation per epoch, drawn from
(seed, epoch). Host h of H takes the h-th slice of each global batch, so hosts never overlap and
resuming is exact: a loader restored at step s yields what an uninterrupted one would.
"""

from __future__ import annotations

import math
import queue
import threading
import time
import weakref
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
  """Yields make_batch(step) for step = start, start+1, ...; threads prepare batches ahead.

  `prefetch` batches are kept in preparation ahead of the consumer at least. With `workers`
  above 1 (make_batch must then be thread-safe), up to that many are made at once, and the
  depth ahead follows what it measures: a batch that takes longer to make than the consumer
  takes per step (reads from a bucket: two round trips of tens of ms each) needs
  ceil(make time / step time) + 1 batches in flight to arrive on time. Batches are handed
  out in step order whichever finishes first, so what a step gets never depends on timing.

  `state()` is the position after the last batch handed out (not after the prefetched ones), so it
  can be saved with a checkpoint and passed back to resume exactly.
  """

  def __init__(self, make_batch: Callable[[int], Batch], step: int = 0, prefetch: int = 0,
               workers: int = 1):
    self._make, self._step, self._prefetch = make_batch, int(step), int(prefetch)
    self._workers = max(int(workers), 1)
    self._max_depth = max(self._prefetch, 2 * self._workers if self._workers > 1 else 0)
    self._todo: queue.Queue = queue.Queue()
    self._ready: dict[int, Any] = {}
    self._done = threading.Condition()
    self._scheduled = self._step  # steps below this were handed to the workers
    self._stop = threading.Event()
    self._threads: list[threading.Thread] = []
    self._make_s = 0.0  # moving averages: seconds to make a batch, between two __next__
    self._interval_s = 0.0
    self._last_next = None

  def state(self) -> dict[str, Any]:
    return {'step': self._step}

  @property
  def depth(self) -> int:
    """Batches to keep in preparation ahead of the consumer, from the measured times."""
    if self._workers == 1:
      return self._prefetch
    floor = max(self._prefetch, self._workers)  # every worker busy: a slow read is the norm
    if not self._interval_s:
      return floor
    needed = math.ceil(self._make_s / max(self._interval_s, 1e-4)) + 1
    return min(max(floor, needed), self._max_depth)

  def __iter__(self) -> BatchIterator:
    return self

  def __next__(self) -> Batch:
    now = time.perf_counter()
    if self._last_next is not None:
      self._interval_s = _average(self._interval_s, now - self._last_next)
    self._last_next = now
    if self._prefetch <= 0:
      batch = self._make(self._step)
    else:
      if not self._threads:
        self._start()
      self._schedule(self._step + 1 + self.depth)
      with self._done:
        while self._step not in self._ready:
          self._done.wait()
        batch = self._ready.pop(self._step)
      if isinstance(batch, BaseException):
        raise batch
    self._step += 1
    return batch

  def _schedule(self, until: int) -> None:
    for step in range(max(self._scheduled, self._step), until):
      self._todo.put(step)
    self._scheduled = max(self._scheduled, until)

  def _start(self) -> None:
    # The threads hold the iterator weakly: one dropped without close() is collected, and
    # its threads see that within a second and end (they would otherwise wait forever).
    for i in range(self._workers):
      thread = threading.Thread(target=_prefetch_worker, args=(weakref.ref(self), self._todo,
                                                                 self._stop),
                                daemon=True, name=f'data-prefetch-{i}')
      thread.start()
      self._threads.append(thread)

  def _work_on(self, step: int) -> None:
    start = time.perf_counter()
    try:
      item = self._make(step)
    except BaseException as e:  # noqa: BLE001 - handed to the consumer, which re-raises it
      item = e
    with self._done:
      self._make_s = _average(self._make_s, time.perf_counter() - start)
      self._ready[step] = item
      self._done.notify_all()

  def close(self) -> None:
    """Stops the prefetch threads (daemons, so forgetting this never blocks exit)."""
    self._stop.set()
    for _ in self._threads:
      self._todo.put(None)
    for thread in self._threads:
      thread.join(timeout=5)

  def __del__(self):
    self._stop.set()


def _prefetch_worker(iterator: weakref.ref, todo: queue.Queue, stop: threading.Event) -> None:
  """A prefetch thread: makes the steps `todo` names until told to stop, or until its
  iterator is gone."""
  while not stop.is_set():
    try:
      step = todo.get(timeout=1.0)
    except queue.Empty:
      if iterator() is None:
        return
      continue
    owner = iterator()
    if step is None or owner is None:
      return
    owner._work_on(step)
    del owner  # no strong reference while waiting


def _average(previous: float, value: float, weight: float = 0.2) -> float:
  return value if not previous else (1 - weight) * previous + weight * value


def restore_step(state: dict[str, Any] | None) -> int:
  """The step a saved `state()` resumes at (0 for None)."""
  if state is None:
    return 0
  if not isinstance(state, dict) or not isinstance(state.get('step'), int) or state['step'] < 0:
    raise DataError(f'bad data iterator state {state!r}: pass what iterator.state() returned')
  return state['step']
