"""One run per workdir on an object store (gs://, s3://), where `flock` does not exist.

The lock is the object `WORKDIR/run.lock`, holding the owner's pid, host, start time and the
time it was last renewed. It is created with a create-if-absent precondition (GCS
`ifGenerationMatch=0`, S3 `If-None-Match: *`, both through fsspec's exclusive mode `xb`), so of
two runs racing for a free workdir exactly one gets it. A thread rewrites it every
RENEW_SECONDS while the run lives; the object is deleted on release.

A run killed without release (SIGKILL, a lost VM) leaves its lock behind. No kernel drops it, so
age tells instead: a lock not renewed for STALE_SECONDS, or one whose pid is dead on this very
host, is stale and is taken over with a warning, as the local lock does. The takeover deletes
the stale object and creates it again with the same precondition, so two runs taking over at
once still leave one owner. (A run paused longer than STALE_SECONDS, as a stopped VM would be,
can lose its lock that way; the renewal thread then says so in a warning.)

Storage servers that ignore preconditions (the `gcp-storage-emulator` package does) still see
a held lock refused, because the lock is read before it is created; only the race between two
simultaneous starts needs the precondition.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid

from encoder import storage
from encoder.errors import ConfigError
from encoder.train.lock_owner import describe_owner, parse_owner, this_owner

log = logging.getLogger('encoder')
LOCK_FILE = 'run.lock'
RENEW_SECONDS = 60.0
STALE_SECONDS = 300.0


def _read(fs, path: str) -> dict | None:
  try:
    text = fs.cat_file(path).decode('utf-8', errors='replace')
  except FileNotFoundError:
    return None
  return parse_owner(text) or {'pid': '?', 'host': '?'}


def _create(fs, path: str, owner: dict) -> bool:
  """Writes the lock if no object is there; False if one is (the precondition failed)."""
  try:
    with fs.open(path, 'xb') as f:
      f.write(json.dumps(owner).encode('utf-8'))
  except FileExistsError:
    return False
  return True


def _stale(owner: dict) -> bool:
  renewed = owner.get('renewed')
  if not isinstance(renewed, (int, float)) or time.time() - renewed > STALE_SECONDS:
    return True
  pid = owner.get('pid')
  if owner.get('host') == socket.gethostname() and isinstance(pid, int):
    try:
      os.kill(pid, 0)
    except ProcessLookupError:
      return True  # died on this host
    except PermissionError:
      return False
  return False


def _refuse(workdir: str, owner: dict) -> ConfigError:
  return ConfigError(
      f"workdir '{workdir}' is in use by another run ({describe_owner(owner)}): wait for it to "
      f'finish or pass another --workdir (a lock not renewed for {STALE_SECONDS:.0f} s is '
      'taken over)')


@contextlib.contextmanager
def hold(workdir: str):
  """Holds `WORKDIR/run.lock` for the duration; ConfigError (one line) if a live run has it."""
  path = storage.join(workdir, LOCK_FILE)
  fs = storage.filesystem(path)
  token = uuid.uuid4().hex
  now = time.time()
  owner = {**this_owner(), 'renewed': now, 'token': token}
  current = _read(fs, path)
  if current is not None and not _stale(current):
    raise _refuse(workdir, current)
  if current is None and not _create(fs, path, owner):  # another run created it just now
    current = _read(fs, path) or {}
    if not _stale(current):
      raise _refuse(workdir, current)
  if current is not None:  # stale: deleted and created again, under the same precondition
    log.warning('warning: taking over the stale lock of a run that died (%s) in %s',
                describe_owner(current), workdir)
    with contextlib.suppress(FileNotFoundError):
      fs.rm_file(path)
    if not _create(fs, path, owner):
      raise _refuse(workdir, _read(fs, path) or {})
  stop = threading.Event()
  renewer = threading.Thread(target=_renew, args=(fs, path, owner, stop), daemon=True,
                             name='encoder-workdir-lock')
  renewer.start()
  try:
    yield
  finally:
    stop.set()
    renewer.join()
    if (_read(fs, path) or {}).get('token') == token:
      with contextlib.suppress(FileNotFoundError):
        fs.rm_file(path)


def _renew(fs, path: str, owner: dict, stop: threading.Event) -> None:
  """Rewrites the lock with a fresh time every RENEW_SECONDS until `stop`; never raises (a
  failed renewal is retried next time, and warned about)."""
  while not stop.wait(RENEW_SECONDS):
    try:
      current = _read(fs, path) or {}
      if current.get('token') != owner['token']:
        log.warning('warning: the workdir lock %s now belongs to %s: another run took it over',
                    path, describe_owner(current))
        return
      owner['renewed'] = time.time()
      fs.pipe_file(path, json.dumps(owner).encode('utf-8'))
    except Exception as e:  # noqa: BLE001 - a network error must not kill the run
      log.warning('warning: could not renew the workdir lock %s (%s: %s)', path,
                  type(e).__name__, e)
