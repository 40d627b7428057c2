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

log = logging.getLogger('encoder')
ENV = 'JAX_COMPILATION_CACHE_DIR'
FOLDER = 'compile_cache'


@contextlib.contextmanager
def shared(suite_dir: str, enabled: bool = True):
  """While the suite runs, this process and the workers it starts cache compiled programs in
  SUITE_DIR/compile_cache (or the cache already set; none for a suite in a bucket, or when not
  `enabled`: suite.compile_cache=false); yields the cache in use ('' for none). The process's
  own setting comes back afterwards."""
  import jax
  from jax.experimental.compilation_cache import compilation_cache

  env_before, dir_before = os.environ.get(ENV), jax.config.jax_compilation_cache_dir
  chosen = env_before or dir_before
  if not chosen and not storage.is_remote(suite_dir):
    chosen = os.path.join(suite_dir, FOLDER)
  if not (enabled and chosen):
    yield ''
    return
  os.environ[ENV] = chosen  # inherited by suite.parallel's worker processes
  jax.config.update('jax_compilation_cache_dir', chosen)
  compilation_cache.reset_cache()  # JAX decides once per process whether it caches
  log.info('suite: compiled steps are cached in %s', chosen)
  try:
    yield chosen
  finally:
    if env_before is None:
      os.environ.pop(ENV, None)
    jax.config.update('jax_compilation_cache_dir', dir_before)
    compilation_cache.reset_cache()
