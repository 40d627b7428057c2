"""Compile targets: a TPU slice or NVIDIA GPUs named on the command line (`--compile_for`), as
compile-only devices on this host, so a run's steps compile for hardware it does not have.

  v5e:2x2, v4:2x2x1, v5p:2x2x1, v6e:4x4 ...  a TPU topology as JAX names it (KIND:AxB[xC]),
                                             compiled by libtpu (requirements-tpu.txt)
  h100, h100:8                               one or N H100 GPUs of one host, compiled by the
                                             CUDA plugin (requirements-cuda.txt), no driver

What a device may hold comes from its compiler where it says: a TPU compiler refuses a program
that exceeds its HBM and names the bytes it has, so `hbm_bytes` asks it once (`_tpu_hbm`); the
GPU compiler never refuses, so an H100's is the share of its memory (its device description's)
that JAX's allocator takes, 75% unless XLA_PYTHON_CLIENT_MEM_FRACTION says otherwise.
Deviceless GPU compiles are not autotuned: every product is the compiler's default Triton GEMM
where a real GPU may pick cuBLAS (docs/scaling.md), so they rank structure, not time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import re
import sys

from encoder.errors import ConfigError
from encoder.train.xla_sizes import SIZE, parse_size

TPU_NAME = re.compile(r'^(v\d+[a-z]*):(\d+(?:x\d+){1,2})$')
GPU_NAME = re.compile(r'^h100(?::(\d+))?$')
MEGACORE = ('v4', 'v5p')  # TPU generations whose runtime makes one device of two cores
EXAMPLES = 'v5e:2x2, v5e:4x4, v4:2x2x1, v5p:2x2x1, v6e:2x2, h100 or h100:8'
TPU_INSTALL = 'pip install -r requirements-tpu.txt (libtpu, the TPU compiler)'
GPU_INSTALL = 'pip install -r requirements-cuda.txt (the CUDA plugin and its wheels, ~6 GB)'

# An H100 SXM (80 GB HBM3) as XLA's GPU compiler describes a device (GpuTargetConfigProto):
# NVIDIA's published figures (132 SMs, 228 KiB shared memory per SM, 227 KiB to a block, 50 MiB
# of L2, 3.35 TB/s, 1.98 GHz, compute capability 9.0) and the memory a CUDA runtime reports.
H100_SPEC = """gpu_device_info {
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: 3352320000000
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: 84978434048
  shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 }
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
device_description_str: "NVIDIA H100 80GB HBM3"
"""
H100_MEMORY = 84_978_434_048


@dataclasses.dataclass(frozen=True)
class Target:
  """Compile-only devices of one target, and what each may hold."""
  name: str  # as given: v5e:2x2, h100:8
  platform: str  # what `model.attention_impl=auto` is resolved for: tpu | cuda
  devices: tuple
  hbm_bytes: int  # per device

  @property
  def kind(self) -> str:
    return self.devices[0].device_kind


def check_name(name: str) -> str:
  """`name` if it has a target's form, else a ConfigError that says what to type."""
  if TPU_NAME.match(name) or GPU_NAME.match(name):
    return name
  raise ConfigError(f"--compile_for {name!r} names no target: a TPU topology is KIND:AxB[xC] as "
                    f"JAX names it, a GPU h100[:N] (e.g. {EXAMPLES})")


def target(name: str) -> Target:
  """The compile-only devices `name` stands for; a ConfigError (one line) for a name the
  compiler does not know or a compiler that is not installed."""
  check_name(name)
  _host_on_cpu()
  gpu = GPU_NAME.match(name)
  if gpu:
    return _gpu_target(name, int(gpu.group(1) or 1))
  return _tpu_target(name)


def _host_on_cpu() -> None:
  """JAX computes on this host's CPU while it compiles for a target, unless JAX_PLATFORMS says
  otherwise: a TPU or GPU plugin installed to compile should not start as a backend too
  (libtpu would warn of the TPU it cannot find and take its lock file; the CUDA plugin would
  look for a driver). Once JAX's backends have started, this changes nothing."""
  if not os.environ.get('JAX_PLATFORMS'):
    import jax  # lazy: see below
    jax.config.update('jax_platforms', 'cpu')


