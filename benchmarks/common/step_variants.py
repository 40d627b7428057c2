"""The variants `benchmarks.step_profile` runs our fine-tuning step under: dropout on or off,
the PRNG behind the dropout masks, the attention implementation, the strategy, and code
changes patched in for one variant alone (`PATCHES`), undone after it (`variant_context`).

A variant is (description, dropout rate, jax_default_prng_impl or None, config overrides,
patches).
"""

from __future__ import annotations

import contextlib

VARIANTS = {
    'recipe': ('dropout 0.1 (the recipe), threefry2x32', 0.1, None, (), ()),
    'rbg': ('dropout 0.1, jax_default_prng_impl=rbg', 0.1, 'rbg', (), ()),
    'unsafe_rbg': ('dropout 0.1, jax_default_prng_impl=unsafe_rbg', 0.1, 'unsafe_rbg', (), ()),
    'no_dropout': ('dropout 0', 0.0, None, (), ()),
    'xla_attention': ('dropout 0, model.attention_impl=xla', 0.0, None,
                      ('model.attention_impl=xla',), ()),
    'mesh': ('dropout 0.1, parallel.strategy=mesh', 0.1, None, ('parallel.strategy=mesh',), ()),
    'pmap_no_psum': ('dropout 0.1, pmap without the gradient psum (patched)', 0.1, None, (),
                     ('no_psum',)),
    'split_qkv': ('dropout 0.1, Q/K/V split with jnp.split (patched)', 0.1, None, (),
                  ('split_qkv',)),
    'mesh_split': ('dropout 0.1, mesh + jnp.split', 0.1, None, ('parallel.strategy=mesh',),
                   ('split_qkv',)),
    'mesh_split_no_dropout': ('dropout 0, mesh + jnp.split', 0.0, None,
                              ('parallel.strategy=mesh',), ('split_qkv',)),
}
DEFAULT_VARIANTS = ('recipe,rbg,unsafe_rbg,split_qkv,mesh,mesh_split,no_dropout,xla_attention,'
                    'mesh_split_no_dropout')


def split_qkv_attention_class():
  """`SelfAttention` (its explicit path) with Q, K and V taken apart by `jnp.split` rather
  than by unpacking: the transpose of an unpack is three pads of the [3, b, h, s, d]
  gradient and two adds, that of a split one concatenate. Same parameters, same values."""
  import flax.linen as nn
  import jax
  import jax.numpy as jnp

  from encoder.modules import attention as attn

  class SplitQkvAttention(attn.SelfAttention):
    @nn.compact
    def __call__(self, x, mask, *, deterministic=True, return_probs=False):
      cfg = self.config
      dtype = attn.compute_dtype(cfg)
      params = [attn._Projection(cfg, name=name)() for name in ('query', 'key', 'value')]
      kernel = jnp.stack([k for k, _ in params], axis=1).astype(dtype)  # [m, 3, h, d]
      bias = jnp.stack([b for _, b in params]).astype(dtype)
      qkv = attn.matmul.dot_general(x.astype(dtype), kernel, (((2,), (0,)), ((), ()))) + bias
      query, key, value = (t[0] for t in jnp.split(qkv.transpose(2, 0, 3, 1, 4), 3, axis=0))
      scores = jnp.einsum('bhqd,bhkd->bhqk', query, key) / jnp.sqrt(cfg.head_dim).astype(dtype)
      scores = jnp.where(mask, scores.astype(jnp.float32), jnp.finfo(jnp.float32).min)
      probs = jax.nn.softmax(scores, axis=-1)
      dropped = nn.Dropout(cfg.attention_dropout_rate)(probs, deterministic=deterministic)
      context = jnp.einsum('bhqk,bhkd->bqhd', dropped.astype(dtype), value)
      out_kernel, out_bias = attn._Projection(cfg, into_heads=False, name='out')()
      out = attn.matmul.dot_general(context, out_kernel.astype(dtype),
                                    (((2, 3), (0, 1)), ((), ())))
      return out + out_bias.astype(dtype), probs if return_probs else None

  return SplitQkvAttention


def patch_split_qkv():
  """The encoder block builds `SplitQkvAttention` (as `attention`, as before) until undone."""
  from encoder.modules import transformer
  original = transformer.SelfAttention
  transformer.SelfAttention = split_qkv_attention_class()
  return lambda: setattr(transformer, 'SelfAttention', original)


def patch_no_psum():
  """The step sums nothing over devices (right on one device only: a check of what the
  one-device pmap's all-reduce costs)."""
  from encoder.train import steps
  original = steps._sum_over_devices
  steps._sum_over_devices = lambda tree, axis_name: tree
  return lambda: setattr(steps, '_sum_over_devices', original)


PATCHES = {'split_qkv': patch_split_qkv, 'no_psum': patch_no_psum}


@contextlib.contextmanager
def variant_context(prng: str | None, patches: tuple[str, ...]):
  import jax
  before = jax.config.jax_default_prng_impl
  undo = [PATCHES[name]() for name in patches]
  if prng:
    jax.config.update('jax_default_prng_impl', prng)
  try:
    yield
  finally:
    jax.config.update('jax_default_prng_impl', before)
    for u in reversed(undo):
      u()
