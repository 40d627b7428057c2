"""Self-attention alone (scores, softmax, dropout, context; forward and backward), by kernel,
with a check of what each one's dropout drops (benchmarks/gpu_step.py).

Why alone: the model's attention (encoder/modules/attention.py) takes dropout only on its
explicit path; JAX's public `jax.nn.dot_product_attention` has no dropout, and cuDNN's fused
kernel takes a dropout rate only through JAX's internal API
(`jax._src.cudnn.fused_attention_stablehlo.dot_product_attention`, as maxtext calls it). This
measures what that kernel would buy BERT's recipe before any module depends on an internal API.

Kernels (`KERNELS`): `explicit` (the model's training form: bfloat16 products, float32 softmax,
a Bernoulli mask from jax.random), `xla` and `cudnn` (`jax.nn.dot_product_attention`, no
dropout: the ceiling a fused kernel reaches), `cudnn_dropout` (the internal API, with dropout).

The dropout check (`dropout_check`) recovers the mask itself: with all-zero queries and keys
every probability is 1/T, and with values one-hot over the keys (head size T) each output is
keep / (T (1 - rate)), so the output is the mask. It reports the dropped fraction of the
probability mass (the rate, if right), its spread over rows (independent keys: sqrt(r (1-r) /
T)), whether kept weights are scaled by 1 / (1 - rate), whether two calls draw different masks
(cuDNN's seed is fixed at compile time; XLA moves its offset on each run), and whether the
backward pass used the forward's mask (the value gradient, with an all-ones output gradient, is
the column sums of the scaled mask).
"""

from __future__ import annotations

import inspect
import math
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np


class Unavailable(RuntimeError):
  """This kernel cannot run here (no cuDNN, or a jax without the internal API)."""


def explicit(rate: float):
  """The model's explicit training attention on [b, t, n, h] operands; a key per call."""
  def attend(q, k, v, key):
    scores = jnp.einsum('btnh,bsnh->bnts', q, k) / jnp.sqrt(q.shape[-1]).astype(q.dtype)
    probs = jax.nn.softmax(scores.astype(jnp.float32), axis=-1)
    if rate:
      keep = jax.random.bernoulli(key, 1.0 - rate, probs.shape)
      probs = jnp.where(keep, probs / (1.0 - rate), 0.0)
    return jnp.einsum('bnts,bsnh->btnh', probs.astype(q.dtype), v)
  return attend


def public(implementation: str):
  """`jax.nn.dot_product_attention` (no dropout) with this implementation."""
  def attend(q, k, v, key):
    del key
    return jax.nn.dot_product_attention(q, k, v, implementation=implementation)
  return attend


def cudnn_with_dropout(rate: float):
  """cuDNN's fused attention with dropout through JAX's internal API; Unavailable when this
  jax lacks it or takes no dropout rate there, or when cuDNN is not on this machine."""
  try:
    from jax._src.cudnn import fused_attention_stablehlo as fused
  except ImportError as e:
    raise Unavailable(f'no jax._src.cudnn.fused_attention_stablehlo in jax {jax.__version__}: '
                      f'{e}') from e
  call = getattr(fused, 'dot_product_attention', None)
  if call is None or 'dropout_rate' not in inspect.signature(call).parameters:
    raise Unavailable(f'jax {jax.__version__}: its internal cuDNN attention takes no '
                      'dropout_rate')
  try:
    fused.check_cudnn_version()
  except Exception as e:  # noqa: BLE001 - whatever says "no cuDNN" here
    raise Unavailable(f'cuDNN is not available on {jax.default_backend()}: {e}') from e

  def attend(q, k, v, key):
    del key  # cuDNN draws from its own seed and offset
    return call(q, k, v, scale=1.0 / math.sqrt(q.shape[-1]), dropout_rate=rate,
                qkv_layout='BTNH')
  return attend


KERNELS = {
    'explicit': explicit,
    'xla': lambda rate: public('xla'),
    'cudnn': lambda rate: public('cudnn'),
    'cudnn_dropout': cudnn_with_dropout,
}
DROPS = {'explicit': True, 'xla': False, 'cudnn': False, 'cudnn_dropout': True}


