"""How the trainer places state and batches on devices and compiles the steps: `pmap` (the
default) or `jax.jit` over a sharded `mesh`.

Both compile the same step bodies (`encoder.train.steps`); they differ only in where the arrays
live (`encoder.train.sharding`) and in who sums over devices:
  pmap   the state is copied to every local device; each device steps on its rows of the batch
         and `psum` over the axis `batch` adds the gradients. Simple and fast while the model
         and its optimizer state fit on one device. On a machine with one device (a laptop,
         one GPU) the same step runs under plain `jax.jit` instead (`OneDeviceStrategy`): a
         one-device pmap copies the donated state and all-reduces over nothing, measured at
         6% of a MiniLM fine-tuning step on 2 CPU cores (docs/performance.md).
  mesh   `jax.jit` over a (data, fsdp, tensor) mesh; the arrays carry NamedShardings derived
         from the modules' logical axis names, and XLA inserts the collectives. With fsdp > 1
         each device keeps 1/fsdp of the parameters and optimizer state: the way to train a
         model that does not fit on one device.
Checkpoints hold whole arrays either way, so a run may resume under the other strategy.

Given the compile-only devices of a target (`make_strategy(..., devices)`: `--compile_for`,
encoder/train/compile_report.py), each strategy lays the same run out on them, and
`compile_args` gives its steps' arguments as abstract arrays in that layout: the steps then
lower and compile for the target without allocating anything. pmap itself cannot compile for
devices this process does not have, so there the same body runs in `jax.shard_map` over a
one-axis `batch` mesh (`TargetPmapStrategy`): per device, the program pmap runs.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from encoder.errors import ConfigError
from encoder.train import prng, sharding
from encoder.train.steps import create_state, eval_step, predict_step, train_step


def init_params(model: nn.Module, batch: dict, seed: int) -> dict:
  """Float32 parameters on the host, logical-axis boxes removed."""
  variables = jax.jit(model.init)({'params': jax.random.key(seed)}, batch)
  return jax.tree.map(np.asarray, nn.unbox(variables)['params'])


def abstract_state(model, tx, dummy_batch: dict, boxed: bool = False):
  """The train state's shapes and dtypes, nothing allocated; `boxed` keeps the parameters'
  Flax logical boxes (optax carries them into the moments), which the mesh layout reads."""
  def build():
    params = model.init({'params': jax.random.key(0)}, dummy_batch)['params']
    return create_state(params if boxed else nn.unbox(params), tx, 0)
  return jax.eval_shape(build)


def host_state_like(model, tx, dummy_batch: dict):
  """Numpy zeros of the state's shapes (the host's lazily mapped pages, nothing on a device):
  what a checkpoint restores into before the strategy places it."""
  return jax.tree.map(lambda x: np.zeros(x.shape, x.dtype),
                      abstract_state(model, tx, dummy_batch))


def laid_out(tree, shardings):
  """Abstract arrays of `tree`'s shapes and dtypes carrying `shardings` (one sharding for
  every leaf, or a tree of them): what a step is lowered with, nothing allocated."""
  if not isinstance(shardings, jax.sharding.Sharding):
    return jax.tree.map(lambda x, where: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=where),
                        tree, shardings)
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=shardings), tree)


def sum_on_host(trees: list):
  """Per-step trees of whole (unreplicated) arrays, fetched in one `device_get` and added up."""
  host = jax.device_get(trees)
  return jax.tree.map(lambda *xs: sum(np.asarray(x) for x in xs), *host)


class PmapStrategy:
  """Data parallelism with `jax.pmap` over the local devices of each process."""
  name = 'pmap'
  mesh_shape = None

  def per_device_batch_size(self, global_batch: int, grad_accum_steps: int) -> int:
    return sharding.per_device_batch_size(global_batch, jax.device_count(), grad_accum_steps)

  def init_state(self, model, tx, dummy_batch: dict, seed: int, params=None):
    """A fresh state (or one around the given host `params`), copied to every device."""
    if params is None:
      params = init_params(model, dummy_batch, seed)
    return sharding.replicate(create_state(params, tx, seed))

  def checkpoint_like(self, model, tx, dummy_batch: dict):
    """What a checkpoint restores into: host zeros, replicated once restored."""
    return host_state_like(model, tx, dummy_batch)

  def place_state(self, state):
    return sharding.replicate(state)

  def to_checkpoint(self, placed):
    """Every process holds the same copy; Orbax writes numpy leaves from process 0 only."""
    return sharding.unreplicate(placed)

  def steps(self, model, task, tx, grad_accum_steps: int, skip_nonfinite: bool = False,
            progress: bool = False, rng_impl: str = prng.DEFAULT):
    """The train step (state donated) and the eval step, pmap-ed over `sharding.AXIS`; with
    `progress` the train step takes the schedule's progress (one scalar for every device) as
    a third argument (a wall-clock budget: steps.train_step). `rng_impl`: train.rng_impl."""
    axis = sharding.AXIS
    train = jax.pmap(functools.partial(train_step, model=model, task=task, tx=tx,
                                       grad_accum_steps=grad_accum_steps, axis_name=axis,
                                       skip_nonfinite=skip_nonfinite, rng_impl=rng_impl),
                     axis_name=axis, donate_argnums=(0,),
                     in_axes=(0, 0, None) if progress else 0)
    evaluate = jax.pmap(functools.partial(eval_step, model=model, task=task, axis_name=axis),
                        axis_name=axis)
    return train, evaluate

  def predict_step(self, model, task):
    return jax.pmap(functools.partial(predict_step, model=model, task=task),
                    axis_name=sharding.AXIS)

  def place_batch(self, batch: dict) -> dict:
    return sharding.shard(batch)

  def sum_metrics(self, trees: list):
    """Per-step trees of psum-ed (so replicated) arrays, added up on the host: one
    `device_get` for the whole list, the only host sync of a log window or an evaluation."""
    host = jax.device_get(trees)
    return jax.tree.map(lambda *xs: sum(np.asarray(x)[0] for x in xs), *host)

  def gather_predictions(self, outputs: list) -> list:
    """[devices, per_device, ...] per batch -> the global batch's rows on the host, per batch
    (batches may differ in length, so the data object joins them: `collate_predictions`)."""
    host = jax.device_get(outputs)
    lead = 2
    if jax.process_count() > 1:  # pmap outputs are local: each process has its hosts' rows
      from jax.experimental import multihost_utils
      host, lead = multihost_utils.process_allgather(host), 3  # [processes, devices, ...]
    return [jax.tree.map(lambda x: x.reshape((-1,) + x.shape[lead:]), h) for h in host]


class TargetPmapStrategy:
  """The pmap strategy laid out on a target's compile-only devices: the same step body with
  the same `batch` axis, in `jax.shard_map` over a one-axis mesh of them under `jax.jit`.
  Each device holds the whole state and steps on its rows of the batch; the body's psum adds
  the gradients: the program pmap runs on each device. Replication is unchecked
  (`check_vma=False`), as pmap does not type it (the bf16 matmul's custom VJP returns each
  device's own weight gradient, summed by the step's psum). It compiles only: nothing can be
  placed on compile-only devices, so it has no `init_state` or `place_batch`."""
  name = 'pmap'
  mesh_shape = None

  def __init__(self, devices):
    self.devices = list(devices)
    self.mesh = Mesh(np.array(self.devices), (sharding.AXIS,))

  def per_device_batch_size(self, global_batch: int, grad_accum_steps: int) -> int:
    return sharding.per_device_batch_size(global_batch, len(self.devices), grad_accum_steps)

  def _per_device(self, body, in_specs, out_specs, **jit_kwargs):
    return jax.jit(jax.shard_map(body, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs,
                                 check_vma=False), **jit_kwargs)

  def steps(self, model, task, tx, grad_accum_steps: int, skip_nonfinite: bool = False,
            progress: bool = False, rng_impl: str = prng.DEFAULT):
    whole, rows = PartitionSpec(), PartitionSpec(sharding.AXIS)
    axis = sharding.AXIS
    train = self._per_device(
        functools.partial(train_step, model=model, task=task, tx=tx,
                          grad_accum_steps=grad_accum_steps, axis_name=axis,
                          skip_nonfinite=skip_nonfinite, rng_impl=rng_impl),
        (whole, rows) + ((whole,) if progress else ()), (whole, whole), donate_argnums=(0,))
    evaluate = self._per_device(
        functools.partial(eval_step, model=model, task=task, axis_name=axis), (whole, rows),
        whole)
    return train, evaluate

  def predict_step(self, model, task):
    rows = PartitionSpec(sharding.AXIS)
    return self._per_device(functools.partial(predict_step, model=model, task=task),
                            (PartitionSpec(), rows), rows)

  def compile_args(self, model, tx, dummy_batch: dict, batch: dict):
    """The train step's (state, batch): the state whole on every device, the batch by rows."""
    return (laid_out(abstract_state(model, tx, dummy_batch),
                     NamedSharding(self.mesh, PartitionSpec())),
            laid_out(batch, NamedSharding(self.mesh, PartitionSpec(sharding.AXIS))))


