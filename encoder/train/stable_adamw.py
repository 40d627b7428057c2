"""StableAdamW's scaling: Adam whose step on each tensor shrinks when the gradient outgrows the
second moment (Wortsman et al., 2023, "Stable and low-precision training for large-scale
vision-language models", Algorithm 2; ModernBERT trains with it).

Why: a loss spike starts when a tensor's gradient suddenly exceeds what Adam's second moment
has seen, so `g / sqrt(v)` and with it the step are much larger than 1 x lr. The paper measures
this per tensor as RMS_t = sqrt(mean(g_t^2 / max(v_t, eps^2))) (v_t the bias-corrected second
moment, g_t included) and divides the tensor's learning rate by max(1, RMS_t): AdaFactor's
update clipping, without AdaFactor. In steady training RMS_t stays below 1 and the step is
AdamW's.

Built from optax: `optax.scale_by_adam` does the moments and bias correction; this wraps it to
rescale each tensor's update by the clipping factor, read off the state Adam just updated. The
weight decay and the learning rate come after it in the chain (optim.make_optimizer), so the
decay is AdamW's, unclipped, as in the paper's update.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def scale_by_stable_adam(b1: float = 0.9, b2: float = 0.999,
                         eps: float = 1e-6) -> optax.GradientTransformation:
  """Adam's bias-corrected m / (sqrt(v) + eps), divided per tensor by max(1, RMS_t)."""
  adam = optax.scale_by_adam(b1=b1, b2=b2, eps=eps)

  def update(grads, state, params=None):
    updates, state = adam.update(grads, state, params)
    correction = 1.0 - jnp.asarray(b2, jnp.float32) ** state.count.astype(jnp.float32)

    def clip(update, grad, nu):
      v_hat = nu / correction.astype(nu.dtype)
      rms = jnp.sqrt(jnp.mean(jnp.square(grad) / jnp.maximum(v_hat, eps ** 2)))
      return update / jnp.maximum(1.0, rms).astype(update.dtype)

    return jax.tree.map(clip, updates, grads, state.nu), state

  return optax.GradientTransformation(adam.init, update)

