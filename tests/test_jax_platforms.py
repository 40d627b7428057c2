"""libtpu installed off a TPU host: JAX starts without the TPU backend, so nothing of libtpu's
reaches stderr; a TPU host, or a JAX_PLATFORMS the user set, is left alone."""

import importlib.util
import os
import subprocess
import sys

import pytest

from encoder import jax_platforms

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fake_pci(root, vendors):
  for i, vendor in enumerate(vendors):
    device = root / f'0000:00:0{i}.0'
    device.mkdir(parents=True)
    (device / 'vendor').write_text(vendor + '\n')
  return str(root)


def test_a_tpu_is_found_by_its_pci_vendor(tmp_path):
  assert jax_platforms.tpu_on_this_host(fake_pci(tmp_path / 'tpu', ['0x8086', '0x1ae0']))
  assert not jax_platforms.tpu_on_this_host(fake_pci(tmp_path / 'gpu', ['0x8086', '0x10de']))
  assert not jax_platforms.tpu_on_this_host(str(tmp_path / 'no-sysfs'))


def test_the_tpu_is_skipped_only_where_libtpu_is_installed_and_no_tpu_is_here(monkeypatch):
  monkeypatch.setattr(jax_platforms, '_installed', lambda module: module == 'libtpu')
  monkeypatch.setattr(jax_platforms, 'tpu_on_this_host', lambda: False)
  environ = {}
  assert jax_platforms.skip_absent_tpu(environ) == 'cpu' and environ == {'JAX_PLATFORMS': 'cpu'}
  environ = {'JAX_PLATFORMS': 'tpu,cpu'}  # the user's choice stands
  assert jax_platforms.skip_absent_tpu(environ) is None and environ['JAX_PLATFORMS'] == 'tpu,cpu'
  monkeypatch.setattr(jax_platforms, 'tpu_on_this_host', lambda: True)  # a TPU VM
  environ = {}
  assert jax_platforms.skip_absent_tpu(environ) is None and environ == {}
  monkeypatch.setattr(jax_platforms, 'tpu_on_this_host', lambda: False)
  monkeypatch.setattr(jax_platforms, '_installed', lambda module: False)  # no libtpu
  assert jax_platforms.skip_absent_tpu(environ) is None and environ == {}


@pytest.mark.skipif(importlib.util.find_spec('libtpu') is None, reason='libtpu not installed')
@pytest.mark.skipif(jax_platforms.tpu_on_this_host(), reason='a TPU host starts its TPU')
@pytest.mark.parametrize('first', ['encoder', 'jax'])
def test_importing_encoder_keeps_libtpu_quiet(first):
  """As a user runs it, no JAX_PLATFORMS set: nothing on stderr, JAX on the CPU; the
  same whether JAX or encoder is imported first."""
  second = 'jax' if first == 'encoder' else 'encoder'
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}
  code = f'import {first}, {second}; import jax; print(jax.default_backend())'
  run = subprocess.run([sys.executable, '-c', code], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
  assert run.returncode == 0, run.stderr[-2000:]
  assert run.stdout.split() == ['cpu'] and run.stderr == ''
