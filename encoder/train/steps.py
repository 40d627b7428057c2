"""Pure train and eval steps, shared by both parallel strategies.

Under `pmap` (axis `batch`) a step sees one device's slice of the batch, and `axis_name` names
the axis its sums run over. Under `jax.jit` with sharded arrays (`encoder.train.strategy`) the
same body sees the global batch, `axis_name` is None and the sums over devices are implicit. Loss
denominators (masked-token and sequence counts) are summed over microbatches and devices before
the loss is formed, and gradients are summed, so one device and eight give the same update for
the same global batch.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax

from encoder.train import faults
from encoder.train.parallel import AXIS


@flax.struct.dataclass
class TrainState:
  step: jax.Array  # int32 scalar: optimizer updates done
  params: Any
  opt_state: Any
  rng: jax.Array  # raw uint32 key data, so plain Orbax can save and restore it


def create_state(params, tx: optax.GradientTransformation, seed: int) -> TrainState:
  return TrainState(step=jnp.asarray(0, jnp.int32), params=params, opt_state=tx.init(params),
                    rng=jax.random.key_data(jax.random.key(seed)))


def _split_microbatches(batch: dict, n: int) -> dict:
  """Microbatch i takes rows i, i+n, ...: a batch sharded over devices by rows then gives every
  device its share of every microbatch, with no data moved (the sums do not depend on the split).
  """
  return jax.tree.map(
      lambda x: x.reshape((x.shape[0] // n, n) + x.shape[1:]).swapaxes(0, 1), batch)


def _sum_over_devices(tree, axis_name: str | None):
  """psum under pmap; under jit the arrays already span every device, so the sums are whole."""
  return tree if axis_name is None else jax.lax.psum(tree, axis_name)


def train_step(state: TrainState, batch: dict, *, model, task, tx, grad_accum_steps: int = 1,
               axis_name: str | None = AXIS, skip_nonfinite: bool = False):
  """One optimizer update; returns the new state and this step's metric sums (over devices),
  with the step's non-finite flag (see `faults`: a non-finite step is skipped when asked)."""
  rng = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
  if axis_name is not None:  # each pmap device draws its own dropout; jit draws for the batch
    rng = jax.random.fold_in(rng, jax.lax.axis_index(axis_name))
  denominators = _sum_over_devices(task.loss_denominators(batch), axis_name)

  def loss_fn(params, microbatch, dropout_rng):
    outputs = model.apply({'params': params}, microbatch, deterministic=False,
                          rngs={'dropout': dropout_rng})
    return task.loss_and_metrics(outputs, microbatch, denominators)

  grad_fn = jax.grad(loss_fn, has_aux=True)
  if grad_accum_steps == 1:
    grads, sums = grad_fn(state.params, batch, rng)
  else:
    def accumulate(carry, xs):
      index, microbatch = xs
      grads, sums = grad_fn(state.params, microbatch, jax.random.fold_in(rng, index))
      return jax.tree.map(jnp.add, carry, (grads, sums)), None

    micro = _split_microbatches(batch, grad_accum_steps)
    zeros = jax.tree.map(jnp.zeros_like, jax.eval_shape(
        grad_fn, state.params, jax.tree.map(lambda x: x[0], micro), rng))
    (grads, sums), _ = jax.lax.scan(accumulate, zeros, (jnp.arange(grad_accum_steps), micro))
  grads, sums = _sum_over_devices((grads, sums), axis_name)
  sums['grad_norm'] = optax.global_norm(grads)  # identical on every device; averaged when logged
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  new = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
  return faults.guard_step(faults.step_is_finite(sums), new, state, sums, skip_nonfinite)


def eval_step(params, batch: dict, *, model, task, axis_name: str | None = AXIS) -> dict:
  outputs = model.apply({'params': params}, batch, deterministic=True)
  denominators = _sum_over_devices(task.loss_denominators(batch), axis_name)
  _, sums = task.loss_and_metrics(outputs, batch, denominators)
  return _sum_over_devices(sums, axis_name)


def predict_step(params, batch: dict, *, model, task) -> dict:
  """Per-example outputs (`task.predict`), for metrics that need whole predictions."""
  outputs = model.apply({'params': params}, batch, deterministic=True)
  return task.predict(outputs, batch)


def pmap_steps(model, task, tx, grad_accum_steps: int = 1, skip_nonfinite: bool = False):
  """The jit-compiled, pmap-ed train step (state donated) and eval step."""
  train = jax.pmap(functools.partial(train_step, model=model, task=task, tx=tx,
                                     grad_accum_steps=grad_accum_steps,
                                     skip_nonfinite=skip_nonfinite),
                   axis_name=AXIS, donate_argnums=(0,))
  evaluate = jax.pmap(functools.partial(eval_step, model=model, task=task), axis_name=AXIS)
  return train, evaluate


def pmap_predict(model, task):
  return jax.pmap(functools.partial(predict_step, model=model, task=task), axis_name=AXIS)
