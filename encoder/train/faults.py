"""Numerical faults: a non-finite loss or gradient norm stops the run, or is skipped.

Inside the jitted step (`step_is_finite`, `keep_if_finite`) every step computes one boolean: are
the step's metric sums (the loss terms) and the gradient norm all finite? With
`train.skip_nonfinite` the step's update is replaced by the old params and optimizer state with
a `jnp.where` per leaf, so the decision needs no host and works the same under pmap (the sums and
the norm are psum-ed, hence equal on every device). Either way the step returns the flag as
`sums['nonfinite']`.

On the host, `NonfiniteMonitor` only collects those on-device flags; it fetches them (one small
`device_get`) at the points where the loop syncs anyway: log steps, eval steps and before every
checkpoint write. So no step pays a host round trip, a poisoned state is never evaluated,
logged or saved, and the run stops at most one log interval after the fault, naming the first
bad step. The last checkpoint written is then the last good state.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from encoder.errors import EncoderError

FLAG = 'nonfinite'  # the key of the per-step flag in the step's metric sums


class NonFiniteError(EncoderError):
  """The loss or gradient norm became NaN or infinite (launch.py: one `error:` line, exit 2)."""


def step_is_finite(sums: dict) -> jax.Array:
  """True when every floating metric sum (loss terms, grad_norm) of the step is finite."""
  leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(sums)
            if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)]
  return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def keep_if_finite(finite: jax.Array, new, old):
  """`new` where the step was finite, else `old`, leaf by leaf (no host decision, pmap-safe)."""
  return jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)


def guard_step(finite: jax.Array, new_state, old_state, sums: dict, skip: bool):
  """The state and sums a step returns: a skipped step leaves params and optimizer state as
  they were (the step counter still advances, as the data loader's position does) and adds
  nothing to the window's metric sums; the flag goes out either way."""
  if skip:
    new_state = new_state.replace(
        params=keep_if_finite(finite, new_state.params, old_state.params),
        opt_state=keep_if_finite(finite, new_state.opt_state, old_state.opt_state))
    sums = jax.tree.map(lambda x: jnp.where(finite, x, jnp.zeros_like(x)), sums)
  sums[FLAG] = jnp.logical_not(finite).astype(jnp.float32)
  return new_state, sums


class NonfiniteMonitor:
  """Holds the per-step flags on device until a sync point; see the module docstring."""

  def __init__(self, skip: bool):
    self.skip = skip
    self._pending: list[tuple[int, jax.Array]] = []

  def add(self, step: int, sums: dict) -> None:
    """Takes the flag out of a step's sums (so the window sums hold metrics only)."""
    self._pending.append((step, sums.pop(FLAG)))

  def check(self) -> int:
    """Steps skipped since the last check; NonFiniteError naming the first bad step when not
    skipping. Fetches the pending flags (the only host sync, at points that sync anyway)."""
    if not self._pending:
      return 0
    steps = [s for s, _ in self._pending]
    flags = jax.device_get([f for _, f in self._pending])
    self._pending = []
    bad = [s for s, f in zip(steps, flags, strict=True) if float(np.asarray(f).ravel()[0]) > 0]
    if bad and not self.skip:
      raise NonFiniteError(
          f'non-finite loss or gradient norm at step {bad[0]}: stopped without saving that '
          'state (the last checkpoint is the last good one); lower train.learning_rate, check '
          'the data, or set train.skip_nonfinite=true to skip such steps')
    return len(bad)
