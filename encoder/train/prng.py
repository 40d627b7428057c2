"""The PRNG behind dropout (`train.rng_impl`): which of JAX's implementations draws the masks.

  threefry    JAX's default (threefry2x32): counter-based, the same bits on every backend, but
              dozens of integer operations per 32 random bits, which accelerators pay for on
              every dropout mask (jax issues 15895 and 16792 measure it)
  rbg         XLA's RngBitGenerator for the bits (the hardware generator on TPU), threefry still
              for splitting and folding keys, which stay cheap (one key, not a mask)
  unsafe_rbg  RngBitGenerator for the bits and for folding keys too (t5x trains with it)

The choice changes which dropout masks are drawn, never what the model computes. A run's masks
are a function of (train.seed, step, device index), so a resumed run draws the masks the
uninterrupted one would have, whichever the choice: the checkpoint keeps the same threefry root
key for all three (`steps.dropout_key` derives the step's key from it). RngBitGenerator's bits
are not promised to be the same across backends or compiler versions (JAX's rbg source says
so), so a run resumed on another kind of machine or another jax under rbg or unsafe_rbg
continues with other masks; threefry's do not change.

Jax-free: the config is checked (`check`) before JAX starts.
"""

from __future__ import annotations

from encoder.errors import ConfigError

# train.rng_impl -> the name JAX gives the implementation (`jax.random.key(..., impl=...)`).
IMPLS = {'threefry': 'threefry2x32', 'rbg': 'rbg', 'unsafe_rbg': 'unsafe_rbg'}
DEFAULT = 'threefry'


def check(train) -> str:
  """`train.rng_impl`, refused in one line unless it is one of IMPLS."""
  value = train.get('rng_impl', DEFAULT)
  if value not in IMPLS:
    raise ConfigError(f"train.rng_impl='{value}' is not one of {', '.join(IMPLS)}")
  return value
