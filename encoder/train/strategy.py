"""How the trainer places state and batches on devices: `pmap` (default) or a sharded `mesh`.

Both strategies run the same step bodies (`encoder.train.steps`); they differ only in where the
arrays live and who sums over devices:
  pmap   the state is copied to every local device; each device steps on its slice of the
         batch and `psum` over the axis `batch` adds the gradients. Simple and fast while the
         model and its optimizer state fit on one device.
  mesh   `jax.jit` over a (data, fsdp, tensor) mesh; the arrays carry NamedShardings and XLA
         inserts the collectives. With fsdp > 1 each device keeps 1/fsdp of the parameters and
         optimizer state: the way to train a model that does not fit on one device.
Checkpoints hold whole arrays either way, so a run may resume under the other strategy.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from encoder.errors import ConfigError
from encoder.train import mesh as mesh_lib
from encoder.train import parallel
from encoder.train.steps import eval_step, pmap_predict, pmap_steps, predict_step, train_step


class PmapStrategy:
  """Data parallelism with `jax.pmap` over the local devices of each process."""
  name = 'pmap'
  mesh_shape = None

  def per_device_batch_size(self, global_batch: int, grad_accum_steps: int) -> int:
    return parallel.per_device_batch_size(global_batch, grad_accum_steps)

  def steps(self, model, task, tx, grad_accum_steps: int, skip_nonfinite: bool = False):
    return pmap_steps(model, task, tx, grad_accum_steps, skip_nonfinite)

  def predict_step(self, model, task):
    return pmap_predict(model, task)

  def place_state(self, state, model=None, dummy_batch=None):
    return parallel.replicate(state)

  def place_batch(self, batch: dict) -> dict:
    return parallel.shard(batch)

  def to_checkpoint(self, placed):
    """Every process holds the same copy; Orbax writes numpy leaves from process 0 only."""
    return parallel.unreplicate(placed)

  def sum_metrics(self, trees: list):
    return parallel.sum_replicated(trees)

  def gather_predictions(self, outputs: list):
    """[devices, per_device, ...] per batch -> one host array per field, in eval-set order."""
    host = jax.device_get(outputs)
    lead = 2
    if jax.process_count() > 1:  # pmap outputs are local: each process has its hosts' rows
      from jax.experimental import multihost_utils
      host, lead = multihost_utils.process_allgather(host), 3  # [processes, devices, ...]
    return jax.tree.map(
        lambda *xs: np.concatenate([x.reshape((-1,) + x.shape[lead:]) for x in xs]), *host)


class MeshStrategy:
  """`jax.jit` with NamedShardings over a (data, fsdp, tensor) mesh of every process's devices."""
  name = 'mesh'

  def __init__(self, parallel_config):
    self.mesh_shape = mesh_lib.mesh_shape(parallel_config)
    self.mesh = mesh_lib.make_mesh(self.mesh_shape)
    self.rules = mesh_lib.logical_axis_rules(parallel_config)
    self.replicated = NamedSharding(self.mesh, PartitionSpec())
    self.batch_sharding = mesh_lib.batch_sharding(self.mesh)
    self.state_shardings = None  # set by place_state, which sees the state's structure

  def per_device_batch_size(self, global_batch: int, grad_accum_steps: int) -> int:
    """Examples per batch shard: `tensor` devices share theirs, so only data x fsdp divide."""
    shards = self.mesh_shape['data'] * self.mesh_shape['fsdp']
    if global_batch % (shards * grad_accum_steps):
      raise ConfigError(
          f'train.batch_size={global_batch} is not divisible by {shards} batch shards '
          f'(mesh data x fsdp) x {grad_accum_steps} accumulation steps')
    return global_batch // shards

  def lay_out(self, state, model, dummy_batch: dict):
    """Fixes the state's shardings from the logical axes `model` gives its parameters (the
    state may be abstract: the memory benchmark compiles without allocating)."""
    specs = mesh_lib.logical_specs(model, dummy_batch)
    self.state_shardings = mesh_lib.state_shardings(state, specs, self.mesh, self.rules)
    return self.state_shardings

  def place_state(self, state, model, dummy_batch: dict):
    return mesh_lib.put_global(state, self.lay_out(state, model, dummy_batch))

  def steps(self, model, task, tx, grad_accum_steps: int, skip_nonfinite: bool = False):
    if self.state_shardings is None:
      raise RuntimeError('MeshStrategy.place_state must run before steps (it fixes the layout)')
    model = mesh_lib.BatchShardedModel(model, self.mesh)
    train = jax.jit(
        functools.partial(train_step, model=model, task=task, tx=tx,
                          grad_accum_steps=grad_accum_steps, axis_name=None,
                          skip_nonfinite=skip_nonfinite),
        in_shardings=(self.state_shardings, self.batch_sharding),
        out_shardings=(self.state_shardings, self.replicated), donate_argnums=(0,))
    evaluate = jax.jit(
        functools.partial(eval_step, model=model, task=task, axis_name=None),
        in_shardings=(self.state_shardings.params, self.batch_sharding),
        out_shardings=self.replicated)
    return train, evaluate

  def predict_step(self, model, task):
    # Replicated outputs: every process sees the whole eval batch's predictions.
    model = mesh_lib.BatchShardedModel(model, self.mesh)
    return jax.jit(functools.partial(predict_step, model=model, task=task),
                   in_shardings=(self.state_shardings.params, self.batch_sharding),
                   out_shardings=self.replicated)

  def place_batch(self, batch: dict) -> dict:
    return mesh_lib.put_batch(batch, self.batch_sharding)

  def to_checkpoint(self, placed):
    """The sharded global arrays themselves: each process writes the shards it owns."""
    return placed

  def sum_metrics(self, trees: list):
    host = jax.device_get(trees)
    return jax.tree.map(lambda *xs: sum(np.asarray(x) for x in xs), *host)

  def gather_predictions(self, outputs: list):
    host = jax.device_get(outputs)
    return jax.tree.map(lambda *xs: np.concatenate(xs), *host)


def make_strategy(parallel_config):
  """The strategy `parallel.strategy` names."""
  name = parallel_config.strategy
  if name == 'pmap':
    return PmapStrategy()
  if name == 'mesh':
    return MeshStrategy(parallel_config)
  raise ConfigError(f"parallel.strategy={name!r}: use 'pmap' or 'mesh'")
