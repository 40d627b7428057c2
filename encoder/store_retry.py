"""Retries of a bucket's transient failures, counted; one line for a permanent one.

A bucket fails a small share of requests for reasons that pass (HTTP 429 and 5xx, timeouts,
connection resets); a long run makes millions of requests, so it meets them and must ride them
out. A missing object or a refused permission does not pass, and retrying it only delays the
one line that says which object. This module sorts errors into the two kinds and retries the
first with exponential backoff and full jitter (each wait uniform in [0, min(cap, base * 2^n)],
so the readers that failed together do not come back together) inside a bounded budget of
attempts and seconds; every retry is counted in `counts()`, which the trainer logs.

The prepared-corpus reader (encoder/data/pretrain/byte_ranges.py) and `storage.write_atomic`
(metrics, config, tokenizer uploads) go through here. Two clients retry inside themselves, and
`counts()` adds their retries too, so the trainer's log line covers every client on gs://:
tensorstore, which writes and reads Orbax's arrays (its `gcs_request_retries`; a failure that
remains becomes the trainer's one-line CheckpointError), from its own process-wide metrics;
and gcsfs (listings, existence checks, Orbax's metadata files, the tries inside an upload),
through `watch_gcsfs`. Not counted: s3fs's and botocore's retries inside an S3 request, which
only show here when they give up and this module retries again.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
import random
import sys
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
  """How long a transient failure is retried: at most `attempts` tries and `budget_s` seconds,
  each try given at most `timeout_s` (a store that accepts a request and never answers it is a
  transient failure that ends, not a hang)."""
  attempts: int = 10
  base_s: float = 0.05
  cap_s: float = 2.0
  budget_s: float = 120.0
  timeout_s: float = 60.0

  def delay(self, retry: int, rng: random.Random) -> float:
    return rng.uniform(0.0, min(self.cap_s, self.base_s * 2 ** retry))


TIMEOUT_VARIABLE = 'ENCODER_STORE_TIMEOUT_S'


def default_policy(environ=os.environ) -> Policy:
  """The policy of every bucket call: ENCODER_STORE_TIMEOUT_S (60 unless set) seconds a try,
  twice that in all; a slow link may raise it, a test lowers it to see the bound in seconds."""
  timeout = float(environ.get(TIMEOUT_VARIABLE) or 60.0)
  if not timeout > 0:
    raise EncoderError(f'{TIMEOUT_VARIABLE}={environ[TIMEOUT_VARIABLE]!r}: give seconds > 0')
  return Policy(timeout_s=timeout, budget_s=2 * timeout)


DEFAULT = default_policy()
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
  """Retries so far in this process, by who retried: this module's 'read' and 'upload',
  gcsfs's own ('gcsfs', once `watch_gcsfs` ran) and tensorstore's ('checkpoint')."""
  with _counts_lock:
    out = dict(_counts)
  checkpoint = _tensorstore_retries()
  if checkpoint:
    out['checkpoint'] = out.get('checkpoint', 0) + checkpoint
  return out


_TENSORSTORE_RETRIES = frozenset(f'/tensorstore/kvstore/{driver}/retries'
                                 for driver in ('gcs', 'gcs_grpc', 's3'))


def _tensorstore_retries() -> int:
  """Tensorstore's retries of bucket requests in this process (its metrics count from its
  import; a process that never imported it has made no such request)."""
  ts = sys.modules.get('tensorstore')
  collect = getattr(ts, 'experimental_collect_matching_metrics', None)
  if collect is None:
    return 0
  return sum(int(value.get('value', 0)) for metric in collect('/tensorstore/kvstore/')
             if metric['name'] in _TENSORSTORE_RETRIES for value in metric['values'])


_gcsfs_watched = False


def watch_gcsfs() -> None:
  """Counts gcsfs's own retries under 'gcsfs' from now on (storage.check calls it for gs://).

  gcsfs retries a failed request inside itself (429, 5xx, resets; sleeping 1-2 s, then 2-3 s,
  ... up to 6 tries) and says so only in a DEBUG line. Its retry loop asks
  `gcsfs.retry.is_retriable` only when another try follows, so a counting wrapper around that
  function counts exactly the retries. A gcsfs without the function is left as it is (its
  retries then go uncounted, as before)."""
  global _gcsfs_watched
  if _gcsfs_watched:
    return
  _gcsfs_watched = True
  try:
    from gcsfs import retry  # noqa: PLC0415 - only for gs:// paths
  except ImportError:
    return
  original = getattr(retry, 'is_retriable', None)
  if original is None:
    return

  def is_retriable(exception) -> bool:
    retried = original(exception)
    if retried:
      count('gcsfs')
    return retried

  retry.is_retriable = is_retriable


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


def call(fn: Callable[[], T], what: str, kind: str, policy: Policy | None = None) -> T:
  """fn(), retried while it fails transiently; StoreError naming `what` otherwise."""
  policy = policy or DEFAULT
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
                     policy: Policy | None = None) -> T:
  """`call` for a coroutine function, waiting with asyncio.sleep (the event loop keeps going)."""
  policy = policy or DEFAULT
  start = time.monotonic()
  for retry in range(policy.attempts):
    try:
      return await asyncio.wait_for(fn(), policy.timeout_s)
    except Exception as e:  # noqa: BLE001 - every client raises its own types
      if not is_transient(e) or retry + 1 == policy.attempts or \
         time.monotonic() - start > policy.budget_s:
        raise _give_up(e, what, retry + 1) from e
      count(kind)
      await asyncio.sleep(policy.delay(retry, _rng))
  raise AssertionError('unreachable')
