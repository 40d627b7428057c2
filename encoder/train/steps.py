"""The train, eval and predict step bodies: pure functions, the same for both strategies.

`encoder.train.strategy` compiles them: under `pmap` a body sees one device's rows of the batch
and `axis_name` is the pmap axis; under `jax.jit` over a mesh it sees the global batch (arrays
that span every device) and `axis_name` is None. The only difference is in `_sum_over_devices`
and `_device_rng`: under pmap, sums are `psum`-ed and each device folds its index into the
dropout key; under jit the sums are whole already and one key draws for the global batch.
`train.rng_impl` then picks the implementation that draws the masks from that key
(`dropout_key`; encoder/train/prng.py says what each one is).

Gradients are summed, not averaged, over devices and accumulation microbatches: each device's
loss is its share of the global mean (its loss sums divided by the global denominators:
masked tokens, sequences), so the sum of the shares' gradients is the gradient of the global
mean, and one device and eight give the same update for the same global batch.

A task whose loss couples the examples of a batch (`task.couples_examples`: in-batch negatives)
gets the pmap axis to gather the global batch's outputs over, and its microbatches are
accumulated by GradCache (Gao et al., 2021) instead of by summing their gradients, which would
shrink its negative pool to a microbatch: every microbatch's outputs are computed without
gradients, the loss and its gradient with respect to those outputs are taken over the whole
batch, and each microbatch's forward pass is run again to carry that gradient to the
parameters. The update is the whole batch's (as one step would compute it) with the memory of
one microbatch's activations, for one more forward pass.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax

from encoder.train import faults, prng


@flax.struct.dataclass
class TrainState:
  step: jax.Array  # int32 scalar: optimizer updates done
  params: Any
  opt_state: Any
  rng: jax.Array  # raw uint32 key data, so plain Orbax can save and restore it


def create_state(params, tx: optax.GradientTransformation, seed: int) -> TrainState:
  return TrainState(step=jnp.asarray(0, jnp.int32), params=params, opt_state=tx.init(params),
                    rng=jax.random.key_data(jax.random.key(seed)))


def _sum_over_devices(tree, axis_name: str | None):
  return tree if axis_name is None else jax.lax.psum(tree, axis_name)


def _device_rng(rng: jax.Array, axis_name: str | None, one_device: bool) -> jax.Array:
  """Each pmap device's dropout key: the step's key folded with the device index (0 for the
  one device of `OneDeviceStrategy`, as a one-device pmap folds it); a mesh's jit draws one key
  for the global batch."""
  if one_device:
    return jax.random.fold_in(rng, 0)
  return rng if axis_name is None else jax.random.fold_in(rng, jax.lax.axis_index(axis_name))


def dropout_key(key_data: jax.Array, step: jax.Array, axis_name: str | None, one_device: bool,
                rng_impl: str = prng.DEFAULT) -> jax.Array:
  """The key a train step draws its dropout masks from: the state's key (`key_data`) folded
  with the step, then with the device (`_device_rng`), as it always was. Under `rbg` or
  `unsafe_rbg` that threefry key's next random words become a key of the chosen
  implementation (4 words: one threefry draw, not a mask's), so the masks' bits come from
  XLA's RngBitGenerator while the checkpointed key stays the same for every choice."""
  key = _device_rng(jax.random.fold_in(jax.random.wrap_key_data(key_data), step), axis_name,
                    one_device)
  if rng_impl == prng.DEFAULT:
    return key
  impl = prng.IMPLS[rng_impl]
  words = jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0, impl=impl))).shape
  return jax.random.wrap_key_data(jax.random.bits(key, words, jnp.uint32), impl=impl)


