"""The mesh-sharded layout: `jax.jit` over a device mesh with axes (data, fsdp, tensor).

Every parameter carries logical axis names (`vocab`, `embed`, `heads`, `kv`, `mlp`, ...);
`parallel.logical_axis_rules` maps them onto mesh axes, so the modules never name a device.
The batch is split over (`data`, `fsdp`). With `embed -> fsdp` (the default) the parameters and
the optimizer state are split over `fsdp` too (ZeRO-3 / FSDP: XLA gathers each weight where it is
used); `heads`, `mlp` and `vocab -> tensor` split the big matmuls Megatron-style. A dimension a
mesh axis does not divide stays whole, so any rule set gives a valid layout.
"""

from __future__ import annotations

import logging

import flax.linen as nn
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from encoder.errors import ConfigError

log = logging.getLogger('encoder')

MESH_AXES = ('data', 'fsdp', 'tensor')
BATCH_AXES = ('data', 'fsdp')  # the batch is split over both; `tensor` devices share examples


def mesh_shape(parallel, num_devices: int | None = None) -> dict[str, int]:
  """`parallel.mesh_shape` with its one -1 (if any) filled so the sizes use every device."""
  num_devices = num_devices or jax.device_count()
  shape = {axis: int(parallel.mesh_shape[axis]) for axis in MESH_AXES}
  free = [axis for axis, size in shape.items() if size == -1]
  fixed = int(np.prod([size for size in shape.values() if size != -1]))
  if len(free) > 1 or any(size == 0 or size < -1 for size in shape.values()):
    raise ConfigError(f'parallel.mesh_shape={shape}: give positive sizes, at most one -1')
  if free:
    if num_devices % fixed:
      raise ConfigError(f'parallel.mesh_shape={shape}: {num_devices} devices do not divide by '
                        f'{fixed}')
    shape[free[0]] = num_devices // fixed
  elif fixed != num_devices:
    raise ConfigError(f'parallel.mesh_shape={shape} needs {fixed} devices; there are '
                      f'{num_devices}: make one size -1')
  return shape


def make_mesh(shape: dict[str, int]) -> Mesh:
  """Devices arranged for the interconnect where JAX knows it (CPU: in order; GPU: by id; TPU:
  on the torus), else in order. Sizes match the device count already (`mesh_shape`)."""
  devices = jax.devices()
  sizes = tuple(shape[axis] for axis in MESH_AXES)
  try:
    grid = mesh_utils.create_device_mesh(sizes, devices)
  except NotImplementedError:  # TPU: a size that is no product of the torus's axes
    grid = np.array(devices).reshape(sizes)
  return Mesh(grid, MESH_AXES)


def logical_axis_rules(parallel) -> list[tuple[str, str | tuple[str, ...] | None]]:
  """`parallel.logical_axis_rules` (name -> 'axis', 'a,b' or '' for unsplit) as flax rules."""
  rules = []
  for name, target in parallel.logical_axis_rules.items():
    axes = tuple(a.strip() for a in str(target or '').split(',') if a.strip())
    unknown = [a for a in axes if a not in MESH_AXES]
    if unknown:
      raise ConfigError(f'parallel.logical_axis_rules.{name}={target!r}: unknown mesh axis '
                        f"{unknown[0]!r} (mesh axes: {', '.join(MESH_AXES)})")
    rules.append((name, axes[0] if len(axes) == 1 else (axes or None)))
  return rules


def logical_specs(model, batch: dict) -> dict:
  """The logical PartitionSpec of every parameter, from an abstract (allocation-free) init."""
  variables = jax.eval_shape(lambda: model.init({'params': jax.random.key(0)}, batch))
  return nn.get_partition_spec(variables)['params']


def _fit(spec: PartitionSpec, shape: tuple[int, ...], mesh: Mesh) -> PartitionSpec:
  """Drops a mesh axis from a dimension it does not divide (that dimension stays whole)."""
  fitted = []
  for size, axes in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec)), strict=True):
    names = (axes,) if isinstance(axes, str) else tuple(axes or ())
    ways = int(np.prod([mesh.shape[a] for a in names])) if names else 1
    fitted.append(axes if size % ways == 0 else None)
  return PartitionSpec(*fitted)


