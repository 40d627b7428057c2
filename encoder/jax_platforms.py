"""No TPU probe off a TPU host: which backends JAX starts when libtpu is installed.

libtpu (requirements-tpu.txt) is installed on CPU machines to compile for TPU slices
(`--compile_for v5e:2x2`). Once installed, JAX starts it as a backend in every process, and
off a TPU host it fails noisily on stderr ("Failed to find host bounds for accelerator type",
an `E0000 ... INVALID_ARGUMENT` line, a source trace) and takes libtpu's lock file. Unless
JAX_PLATFORMS says otherwise, a host with no TPU on its PCI bus starts JAX without that
backend; on a TPU host nothing changes. `--compile_for` still works: it loads libtpu as the
compiler of a topology (encoder/train/targets.py), which needs no TPU backend.

This module imports no JAX: `encoder/__init__.py` calls `skip_absent_tpu()` before anything
can start JAX's backends.
"""

from __future__ import annotations

import importlib.util
import os
import sys

GOOGLE_PCI_VENDOR = '0x1ae0'  # the vendor id of a TPU on the PCI bus (what JAX's check reads)
PCI_DEVICES = '/sys/bus/pci/devices'


def tpu_on_this_host(pci_devices: str = PCI_DEVICES) -> bool:
  """True when a Google device is on this host's PCI bus (every TPU VM generation)."""
  try:
    names = os.listdir(pci_devices)
  except OSError:  # no sysfs (macOS, some containers): no TPU either
    return False
  for name in names:
    try:
      with open(os.path.join(pci_devices, name, 'vendor')) as f:
        if f.read().strip().lower() == GOOGLE_PCI_VENDOR:
          return True
    except OSError:
      continue
  return False


def _installed(module: str) -> bool:
  try:
    return importlib.util.find_spec(module) is not None
  except (ImportError, ValueError):
    return False


def platforms_without_tpu() -> str:
  """JAX_PLATFORMS for this host less the TPU: its NVIDIA GPUs where the CUDA plugin is
  installed and a driver shows them, then the CPU."""
  cuda = any(_installed(m) for m in ('jax_plugins.xla_cuda12', 'jax_plugins.xla_cuda13'))
  return 'cuda,cpu' if cuda and os.path.exists('/dev/nvidiactl') else 'cpu'


def skip_absent_tpu(environ=os.environ) -> str | None:
  """Sets JAX_PLATFORMS without the TPU where libtpu is installed on a host with none (and
  the user set no JAX_PLATFORMS); returns what it set, or None where it left JAX alone."""
  if environ.get('JAX_PLATFORMS') or not _installed('libtpu') or tpu_on_this_host():
    return None
  value = platforms_without_tpu()
  environ['JAX_PLATFORMS'] = value
  if 'jax' in sys.modules:  # imported already (the variable is read then): tell its config
    sys.modules['jax'].config.update('jax_platforms', value)
  return value
