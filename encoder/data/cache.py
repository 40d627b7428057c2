"""Content-addressed cache files: keys are hashes of every setting that made the data.

Writes go to a temporary file renamed into place, so a crash never leaves a half-written file that
a restart would trust.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from typing import Any

import numpy as np

from encoder import storage


def digest(obj: Any) -> str:
  """A short stable hash of a JSON-serialisable object (dict keys sorted)."""
  text = json.dumps(obj, sort_keys=True, default=str)
  return hashlib.sha256(text.encode('utf-8')).hexdigest()[:16]


def file_digest(paths: list[str]) -> str:
  """Hash of the contents of files (e.g. a saved tokenizer): its identity for cache keys."""
  h = hashlib.sha256()
  for path in sorted(paths):
    h.update(os.path.basename(path).encode())
    h.update(storage.read_bytes(path))
  return h.hexdigest()[:16]


def _atomic(path: str, write) -> None:
  if storage.is_remote(path):  # one upload: an object store commits it whole
    buffer = io.BytesIO()
    write(buffer)
    storage.write_atomic(path, buffer.getvalue())
    return
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix='.tmp-', suffix=os.path.basename(path))
  try:
    with os.fdopen(fd, 'wb') as f:
      write(f)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write_json(path: str, obj: Any) -> None:
  _atomic(path, lambda f: f.write(json.dumps(obj).encode('utf-8')))


def write_arrays(path: str, arrays: dict[str, np.ndarray]) -> None:
  """Saves an uncompressed .npz (fast to load) atomically."""
  _atomic(path, lambda f: np.savez(f, **arrays))


def write_bytes(path: str, data: bytes) -> None:
  _atomic(path, lambda f: f.write(data))
