"""One run per workdir: `WORKDIR/run.lock` holds the owner's pid and host while it trains.

A workdir on a bucket (gs://, s3://) is locked by an object instead (train/object_lock.py).

Two runs writing one workdir would interleave metrics and race on checkpoints. The lock is an
exclusive `fcntl.flock` on the file, which the kernel drops when its holder dies however it dies
(SIGKILL included), so a crashed run never blocks the next one; the pid/host written inside is
for the message. A lock file whose content names an owner but is not locked was left by a run
that died: it is taken over with a warning. The file is emptied, not removed, on release
(removing it would let a run that opened it just before lock a file no one else sees).
On filesystems without working flock (some NFS setups) the content still tells: a live pid on
this host, or any pid on another host, is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket

from encoder import storage
from encoder.errors import ConfigError
from encoder.train import object_lock
from encoder.train.lock_owner import describe_owner, parse_owner, this_owner

log = logging.getLogger('encoder')
LOCK_FILE = 'run.lock'


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # exists, owned by someone else
    return True
  return True


def _read_owner(f) -> dict | None:
  f.seek(0)
  return parse_owner(f.read())


@contextlib.contextmanager
def hold(workdir: str, enabled: bool = True):
  """Holds the workdir's lock for the duration; ConfigError (one line) if another run has it."""
  if not enabled:
    yield
    return
  if storage.is_remote(workdir):  # a bucket: no flock there, a lock object instead
    with object_lock.hold(workdir):
      yield
    return
  created = not os.path.exists(workdir)
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, LOCK_FILE)
  f = open(path, 'a+', encoding='utf-8')  # noqa: SIM115 - held open for the whole run
  try:
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      owner = _read_owner(f) or {}
      raise ConfigError(f"workdir '{workdir}' is in use by another run "
                        f'({describe_owner(owner)}): wait for it to finish or pass another '
                        '--workdir') from None
    owner = _read_owner(f)
    host = socket.gethostname()
    if owner is not None:
      pid = owner.get('pid')
      same_host = owner.get('host') == host
      if isinstance(pid, int) and pid != os.getpid() and (not same_host or _alive(pid)) \
         and not _flock_works(path):
        raise ConfigError(f"workdir '{workdir}' is locked by {describe_owner(owner)} ({path}): "
                          'wait for that run, or delete the file if it is dead')
      log.warning('warning: taking over the stale lock of a run that died (%s) in %s',
                  describe_owner(owner), workdir)
    f.seek(0)
    f.truncate()
    f.write(json.dumps(this_owner()) + '\n')
    f.flush()
    try:
      yield
    finally:
      f.seek(0)
      f.truncate()
      f.flush()
      if created and os.listdir(workdir) == [LOCK_FILE]:
        # A run that failed before writing anything leaves no workdir behind (as before
        # there was a lock); the tiny race this opens only concerns that empty directory.
        os.remove(path)
        os.rmdir(workdir)
  finally:
    f.close()  # drops the flock


def _flock_works(path: str) -> bool:
  """Whether a second open of `path` sees our flock (False on filesystems that ignore it)."""
  with open(path, encoding='utf-8') as other:
    try:
      fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      return True
    fcntl.flock(other, fcntl.LOCK_UN)
    return False
