"""Where arrays live: the device mesh, logical-axis rules, and placing state and batches.

Two layouts, one per strategy (`encoder.train.strategy`):
  pmap  the local devices on one axis, `batch`: the state is copied to each ([devices, ...]
        stacked) and each host's batch is split by rows.
  mesh  every process's devices on (data, fsdp, tensor). The modules name the logical axes of
        their parameters (`vocab`, `embed`, `heads`, `kv`, `mlp`) and of the few activations
        that need a layout (`batch`, `length`, `embed`, `mlp`); `logical_axis_rules` maps
        those names onto mesh axes, so the modules never name a device. The batch is split
        over (`data`, `fsdp`). With `embed -> fsdp` (the default) the parameters and optimizer
        state are split over `fsdp` too (ZeRO-3 / FSDP: XLA gathers each weight where it is
        used); `heads`, `mlp` and `vocab -> tensor` split the big matmuls Megatron-style. A
        dimension a mesh axis does not divide stays whole, so any rule set gives a valid layout.

The activations' rule `batch -> (data, fsdp)` comes first, so in an activation the `embed`
axis finds `fsdp` taken and stays whole: without that, XLA spread the weights' `fsdp` split
into the hidden axis of the activations as well and kept 2-3x the activation memory.
Under pmap no rules are active, and the modules' constraints do nothing.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from encoder.errors import ConfigError

AXIS = 'batch'  # the pmap axis: metric sums and gradients are psum-ed over it
MESH_AXES = ('data', 'fsdp', 'tensor')
BATCH_AXES = ('data', 'fsdp')  # the batch is split over both; `tensor` devices share examples
# Logical axes of activations (the modules' `nn.with_logical_constraint` calls), mapped before
# the configurable parameter rules so that they take precedence.
ACTIVATION_RULES = (('batch', BATCH_AXES), ('length', None))


# ---- pmap: replicated state, batches split over the local devices ----

def _local_sharding() -> NamedSharding:
  """The sharding pmap gives its outputs: inputs laid out the same way let the second step
  reuse the first step's executable instead of compiling again."""
  return NamedSharding(Mesh(np.array(jax.local_devices()), (AXIS,)), PartitionSpec(AXIS))


def replicate(tree):
  """One copy of every leaf per local device, stacked on a leading axis."""
  n, sharding = jax.local_device_count(), _local_sharding()
  return jax.tree.map(lambda x: jax.device_put(np.stack([np.asarray(x)] * n), sharding), tree)


def unreplicate(tree):
  """The first device's copy, fetched to the host as numpy."""
  return jax.tree.map(lambda x: np.asarray(x.addressable_shards[0].data).squeeze(0), tree)


def shard(batch: dict) -> dict:
  """[host_batch, ...] numpy -> [local_devices, host_batch / devices, ...] on the devices."""
  n, sharding = jax.local_device_count(), _local_sharding()
  return {k: jax.device_put(v.reshape((n, v.shape[0] // n) + v.shape[1:]), sharding)
          for k, v in batch.items()}


def per_device_batch_size(global_batch_size: int, batch_shards: int,
                          grad_accum_steps: int = 1) -> int:
  """Examples per batch shard of one step (all accumulation microbatches together)."""
  if global_batch_size % (batch_shards * grad_accum_steps):
    raise ConfigError(
        f'train.batch_size={global_batch_size} is not divisible by {batch_shards} batch shards '
        f'x {grad_accum_steps} accumulation steps')
  return global_batch_size // batch_shards


# ---- mesh: named shardings from logical axes ----

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


def make_mesh(shape: dict[str, int], devices=None) -> Mesh:
  """`devices` (default: every process's) arranged for the interconnect where JAX knows it
  (CPU: in order; GPU: by id; TPU: on the torus), else in order. Sizes match the device count
  already (`mesh_shape`). A target topology's compile-only devices (`--compile_for`) are laid
  out the same way as the real ones would be."""
  devices = jax.devices() if devices is None else list(devices)
  sizes = tuple(shape[axis] for axis in MESH_AXES)
  try:
    grid = mesh_utils.create_device_mesh(sizes, devices)
  except NotImplementedError:  # TPU: a size that is no product of the torus's axes
    grid = np.array(devices).reshape(sizes)
  return Mesh(grid, MESH_AXES)


def logical_axis_rules(parallel) -> tuple[tuple[str, str | tuple[str, ...] | None], ...]:
  """Flax rules: the activation rules, then `parallel.logical_axis_rules` (name -> 'axis',
  'a,b' or '' for unsplit)."""
  rules = list(ACTIVATION_RULES)
  for name, target in parallel.logical_axis_rules.items():
    axes = tuple(a.strip() for a in str(target or '').split(',') if a.strip())
    unknown = [a for a in axes if a not in MESH_AXES]
    if unknown:
      raise ConfigError(f'parallel.logical_axis_rules.{name}={target!r}: unknown mesh axis '
                        f"{unknown[0]!r} (mesh axes: {', '.join(MESH_AXES)})")
    rules.append((name, axes[0] if len(axes) == 1 else (axes or None)))
  return tuple(rules)


def _fit(spec: PartitionSpec, shape: tuple[int, ...], mesh: Mesh) -> PartitionSpec:
  """Drops a mesh axis from a dimension it does not divide (that dimension stays whole)."""
  fitted = []
  for size, axes in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec)), strict=True):
    names = (axes,) if isinstance(axes, str) else tuple(axes or ())
    ways = int(np.prod([mesh.shape[a] for a in names])) if names else 1
    fitted.append(axes if size % ways == 0 else None)
  return PartitionSpec(*fitted)


def shardings_of(boxed_tree, mesh: Mesh, rules):
  """NamedShardings for the unboxed form of a tree whose leaves may be Flax logical boxes
  (abstract or concrete): a boxed leaf is laid out by its axis names, any other (a step
  counter, an rng) is replicated. Optimizer moments that optax built from boxed parameters
  carry their parameter's boxes, so they are laid out as it is, with no matching by name."""
  specs = nn.get_partition_spec(boxed_tree)
  leaves = nn.unbox(boxed_tree)

  def one(spec, leaf):
    mesh_spec = nn.logical_to_mesh_axes(tuple(spec), rules)
    return NamedSharding(mesh, _fit(mesh_spec, np.shape(leaf), mesh))
  return jax.tree.map(one, specs, leaves, is_leaf=lambda x: isinstance(x, PartitionSpec))


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec(BATCH_AXES))


def put_global(tree, shardings):
  """Host arrays that every process holds whole (a restored or `init_from` state) -> global
  arrays; each process puts only the slices its own devices keep."""
  def one(x, sharding):
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])
  return jax.tree.map(one, tree, shardings)


def put_batch(batch: dict, sharding: NamedSharding) -> dict:
  """This process's rows of the global batch -> one global array per field."""
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def bytes_per_device(tree, shardings=None) -> int:
  """Bytes of `tree` that one device keeps (arrays or ShapeDtypeStructs; `shardings` default
  to the arrays' own). Every layout here splits evenly, so every device keeps the same."""
  shardings = jax.tree.leaves(shardings) if shardings is not None else [
      x.sharding for x in jax.tree.leaves(tree)]
  return sum(int(np.prod(s.shard_shape(x.shape))) * x.dtype.itemsize
             for x, s in zip(jax.tree.leaves(tree), shardings, strict=True))
