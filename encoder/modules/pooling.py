"""One vector per text from its tokens' outputs, the one definition every head and `embed` use.

`mean` averages a text's real tokens ([CLS] and [SEP] included), `cls` takes its first token,
`last` its last real token: sentence-transformers' pooling modes, and `model.pooling`'s (cls |
mean) for the classification head. A packed row holds several texts: `segmentation` gives each
token's slot (1, 2, ...; 0 = padding) and `positions` [b, e] the token each slot is read at
(its first for `cls`, its last for `last`; `mean` reads the segmentation).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

POOLINGS = ('mean', 'cls', 'last')


def pool(x: jax.Array, input_mask: jax.Array, pooling: str,
         segmentation: jax.Array | None = None, positions: jax.Array | None = None
         ) -> jax.Array:
  """[..., m] per text from x [..., s, m] (or [b, e, m] per packed slot, given `positions`).
  The mean's sum runs at full precision: a TF32 or bfloat16 pass would blur it on GPUs."""
  if positions is not None and pooling != 'mean':
    return jnp.take_along_axis(x, positions[..., None].astype(jnp.int32), axis=-2)
  if pooling == 'cls':
    return x[..., 0, :]
  if pooling == 'last':
    last = jnp.maximum(input_mask.sum(-1) - 1, 0).astype(jnp.int32)
    return jnp.take_along_axis(x, last[..., None, None], axis=-2)[..., 0, :]
  if positions is None:
    weights = input_mask.astype(x.dtype)[..., None, :]  # [..., 1, s]
  else:  # slot j's tokens carry segmentation id j + 1
    slots = jnp.arange(1, positions.shape[-1] + 1)
    weights = (segmentation[:, None, :] == slots[None, :, None]).astype(x.dtype)  # [b, e, s]
  summed = jnp.einsum('...es,...sm->...em', weights, x, precision=jax.lax.Precision.HIGHEST)
  mean = summed / jnp.maximum(weights.sum(-1, keepdims=True), 1)
  return mean[..., 0, :] if positions is None else mean