def _split_microbatches(batch: dict, n: int) -> dict:
  """Microbatch i takes rows i, i+n, ...: a batch sharded over devices by rows then gives every
  device its share of every microbatch, with no data moved (the sums do not depend on the split).
  """
  return jax.tree.map(
      lambda x: x.reshape((x.shape[0] // n, n) + x.shape[1:]).swapaxes(0, 1), batch)


def task_loss(task, outputs: dict, batch: dict, denominators: dict, axis_name: str | None):
  """`task.loss_and_metrics`, given the device axis when its loss gathers the global batch."""
  if task.couples_examples:
    return task.loss_and_metrics(outputs, batch, denominators, axis_name=axis_name)
  return task.loss_and_metrics(outputs, batch, denominators)


def _join_microbatches(stacked):
  """The inverse of `_split_microbatches`: [n, rows / n, ...] back to the batch's row order."""
  return jax.tree.map(lambda x: x.swapaxes(0, 1).reshape((-1,) + x.shape[2:]), stacked)


def cached_grads(forward, task, params, batch: dict, rng, n: int, denominators: dict,
                 axis_name: str | None):
  """GradCache (see the module docstring): the gradient of the whole batch's loss, computed
  a microbatch's activations at a time. Microbatch i's dropout key is `rng` folded with i in
  both of its forward passes, so the second repeats the first exactly."""
  micro = _split_microbatches(batch, n)
  keys = jnp.arange(n)
  outputs = _join_microbatches(jax.lax.map(
      lambda xs: forward(params, xs[1], jax.random.fold_in(rng, xs[0])), (keys, micro)))
  output_grads, sums = jax.grad(
      lambda o: task_loss(task, o, batch, denominators, axis_name), has_aux=True)(outputs)

  def accumulate(total, xs):
    index, microbatch, cotangent = xs
    _, pullback = jax.vjp(lambda p: forward(p, microbatch, jax.random.fold_in(rng, index)),
                          params)
    return jax.tree.map(jnp.add, total, pullback(cotangent)[0]), None

  zeros = jax.tree.map(jnp.zeros_like, params)
  grads, _ = jax.lax.scan(accumulate, zeros,
                          (keys, micro, _split_microbatches(output_grads, n)))
  return grads, sums


def train_step(state: TrainState, batch: dict, progress=None, *, model, task, tx,
               grad_accum_steps: int = 1, axis_name: str | None = None,
               skip_nonfinite: bool = False, one_device: bool = False,
               rng_impl: str = prng.DEFAULT):
  """One optimizer update; returns the new state and this step's metric sums (over devices),
  with the step's non-finite flag (see `faults`: a non-finite step is skipped when asked).
  `rng_impl` (`train.rng_impl`) picks the PRNG that draws the dropout masks (`dropout_key`).
  `progress`, given only under a wall-clock budget, is the schedule's (train/time_budget.py),
  which the optimizer reads (optim.make_optimizer)."""
  rng = dropout_key(state.rng, state.step, axis_name, one_device, rng_impl)
  denominators = _sum_over_devices(task.loss_denominators(batch), axis_name)

  def forward(params, microbatch, dropout_rng):
    return model.apply({'params': params}, microbatch, deterministic=False,
                       rngs={'dropout': dropout_rng})

  def loss_fn(params, microbatch, dropout_rng):
    return task_loss(task, forward(params, microbatch, dropout_rng), microbatch, denominators,
                     axis_name)

  grad_fn = jax.grad(loss_fn, has_aux=True)
  if grad_accum_steps == 1:
    grads, sums = grad_fn(state.params, batch, rng)
  elif task.couples_examples:
    grads, sums = cached_grads(forward, task, state.params, batch, rng, grad_accum_steps,
                               denominators, axis_name)
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
  schedule = {} if progress is None else {'progress': progress}
  updates, opt_state = tx.update(grads, state.opt_state, state.params, **schedule)
  params = optax.apply_updates(state.params, updates)
  new = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
  return faults.guard_step(faults.step_is_finite(sums), new, state, sums, skip_nonfinite)


def eval_step(params, batch: dict, *, model, task, axis_name: str | None = None) -> dict:
  """Metric sums of one eval batch, over devices."""
  outputs = model.apply({'params': params}, batch, deterministic=True)
  denominators = _sum_over_devices(task.loss_denominators(batch), axis_name)
  _, sums = task_loss(task, outputs, batch, denominators, axis_name)
  return _sum_over_devices(sums, axis_name)


def predict_step(params, batch: dict, *, model, task) -> dict:
  """Per-example outputs (`task.predict`), for metrics that need whole predictions."""
  outputs = model.apply({'params': params}, batch, deterministic=True)
  return task.predict(outputs, batch)
