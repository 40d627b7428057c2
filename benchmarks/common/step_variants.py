"""The variants `benchmarks.step_profile` runs our fine-tuning step under: dropout on or off,
the PRNG behind the dropout masks, the attention implementation, the strategy, and code
changes patched in for one variant alone (`PATCHES`), undone after it (`variant_context`).
There are no patches at present: the two the profile recommended (jit on one device, Q/K/V
taken apart by a split) are in `encoder/` now.

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
}
DEFAULT_VARIANTS = 'recipe,rbg,unsafe_rbg,mesh,no_dropout,xla_attention'


PATCHES: dict = {}  # name -> a function that patches the code and returns its undo


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
