"""BatchIterator's prefetch threads end with their iterator: on close(), and when an iterator
is dropped without it (a run that raised before closing its loader left them waiting forever)."""

import gc
import threading
import time

from encoder.data.loader import BatchIterator


def prefetch_threads() -> list[threading.Thread]:
  return [t for t in threading.enumerate() if t.name.startswith('data-prefetch-')]


def wait_until(condition, seconds: float = 10.0) -> bool:
  deadline = time.monotonic() + seconds
  while time.monotonic() < deadline:
    if condition():
      return True
    time.sleep(0.05)
  return condition()


def test_batches_come_in_step_order_and_close_ends_the_threads():
  before = set(prefetch_threads())
  iterator = BatchIterator(lambda step: step * 10, step=3, prefetch=2, workers=3)
  assert [next(iterator) for _ in range(5)] == [30, 40, 50, 60, 70]
  assert iterator.state() == {'step': 8}
  mine = set(prefetch_threads()) - before
  assert len(mine) == 3
  iterator.close()
  assert not any(t.is_alive() for t in mine)


def test_an_iterator_dropped_without_close_lets_its_threads_end():
  before = set(prefetch_threads())
  iterator = BatchIterator(lambda step: step, prefetch=2, workers=2)
  assert next(iterator) == 0
  mine = set(prefetch_threads()) - before
  assert len(mine) == 2
  del iterator
  gc.collect()
  assert wait_until(lambda: not any(t.is_alive() for t in mine))
