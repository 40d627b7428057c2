"""The owner record both workdir locks write (a local run.lock, a lock object on a bucket).

A lock holds its owner's pid, host and start time as JSON, so a refused run can say who holds
the workdir; both lock kinds read and describe it the same way.
"""

from __future__ import annotations

import json
import os
import socket
import time


def this_owner() -> dict:
  """This process's owner record: pid, host and start time."""
  return {'pid': os.getpid(), 'host': socket.gethostname(),
          'started': time.strftime('%Y-%m-%dT%H:%M:%S%z')}


def parse_owner(text: str) -> dict | None:
  """A lock's owner record (pid, host, start); a damaged one still names what it holds."""
  text = text.strip()
  if not text:
    return None
  try:
    owner = json.loads(text)
  except ValueError:
    return {'pid': '?', 'host': '?', 'raw': text[:80]}
  return owner if isinstance(owner, dict) else {'pid': '?', 'host': '?'}


def describe_owner(owner: dict) -> str:
  return f"pid {owner.get('pid', '?')} on host {owner.get('host', '?')}, " \
         f"started {owner.get('started', '?')}"
