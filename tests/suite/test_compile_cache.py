"""The suite's shared compilation cache: its runs write compiled programs to one folder (so the
next seed loads them), a cache the user set wins, and the process's setting comes back."""

import os

import jax
import jax.numpy as jnp

from encoder.suite import compile_cache


def _compile_something(n: int) -> None:
  threshold = jax.config.jax_persistent_cache_min_compile_time_secs
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)  # cache this small one
  try:
    jax.jit(lambda x: jnp.tanh(x @ x.T) * n).lower(jnp.ones((n, n))).compile()
  finally:
    jax.config.update('jax_persistent_cache_min_compile_time_secs', threshold)


def test_runs_compile_into_the_suites_cache_and_the_setting_is_restored(tmp_path, monkeypatch):
  monkeypatch.delenv(compile_cache.ENV, raising=False)
  before = jax.config.jax_compilation_cache_dir
  with compile_cache.shared(str(tmp_path)) as cache:
    assert cache == str(tmp_path / 'compile_cache') and os.environ[compile_cache.ENV] == cache
    _compile_something(17)
  assert any(name.endswith('-cache') for name in os.listdir(cache))
  assert compile_cache.ENV not in os.environ and jax.config.jax_compilation_cache_dir == before


def test_a_cache_the_user_set_is_kept(tmp_path, monkeypatch):
  mine = str(tmp_path / 'mine')
  monkeypatch.setenv(compile_cache.ENV, mine)
  with compile_cache.shared(str(tmp_path / 'suite')) as cache:
    assert cache == mine
  assert os.environ[compile_cache.ENV] == mine and not (tmp_path / 'suite').exists()