class OneDeviceStrategy:
  """`parallel.strategy=pmap` where there is one device in all: the pmap step compiled by
  `jax.jit`, with no device axis on the state, the batch or the metrics.

  The step is the pmap step's, bit for bit: the same body, and its dropout key folded with
  device index 0 as pmap's one device folds it (`one_device=True`), so a run started under a
  one-device pmap resumes here with the same random stream."""
  name = 'pmap (jit on one device)'
  mesh_shape = None

  def __init__(self, device=None):
    self.device = device  # a target's compile-only device; None: this process's

  def per_device_batch_size(self, global_batch: int, grad_accum_steps: int) -> int:
    return sharding.per_device_batch_size(global_batch, 1, grad_accum_steps)

  def compile_args(self, model, tx, dummy_batch: dict, batch: dict):
    """The train step's (state, batch) as abstract arrays on the target device."""
    where = SingleDeviceSharding(self.device or jax.devices()[0])
    return laid_out(abstract_state(model, tx, dummy_batch), where), laid_out(batch, where)

  def init_state(self, model, tx, dummy_batch: dict, seed: int, params=None):
    if params is None:
      params = init_params(model, dummy_batch, seed)
    return jax.device_put(create_state(params, tx, seed))

  def checkpoint_like(self, model, tx, dummy_batch: dict):
    return host_state_like(model, tx, dummy_batch)

  def place_state(self, state):
    return jax.device_put(state)

  def to_checkpoint(self, placed):
    return jax.device_get(placed)

  def steps(self, model, task, tx, grad_accum_steps: int, skip_nonfinite: bool = False,
            progress: bool = False, rng_impl: str = prng.DEFAULT):
    del progress  # jit takes a third (scalar) argument as it is
    train = jax.jit(functools.partial(train_step, model=model, task=task, tx=tx,
                                      grad_accum_steps=grad_accum_steps, one_device=True,
                                      skip_nonfinite=skip_nonfinite, rng_impl=rng_impl),
                    donate_argnums=(0,))
    return train, jax.jit(functools.partial(eval_step, model=model, task=task))

  def predict_step(self, model, task):
    return jax.jit(functools.partial(predict_step, model=model, task=task))

  def place_batch(self, batch: dict) -> dict:
    return jax.device_put(batch)

  def sum_metrics(self, trees: list):
    return sum_on_host(trees)

  def gather_predictions(self, outputs: list) -> list:
    return jax.device_get(outputs)


