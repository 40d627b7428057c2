"""Device layout for pmap data parallelism: replicate the state, shard each host's batch."""

from __future__ import annotations

import jax
import numpy as np

from encoder.errors import ConfigError

AXIS = 'batch'  # the pmap axis; gradients are pmean-ed and metric sums psum-ed over it


def _local_sharding() -> jax.NamedSharding:
  """The sharding pmap gives its outputs: inputs laid out the same way let the second step
  reuse the first step's executable instead of compiling again."""
  mesh = jax.sharding.Mesh(np.array(jax.local_devices()), (AXIS,))
  return jax.NamedSharding(mesh, jax.P(AXIS))


def replicate(tree):
  """One copy of every leaf per local device, stacked on a leading axis."""
  n = jax.local_device_count()
  sharding = _local_sharding()
  return jax.tree.map(lambda x: jax.device_put(np.stack([np.asarray(x)] * n), sharding), tree)


def unreplicate(tree):
  """The first device's copy, fetched to the host as numpy."""
  return jax.tree.map(lambda x: np.asarray(x.addressable_shards[0].data).squeeze(0), tree)


def sum_replicated(trees: list):
  """Fetches per-step trees of psum-ed (so replicated) arrays and adds them up on the host.

  One `device_get` for the whole list: the only host sync of a log window or an evaluation.
  """
  host = jax.device_get(trees)
  return jax.tree.map(lambda *xs: sum(np.asarray(x)[0] for x in xs), *host)


def shard(batch: dict) -> dict:
  """[host_batch, ...] numpy -> [local_devices, host_batch / devices, ...] on the devices."""
  n = jax.local_device_count()
  sharding = _local_sharding()
  return {k: jax.device_put(v.reshape((n, v.shape[0] // n) + v.shape[1:]), sharding)
          for k, v in batch.items()}


def per_device_batch_size(global_batch_size: int, grad_accum_steps: int = 1) -> int:
  """The global batch split over every device of every host (and accumulation microbatches)."""
  devices = jax.device_count()
  if global_batch_size % (devices * grad_accum_steps):
    raise ConfigError(
        f'train.batch_size={global_batch_size} is not divisible by {devices} devices x '
        f'{grad_accum_steps} accumulation steps')
  return global_batch_size // devices