def param_shardings(params, specs, mesh: Mesh, rules) -> dict:
  """NamedShardings for a parameter tree (arrays or ShapeDtypeStructs) from its logical specs."""
  def one(spec, leaf):
    mesh_spec = nn.logical_to_mesh_axes(tuple(spec), rules)
    return NamedSharding(mesh, _fit(mesh_spec, np.shape(leaf), mesh))
  return jax.tree.map(one, specs, params, is_leaf=lambda x: isinstance(x, PartitionSpec))


def like_params_shardings(tree, params, shardings, mesh: Mesh):
  """Shardings for a tree holding per-parameter slots (optimizer moments): a leaf whose path ends
  with a parameter's path and has its shape is laid out as that parameter; the rest (counts,
  scalars) is replicated. Independent of how the optimizer nests its state."""
  by_path = {}
  for path, sharding in jax.tree_util.tree_leaves_with_path(shardings):
    by_path[tuple(path)] = sharding
  shapes = {tuple(path): np.shape(leaf)
            for path, leaf in jax.tree_util.tree_leaves_with_path(params)}
  replicated = NamedSharding(mesh, PartitionSpec())

  def one(path, leaf):
    path = tuple(path)
    for start in range(len(path)):
      suffix = path[start:]
      if suffix in by_path and shapes[suffix] == np.shape(leaf):
        return by_path[suffix]
    return replicated
  return jax.tree_util.tree_map_with_path(one, tree)


def state_shardings(state, specs, mesh: Mesh, rules):
  """Shardings for a TrainState (concrete or abstract): params and moments split, rest copied."""
  params = param_shardings(state.params, specs, mesh, rules)
  replicated = NamedSharding(mesh, PartitionSpec())
  return state.replace(step=replicated, rng=replicated, params=params,
                       opt_state=like_params_shardings(state.opt_state, state.params, params, mesh))


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec(BATCH_AXES))


class BatchShardedModel:
  """`model` whose every submodule output (activations: [batch, ...]) is pinned to the batch
  layout, the rest of each array left to XLA.

  The parameters are annotated, the activations are not; with `embed -> fsdp`, XLA would
  otherwise also propagate the weights' `fsdp` split into the activations' hidden axis,
  contend with the batch split over the same devices, and keep far more activation memory
  (measured: 2-3x per device for BERT). Pinning from here (a Flax method interceptor) leaves
  the modules free of device names, as maxtext's `with_logical_constraint` calls would not.
  """

  def __init__(self, model, mesh: Mesh):
    self.model, self.mesh = model, mesh
    self.shards = int(np.prod([mesh.shape[a] for a in BATCH_AXES]))

  def _pin(self, x):
    if not isinstance(x, jax.Array) or x.ndim < 2 or x.shape[0] % self.shards:
      return x  # not a batch-leading activation (a position table, a scalar)
    spec = PartitionSpec(BATCH_AXES, *[PartitionSpec.UNCONSTRAINED] * (x.ndim - 1))
    return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, spec))

  def _intercept(self, call, args, kwargs, context):
    out = call(*args, **kwargs)
    return jax.tree.map(self._pin, out) if context.method_name == '__call__' else out

  def apply(self, *args, **kwargs):
    with nn.intercept_methods(self._intercept):
      return self.model.apply(*args, **kwargs)


def put_global(tree, shardings):
  """Host arrays that every process holds whole (fresh or restored state) -> global arrays;
  each process puts only the slices its own devices keep."""
  def one(x, sharding):
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])
  return jax.tree.map(one, tree, shardings)


def put_batch(batch: dict, sharding: NamedSharding) -> dict:
  """This process's rows of the global batch -> one global array per field (`sharding`: from
  `batch_sharding`)."""
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def bytes_per_device(tree) -> dict:
  """Bytes of `tree`'s arrays that each device holds (for the FSDP tests and benchmarks)."""
  totals: dict = {}
  for leaf in jax.tree.leaves(tree):
    for shard in leaf.addressable_shards:
      totals[shard.device] = totals.get(shard.device, 0) + shard.data.nbytes
  return totals