class MeshStrategy:
  """`jax.jit` with NamedShardings over a (data, fsdp, tensor) mesh of every process's devices."""
  name = 'mesh'

  def __init__(self, parallel_config, devices=None):
    """`devices`: a target's compile-only devices (default: every process's)."""
    self.mesh_shape = sharding.mesh_shape(parallel_config,
                                          None if devices is None else len(devices))
    self.mesh = sharding.make_mesh(self.mesh_shape, devices)
    self.rules = sharding.logical_axis_rules(parallel_config)
    self.replicated = NamedSharding(self.mesh, PartitionSpec())
    self.batch_sharding = sharding.batch_sharding(self.mesh)
    self.state_shardings = None  # set by lay_out, which sees the model and optimizer

  def per_device_batch_size(self, global_batch: int, grad_accum_steps: int) -> int:
    """Examples per batch shard: `tensor` devices share theirs, so only data x fsdp divide."""
    shards = self.mesh_shape['data'] * self.mesh_shape['fsdp']
    return sharding.per_device_batch_size(global_batch, shards, grad_accum_steps)

  def lay_out(self, model, tx, dummy_batch: dict):
    """Fixes the state's shardings, as flax's lm1b does: the state built under `jax.eval_shape`
    with the parameters' logical boxes kept (optax carries them into the moments), mapped
    through the rules. Returns the abstract (unboxed) state: nothing is allocated."""
    boxed = abstract_state(model, tx, dummy_batch, boxed=True)
    self.state_shardings = sharding.shardings_of(boxed, self.mesh, self.rules)
    return nn.unbox(boxed)

  def checkpoint_like(self, model, tx, dummy_batch: dict):
    """Abstract arrays carrying this layout: Orbax restores each process's shards straight
    into place, with no fresh state beside them."""
    state = self.lay_out(model, tx, dummy_batch)
    return jax.tree.map(lambda x, where: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=where),
                        state, self.state_shardings)

  def init_state(self, model, tx, dummy_batch: dict, seed: int, params=None):
    """A fresh state created already sharded (no host copy), or one around host `params`."""
    if self.state_shardings is None:  # else `checkpoint_like` laid this model out already
      self.lay_out(model, tx, dummy_batch)
    if params is not None:  # host arrays (init_from): placed, then the moments made in place
      placed = sharding.put_global(params, self.state_shardings.params)
      return jax.jit(lambda p: create_state(p, tx, seed),
                     out_shardings=self.state_shardings)(placed)

    def fresh():
      variables = model.init({'params': jax.random.key(seed)}, dummy_batch)
      return create_state(nn.unbox(variables)['params'], tx, seed)
    return jax.jit(fresh, out_shardings=self.state_shardings)()

  def place_state(self, state):
    """A state in this layout from host arrays that every process holds whole, or from global
    arrays (a restored checkpoint: already in place, so nothing moves)."""
    def one(x, where):
      return jax.device_put(x, where) if isinstance(x, jax.Array) else sharding.put_global(
          x, where)
    return jax.tree.map(one, state, self.state_shardings)

  def to_checkpoint(self, placed):
    """The sharded global arrays themselves: each process writes the shards it owns."""
    return placed

  def _in_layout(self, fn):
    """`fn` traced with the mesh and the logical-axis rules in context, so the modules'
    `nn.with_logical_constraint` calls take effect (outside it, as under pmap, they do
    nothing)."""
    @functools.wraps(fn)
    def traced(*args, **kwargs):
      with jax.sharding.use_abstract_mesh(self.mesh.abstract_mesh), \
           nn.logical_axis_rules(self.rules):
        return fn(*args, **kwargs)
    return traced

  def steps(self, model, task, tx, grad_accum_steps: int, skip_nonfinite: bool = False,
            progress: bool = False, rng_impl: str = prng.DEFAULT):
    if self.state_shardings is None:
      raise RuntimeError('MeshStrategy.lay_out (or init_state) must run before steps')
    train = jax.jit(
        self._in_layout(functools.partial(train_step, model=model, task=task, tx=tx,
                                          grad_accum_steps=grad_accum_steps,
                                          skip_nonfinite=skip_nonfinite, rng_impl=rng_impl)),
        in_shardings=(self.state_shardings, self.batch_sharding) + (
            (self.replicated,) if progress else ()),
        out_shardings=(self.state_shardings, self.replicated), donate_argnums=(0,))
    evaluate = jax.jit(
        self._in_layout(functools.partial(eval_step, model=model, task=task)),
        in_shardings=(self.state_shardings.params, self.batch_sharding),
        out_shardings=self.replicated)
    return train, evaluate

  def predict_step(self, model, task):
    # Replicated outputs: every process sees the whole eval batch's predictions.
    return jax.jit(self._in_layout(functools.partial(predict_step, model=model, task=task)),
                   in_shardings=(self.state_shardings.params, self.batch_sharding),
                   out_shardings=self.replicated)

  def compile_args(self, model, tx, dummy_batch: dict, batch: dict):
    """The train step's (state, batch) as abstract arrays in this layout."""
    return self.checkpoint_like(model, tx, dummy_batch), laid_out(batch, self.batch_sharding)

  def place_batch(self, batch: dict) -> dict:
    return sharding.put_batch(batch, self.batch_sharding)

  def sum_metrics(self, trees: list):
    return sum_on_host(trees)

  def gather_predictions(self, outputs: list) -> list:
    return jax.device_get(outputs)


def make_strategy(parallel_config, devices=None):
  """The strategy `parallel.strategy` names, over every process's devices, or laid out on
  `devices` (a target's compile-only devices: its steps compile for them, `compile_args`)."""
  name = parallel_config.strategy
  count = jax.device_count() if devices is None else len(devices)
  if name == 'pmap':
    if count == 1:
      return OneDeviceStrategy(None if devices is None else devices[0])
    return PmapStrategy() if devices is None else TargetPmapStrategy(devices)
  if name == 'mesh':
    return MeshStrategy(parallel_config, devices)
  raise ConfigError(f"parallel.strategy={name!r}: use 'pmap' or 'mesh'")
