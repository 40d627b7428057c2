"""One compilation cache for all of a suite's runs.

Every run of a suite compiles the same train and eval steps (same model, batch and lengths:
only the weights, the seed and the data differ), and on a CPU those compiles are most of a
small run: a 2-layer model's four length buckets took ~50 s of a 94 s SST-2 run. JAX's
persistent cache (`jax_compilation_cache_dir`) keys executables by their program, so the
second seed, the other arms and the scratch baseline load them from disk instead. A cache the
user set (JAX_COMPILATION_CACHE_DIR) is kept; a suite in a bucket caches on local disk only
if the user says where.
"""

from __future__ import annotations

import contextlib
import logging
import os

from encoder import storage
from encoder.train import xla_cache

log = logging.getLogger('encoder')
ENV = xla_cache.ENV
FOLDER = 'compile_cache'


@contextlib.contextmanager
def shared(suite_dir: str, enabled: bool = True):
  """While the suite runs, this process and the workers it starts cache compiled programs in
  SUITE_DIR/compile_cache (or the cache the user set; none for a suite in a bucket, or when not
  `enabled`: suite.compile_cache=false); yields the cache in use ('' for none). The process's
  own setting comes back afterwards."""
  if not enabled:
    yield ''
    return
  folder = '' if storage.is_remote(suite_dir) else os.path.join(suite_dir, FOLDER)
  with xla_cache.cache_compiles(folder) as chosen:
    if chosen:
      log.info('suite: compiled steps are cached in %s', chosen)
    yield chosen
