"""JAX's persistent compilation cache for a run, or for all the runs of a suite.

Why: on a CPU the compiles are a large share of a short run (a fine-tuning run compiles its
train step once per length bucket, 6-25 s each for MiniLM, and its eval step), and the same
programs come back whenever a run is repeated, resumed, swept over seeds or learning rates, or
judged by the suite. JAX's cache (`jax_compilation_cache_dir`) keys an executable by its
program, compile options, JAX version and device, so a program compiled once is loaded from
disk by every later process instead of compiled again; results are the same either way.

A cache the user set (JAX_COMPILATION_CACHE_DIR, or `jax_compilation_cache_dir`) is always the
one used; otherwise the caller's folder is, for as long as the context lasts, and the
process's own setting comes back afterwards (tests and notebooks run many things in one
process).
"""

from __future__ import annotations

import contextlib
import os

from encoder.errors import ConfigError

ENV = 'JAX_COMPILATION_CACHE_DIR'


def run_cache_dir(setting: str) -> str:
  """The folder `train.compile_cache` names: auto ($XDG_CACHE_HOME or ~/.cache, then
  encoder/jax), none ('' : no cache of ours), or a local folder."""
  value = str(setting).strip()
  if value.lower() == 'none' or not value:
    return ''
  if value.lower() == 'auto':
    root = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return os.path.join(root, 'encoder', 'jax')
  if '://' in value:
    raise ConfigError(f"train.compile_cache='{value}': use a local folder, auto or none")
  return os.path.abspath(os.path.expanduser(value))


@contextlib.contextmanager
def cache_compiles(folder: str):
  """Within the block, this process (and the worker processes it starts, through the
  environment) caches compiled programs in the cache the user set, else in `folder` ('' :
  none of ours); yields the cache in use ('' for none). Says nothing: the caller logs it once
  its set-up has succeeded (a refused run prints its one-line error alone)."""
  import jax
  from jax.experimental.compilation_cache import compilation_cache

  env_before, dir_before = os.environ.get(ENV), jax.config.jax_compilation_cache_dir
  chosen = env_before or dir_before or folder
  if not chosen:
    yield ''
    return
  os.environ[ENV] = chosen
  jax.config.update('jax_compilation_cache_dir', chosen)
  compilation_cache.reset_cache()  # JAX decides once per process whether it caches
  try:
    yield chosen
  finally:
    if env_before is None:
      os.environ.pop(ENV, None)
    else:
      os.environ[ENV] = env_before
    jax.config.update('jax_compilation_cache_dir', dir_before)
    compilation_cache.reset_cache()