def _tpu_target(name: str) -> Target:
  if importlib.util.find_spec('libtpu') is None:
    raise ConfigError(f'--compile_for {name} needs the TPU compiler: {TPU_INSTALL}')
  # A second process may load libtpu (a test worker, a run on this host's CPU): without this,
  # libtpu's lock file refuses every process but the first, though none of them opens a chip.
  os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
  from jax.experimental import topologies  # lazy: JAX only for the commands that compile
  # One device a chip where JAX's runtime makes one of a chip's two TensorCores (megacore:
  # a v4-8 VM has 4 devices); libtpu's description has a device a core unless told.
  chips = {'chip_config_name': 'megacore'} if name.split(':')[0] in MEGACORE else {}
  try:
    with _quiet_native_stderr():  # libtpu's start-up warnings about the TPU it is not on
      devices = topologies.get_topology_desc(topology_name=name, platform='tpu',
                                             **chips).devices
  except Exception as e:  # noqa: BLE001  (JaxRuntimeError: the compiler's own reason)
    raise ConfigError(f'--compile_for {name}: libtpu does not know this topology '
                      f'({_first_line(e)}); try one of {EXAMPLES}') from None
  return Target(name, 'tpu', tuple(devices), _tpu_hbm(devices))


def _gpu_target(name: str, count: int) -> Target:
  if importlib.util.find_spec('jax_plugins.xla_cuda12') is None:
    raise ConfigError(f'--compile_for {name} needs the CUDA compiler: {GPU_INSTALL}')
  from jax.experimental import topologies  # lazy: see above
  try:
    devices = topologies.get_topology_desc(platform='cuda', target_config=H100_SPEC,
                                           topology=f'1x1x{count}').devices
  except Exception as e:  # noqa: BLE001
    raise ConfigError(f'--compile_for {name}: the CUDA plugin cannot describe it '
                      f'({_first_line(e)})') from None
  return Target(name, 'cuda', tuple(devices), int(H100_MEMORY * gpu_memory_fraction()))


def gpu_memory_fraction() -> float:
  """The share of a GPU's memory JAX's allocator takes (XLA_PYTHON_CLIENT_MEM_FRACTION, 0.75
  unless set): what a run there may use."""
  return float(os.environ.get('XLA_PYTHON_CLIENT_MEM_FRACTION', '0.75'))


def _tpu_hbm(devices) -> int:
  """The HBM one device may use, as its compiler states it: a program that needs more than
  any chip has is refused with 'exceeds available HBM (15.75G)' (v5e). Compiles in
  milliseconds; the figure is below the chip's nominal size (what the runtime reserves)."""
  import jax  # lazy: see above
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import Mesh, NamedSharding, PartitionSpec

  mesh = Mesh(np.array(devices[:1]), ('one',))
  huge = jax.ShapeDtypeStruct((2 ** 40,), jnp.uint8, sharding=NamedSharding(mesh,
                                                                             PartitionSpec()))
  try:
    jax.jit(lambda x: x + 1).lower(huge).compile()
  except Exception as e:  # noqa: BLE001  (RESOURCE_EXHAUSTED names the capacity)
    found = available_bytes(str(e))
    if found:
      return found
    raise
  raise RuntimeError('the TPU compiler accepted a 1 TiB program: its HBM size is unknown')


def available_bytes(message: str) -> int | None:
  """The capacity a TPU compiler's RESOURCE_EXHAUSTED message names, in bytes (None if it
  names none)."""
  found = re.search(r'available HBM \(' + SIZE + r'\)', message)
  if found:
    return parse_size(*found.groups())
  found = re.search(r'Used ' + SIZE + r' of ' + SIZE + r' hbm', message)
  return parse_size(*found.groups()[2:]) if found else None


def _first_line(error: Exception) -> str:
  return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


@contextlib.contextmanager
def _quiet_native_stderr():
  """Native code's writes to stderr (file descriptor 2) dropped while the block runs: libtpu
  warns, on any host without a TPU, about the TPU it cannot find, though compiling needs none
  (a failure still raises, and is reported in one line)."""
  sys.stderr.flush()
  saved = os.dup(2)
  with open(os.devnull, 'w') as devnull:
    os.dup2(devnull.fileno(), 2)
    try:
      yield
    finally:
      os.dup2(saved, 2)
      os.close(saved)
