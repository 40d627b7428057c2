"""A run caches its compiled programs (train.compile_cache), and a second run loads them."""

import os

import jax
import pytest

from encoder.errors import ConfigError
from encoder.train import xla_cache


def test_the_setting_names_a_folder_or_none(monkeypatch, tmp_path):
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path))
  assert xla_cache.run_cache_dir('auto') == str(tmp_path / 'encoder' / 'jax')
  assert xla_cache.run_cache_dir('none') == '' and xla_cache.run_cache_dir('') == ''
  assert xla_cache.run_cache_dir(str(tmp_path / 'mine')) == str(tmp_path / 'mine')
  with pytest.raises(ConfigError, match='train.compile_cache'):
    xla_cache.run_cache_dir('gs://bucket/cache')


def test_a_run_compiles_into_the_cache_and_the_next_run_reads_it(tmp_path, monkeypatch):
  """Two fine-tuning runs of one config: the first writes executables, the second adds none
  (it loaded every program it needed) and ends with the same metrics; the process's setting
  is back afterwards."""
  from encoder import configs
  from encoder.train.trainer import train_and_evaluate
  monkeypatch.delenv(xla_cache.ENV, raising=False)
  before = jax.config.jax_compilation_cache_dir
  threshold = jax.config.jax_persistent_cache_min_compile_time_secs
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)  # a tiny model's too
  cache = tmp_path / 'cache'
  try:
    runs = []
    for name in ('first', 'second'):
      config = configs.load_experiment('classify_mnli:smoke')
      configs.apply_overrides(config, [f'train.compile_cache={cache}', 'train.num_epochs=0.5'])
      runs.append((train_and_evaluate(config, str(tmp_path / name)), _entries(cache)))
  finally:
    jax.config.update('jax_persistent_cache_min_compile_time_secs', threshold)
  (first, written), (second, after) = runs
  assert written and after == written
  assert second == first
  assert jax.config.jax_compilation_cache_dir == before and xla_cache.ENV not in os.environ


def test_a_cache_the_user_set_wins(tmp_path, monkeypatch):
  monkeypatch.setenv(xla_cache.ENV, str(tmp_path / 'users'))
  with xla_cache.cache_compiles(str(tmp_path / 'ours')) as chosen:
    assert chosen == str(tmp_path / 'users')
  assert os.environ[xla_cache.ENV] == str(tmp_path / 'users')


def _entries(folder) -> list[str]:
  return sorted(os.listdir(folder)) if os.path.isdir(folder) else []