def fwd_bwd(attend):
  """One jitted call: the output and the gradients of q, k, v for an all-ones cotangent."""
  def run(q, k, v, key):
    out, pullback = jax.vjp(lambda q, k, v: attend(q, k, v, key), q, k, v)
    return out, pullback(jnp.ones_like(out))
  return jax.jit(run)


def time_ms(attend, shape: tuple[int, int, int, int], repeats: int,
            dtype=jnp.bfloat16) -> float:
  """Median ms of a forward + backward pass on random [b, t, n, h] operands."""
  keys = jax.random.split(jax.random.key(0), 4)
  q, k, v = (jax.random.normal(key, shape, dtype) for key in keys[:3])
  run = fwd_bwd(attend)
  jax.block_until_ready(run(q, k, v, keys[3]))
  times = []
  for i in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(run(q, k, v, jax.random.fold_in(keys[3], i)))
    times.append((time.perf_counter() - start) * 1e3)
  return statistics.median(times)


def dropout_check(attend, rate: float, batch: int = 16, heads: int = 12, length: int = 64,
                  dtype=jnp.bfloat16) -> dict:
  """The mask an attention kernel drew, recovered and judged (see the module docstring)."""
  shape = (batch, length, heads, length)  # head size = keys: values one-hot over the keys
  q = k = jnp.zeros(shape, dtype)
  v = jnp.broadcast_to(jnp.eye(length, dtype=dtype)[None, :, None, :], shape)
  run = fwd_bwd(attend)
  key = jax.random.key(1)
  (out, (_, _, dv)), (again, _) = run(q, k, v, key), run(q, k, v, jax.random.fold_in(key, 1))
  unit = 1.0 / (length * (1.0 - rate))  # a kept weight, scaled
  out, again = np.asarray(out, np.float32), np.asarray(again, np.float32)
  kept = out > unit / 2  # [b, query, n, key]
  dropped_rows = 1.0 - kept.mean(axis=-1)
  expected_dv = kept.sum(axis=1).transpose(0, 2, 1) * unit  # [b, key, n]: the mask's column sums
  dv_error = np.abs(np.asarray(dv, np.float32)[..., 0] - expected_dv).max() / (length * unit)
  expected_spread = math.sqrt(rate * (1 - rate) / length)
  result = {
      'rate': rate, 'dropped_fraction': round(float(1.0 - kept.mean()), 5),
      'row_spread': round(float(dropped_rows.std()), 5),
      'expected_row_spread': round(expected_spread, 5),
      'kept_scale_error': round(float(np.abs(out[kept] / unit - 1.0).max()), 4) if kept.any()
      else None,
      'masks_differ_across_calls': round(float((kept != (again > unit / 2)).mean()), 4),
      'backward_mask_error': round(float(dv_error), 4)}
  result['pass'] = bool(
      abs(result['dropped_fraction'] - rate) < 0.005
      and abs(result['row_spread'] - expected_spread) <= 0.3 * expected_spread + 1e-3
      and (result['kept_scale_error'] or 0.0) < 0.03 and result['backward_mask_error'] < 0.03
      and (rate == 0 or result['masks_differ_across_calls'] > 0.5 * 2 * rate * (1 - rate)))
  return result


def measure(name: str, rate: float, shape: tuple[int, int, int, int], repeats: int) -> dict:
  """One kernel's JSON line: its forward + backward ms at `shape`, and for a kernel that drops
  out, its dropout check; `error` where it cannot run here."""
  row = {'variant': f'attention:{name}', 'shape': list(shape), 'dropout': rate if DROPS[name]
         else 0.0, 'platform': jax.default_backend()}
  try:
    attend = KERNELS[name](rate)
    row['fwd_bwd_ms'] = round(time_ms(attend, shape, repeats), 3)
    if DROPS[name]:
      row['dropout_check'] = dropout_check(attend, rate)
  except Exception as e:  # noqa: BLE001 - reported as the line's error, the run goes on
    row['error'] = f'{type(e).__name__}: {str(e).splitlines()[0][:300]}' if str(e) else \
        type(e).__name__
  return row
