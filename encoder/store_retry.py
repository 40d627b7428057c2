"""Retries of a bucket's transient failures, counted; one line for a permanent one.

A bucket fails a small share of requests for reasons that pass (HTTP 429 and 5xx, timeouts,
connection resets); a long run makes millions of requests, so it meets them and must ride them
out. A missing object or a refused permission does not pass, and retrying it only delays the
one line that says which object. This module sorts errors into the two kinds and retries the
first with exponential backoff and full jitter (each wait uniform in [0, min(cap, base * 2^n)],
so the readers that failed together do not come back together) inside a bounded budget of
attempts and seconds; every retry is counted in `counts()`, which the trainer logs.

The prepared-corpus reader (encoder/data/pretrain/byte_ranges.py) and `storage.write_atomic`
(metrics, config, tokenizer uploads) go through here. Orbax's arrays are written by
tensorstore, which retries its own requests (its `gcs_request_retries`), and a failure that
remains becomes the trainer's one-line CheckpointError.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import random
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from encoder.errors import EncoderError

T = TypeVar('T')

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
PERMANENT_STATUS = frozenset({400, 401, 403, 404, 412})
_TRANSIENT_NAMES = ('Timeout', 'ConnectionReset', 'ConnectionError', 'ServerDisconnected',
                    'ClientConnector', 'ClientOSError', 'ProxyError', 'SlowDown',
                    'ServiceUnavailable', 'ChunkedEncoding', 'IncompleteRead', 'ReadError')

_counts: collections.Counter = collections.Counter()
_counts_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class Policy:
  """How long a transient failure is retried: at most `attempts` tries and `budget_s` seconds."""
  attempts: int = 10
  base_s: float = 0.05
  cap_s: float = 2.0
  budget_s: float = 120.0

  def delay(self, retry: int, rng: random.Random) -> float:
    return rng.uniform(0.0, min(self.cap_s, self.base_s * 2 ** retry))


DEFAULT = Policy()
_rng = random.Random()  # jitter only: what is read never depends on it


class StoreError(EncoderError):
  """A request the store refused for good, or one still failing when the budget ran out: one
  `error:` line from the CLI (exit status 2), naming the object."""


def status_of(error: BaseException) -> int | None:
  """The HTTP status an error of gcsfs, s3fs/botocore or aiohttp carries, if any."""
  for name in ('code', 'status', 'status_code'):
    value = getattr(error, name, None)
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
      return int(value)
  response = getattr(error, 'response', None)  # botocore ClientError
  if isinstance(response, dict):
    value = response.get('ResponseMetadata', {}).get('HTTPStatusCode')
    return int(value) if value else None
  return None


def is_transient(error: BaseException) -> bool:
  """True for what passes (429, 5xx, timeouts, resets), False for the rest."""
  if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError)):
    return False
  status = status_of(error)
  if status is not None:
    return status in TRANSIENT_STATUS
  if isinstance(error, (TimeoutError, ConnectionError, asyncio.TimeoutError)):
    return True
  return any(n in type(e).__name__ for e in _chain(error) for n in _TRANSIENT_NAMES)


def _chain(error: BaseException):
  seen = 0
  while error is not None and seen < 8:
    yield error
    error, seen = error.__cause__ or error.__context__, seen + 1


def count(kind: str, n: int = 1) -> None:
  with _counts_lock:
    _counts[kind] += n


def counts() -> dict[str, int]:
  """Retries so far in this process, by what was retried (e.g. 'read', 'upload')."""
  with _counts_lock:
    return dict(_counts)


def describe(error: BaseException) -> str:
  first = (str(error).strip().splitlines() or [''])[0][:160]
  return f'{type(error).__name__}: {first}' if first else type(error).__name__


def _give_up(error: BaseException, what: str, tries: int) -> StoreError:
  if isinstance(error, FileNotFoundError) or status_of(error) == 404:
    return StoreError(f'{what} does not exist (deleted or never written)')
  if isinstance(error, PermissionError) or status_of(error) in (401, 403):
    return StoreError(f'permission denied on {what} ({describe(error)}): check the '
                      'credentials and the bucket\'s access')
  if is_transient(error):
    return StoreError(f'{what} still failing after {tries} tries ({describe(error)})')
  return StoreError(f'cannot access {what} ({describe(error)})')


def call(fn: Callable[[], T], what: str, kind: str, policy: Policy = DEFAULT) -> T:
  """fn(), retried while it fails transiently; StoreError naming `what` otherwise."""
  start = time.monotonic()
  for retry in range(policy.attempts):
    try:
      return fn()
    except Exception as e:  # noqa: BLE001 - every client raises its own types
      if not is_transient(e) or retry + 1 == policy.attempts or \
         time.monotonic() - start > policy.budget_s:
        raise _give_up(e, what, retry + 1) from e
      count(kind)
      time.sleep(policy.delay(retry, _rng))
  raise AssertionError('unreachable')


async def call_async(fn: Callable[[], Awaitable[T]], what: str, kind: str,
                     policy: Policy = DEFAULT) -> T:
  """`call` for a coroutine function, waiting with asyncio.sleep (the event loop keeps going)."""
  start = time.monotonic()
  for retry in range(policy.attempts):
    try:
      return await fn()
    except Exception as e:  # noqa: BLE001 - every client raises its own types
      if not is_transient(e) or retry + 1 == policy.attempts or \
         time.monotonic() - start > policy.budget_s:
        raise _give_up(e, what, retry + 1) from e
      count(kind)
      await asyncio.sleep(policy.delay(retry, _rng))
  raise AssertionError('unreachable')
