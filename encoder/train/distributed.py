"""Many hosts through JAX's distributed runtime: start it, and say how the devices are laid out.

`initialize(config.parallel)` must run before anything touches a JAX backend. It connects this
process to the others from, in order:
  1. the config: `parallel.coordinator_address`, `parallel.num_processes`, `parallel.process_id`;
  2. the environment variables `JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`
     (for launchers that give each process its rank, e.g. a shell loop or a Kubernetes job);
  3. a cluster JAX discovers itself (a Cloud TPU pod slice, SLURM, Open MPI): then
     `jax.distributed.initialize()` is called with no arguments. `parallel.initialize='auto'`
     recognises these from their environment variables; `'always'` calls it regardless (a TPU
     VM whose workers are known only to its metadata server), `'never'` stays one process.
With none of these, the run is one process and nothing is started.
"""

from __future__ import annotations

import logging
import os

import jax

from encoder.errors import ConfigError

log = logging.getLogger('encoder')


def _detected_cluster() -> str | None:
  """The cluster manager that will hand JAX every argument, if this is a multi-process job."""
  env = os.environ
  if int(env.get('SLURM_STEP_NUM_TASKS') or env.get('SLURM_NTASKS') or 1) > 1 and \
     'SLURM_JOB_ID' in env:
    return 'SLURM'
  if int(env.get('OMPI_COMM_WORLD_SIZE') or 1) > 1:
    return 'Open MPI'
  if ',' in env.get('TPU_WORKER_HOSTNAMES', '') or 'MEGASCALE_COORDINATOR_ADDRESS' in env:
    return 'Cloud TPU pod slice'
  return None


def process_arguments(parallel) -> dict | None:
  """The arguments for `jax.distributed.initialize` ({} to let JAX detect the cluster), or
  None if the run is a single process."""
  env = os.environ
  address = parallel.coordinator_address or env.get('JAX_COORDINATOR_ADDRESS', '')
  count = int(parallel.num_processes or env.get('JAX_NUM_PROCESSES') or 0)
  index = parallel.process_id if parallel.process_id >= 0 else int(env.get('JAX_PROCESS_ID', -1))
  if address or count > 1:
    if not address or count < 1 or not 0 <= index < count:
      raise ConfigError(
          f'a multi-process run needs parallel.coordinator_address (host:port of process 0), '
          f'parallel.num_processes and parallel.process_id in 0..num_processes-1; got '
          f'{address!r}, {count}, {index}')
    return {'coordinator_address': address, 'num_processes': count, 'process_id': index}
  mode = parallel.initialize
  if mode not in ('auto', 'always', 'never'):
    raise ConfigError(f"parallel.initialize={mode!r}: use 'auto', 'always' or 'never'")
  if mode == 'always' or (mode == 'auto' and _detected_cluster()):
    return {}
  return None


def initialize(parallel) -> None:
  """Joins the other processes of this run (once per Python process; later calls do nothing)."""
  if jax.distributed.is_initialized():
    return
  arguments = process_arguments(parallel)
  if arguments is None:
    return
  # Cross-process collectives between CPU devices (tests, localhost rehearsals) need gloo;
  # the setting touches nothing else, so GPU and TPU runs are unaffected.
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  jax.distributed.initialize(**arguments)
  cluster = 'the config / JAX_* variables' if arguments else (
      _detected_cluster() or "JAX's cluster detection")
  log.info('JAX distributed runtime: process %d of %d (coordinates from %s)',
           jax.process_index(), jax.process_count(), cluster)
  if not is_main_process():
    log.setLevel(logging.WARNING)  # one log for the run: process 0's; errors still show


def is_main_process() -> bool:
  """Process 0 alone writes logs, metrics, TensorBoard events and shared files."""
  return jax.process_index() == 0


def main_process_first(make):
  """`make()` on process 0 first, then on the others: files it writes (tokenizer, data cache)
  are then found, not rebuilt concurrently into the same paths, by the other processes."""
  if jax.process_count() == 1:
    return make()
  from jax.experimental import multihost_utils
  if not is_main_process():
    multihost_utils.sync_global_devices('encoder: process 0 prepared the data')
  result = make()
  if is_main_process():
    multihost_utils.sync_global_devices('encoder: process 0 prepared the data')
  return result


def agreed_stop(signal: str | None, sync_point: bool) -> str | None:
  """The stop request every process acts on at this step, or None.

  A signal reaches the processes of a multi-host run at different steps; one that stopped
  alone would leave the others waiting in a collective. So they stop together, at a step where
  they already sync (a log step), once any of them was signalled.
  """
  if jax.process_count() == 1:
    return signal
  if not sync_point:
    return None
  import numpy as np
  from jax.experimental import multihost_utils
  flags = multihost_utils.process_allgather(np.int32(signal is not None))
  return signal or ('a stop request to another process' if flags.any() else None)


def describe_layout(global_batch: int, strategy: str, mesh_shape: dict | None = None) -> str:
  """One line for the start of the log: who computes what."""
  line = (f'{jax.process_count()} process(es), {jax.local_device_count()} local / '
          f'{jax.device_count()} global {jax.devices()[0].platform} device(s); global batch '
          f'{global_batch} = {global_batch // jax.process_count()} per process; strategy '
          f'{strategy}')
  if mesh_shape:
    line += ' over mesh ' + ', '.join(f'{k}={v}' for k, v in mesh_shape.items())
  return line
