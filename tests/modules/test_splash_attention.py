"""Pallas's splash kernel (TPU), run on this CPU in Pallas's interpret mode, equals the explicit
form on the masks it is fed (padding and packed rows as segment ids, a two-sided local window,
causal), values and gradients; and `layer_form` hands it only what it takes."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.modules.attention import layer_form
from encoder.modules.attention_mask import AttentionMask
from encoder.modules.config import model_config
from encoder.modules.splash_attention import splash_attention
from tests.modules.test_blockwise_attention import explicit, loss_and_grads, packed_ids

# Splash works in blocks of 128 positions: 200 of them pad to two blocks.
BATCH, LENGTH, HEADS, HEAD_DIM = 1, 200, 2, 64


def make_mask(kind, rng):
  causal, window = 'causal' in kind, 40 if 'window' in kind else 0
  if 'packed' in kind:
    seg = packed_ids(BATCH, LENGTH, rng, tail=10)
    return AttentionMask(jnp.asarray(seg > 0, jnp.int32), jnp.asarray(seg), causal=causal,
                         window=window)
  real = np.ones((BATCH, LENGTH), np.int32)
  real[:, LENGTH - 30:] = 0
  return AttentionMask(jnp.asarray(real), causal=causal, window=window)


def check(kind):
  rng = np.random.default_rng(0)
  mask = make_mask(kind, rng)
  q, k, v = (jnp.asarray(rng.normal(size=(BATCH, LENGTH, HEADS, HEAD_DIM)), jnp.float32)
             for _ in range(3))
  real = (mask.input_mask != 0)[:, :, None, None]
  weights = jnp.asarray(rng.normal(size=q.shape), jnp.float32) * real
  ours = functools.partial(splash_attention, mask=mask, interpret=True)
  got_value, got_grads = loss_and_grads(ours, q, k, v, weights)
  want_value, want_grads = loss_and_grads(functools.partial(explicit, mask=mask), q, k, v,
                                          weights)
  np.testing.assert_allclose(got_value, want_value, rtol=1e-5)
  for got, want in zip(got_grads, want_grads, strict=True):
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize('kind', ['padded', 'padded causal', 'padded window', 'packed',
                                  'packed window', 'packed causal window'])
def test_every_mask_equals_the_explicit_form(kind):
  check(kind)


def test_splash_runs_where_it_takes_the_layer_and_blockwise_elsewhere():
  cfg = model_config({'size': 'modern_mini', 'vocab_size': 64, 'attention_impl': 'splash'},
                     platform='tpu')
  assert cfg.attention_impl == 'splash' and not cfg.pallas_interpret
  long = AttentionMask(jnp.ones((1, 512), jnp.int32))
  assert layer_form(cfg, long, dropout=False, probs=False) == 'splash'
  assert layer_form(cfg, long.with_window(64), dropout=False, probs=False) == 'splash'
  assert layer_form(cfg, long, dropout=True, probs=False) == 'blockwise'  # no dropout in it
  assert layer_form(cfg, long, dropout=False, probs=True) == 'explicit'  # nor probabilities
  small_heads = model_config({'size': 'tiny', 'vocab_size': 64, 'attention_impl': 'splash'},
                             platform='tpu')  # 2 heads of 64: taken; MiniLM's 32: not
  assert layer_form(small_heads, long, dropout=False, probs=False) == 'splash'
  minilm = model_config({'size': 'tiny', 'num_heads': 4, 'vocab_size': 64,
                         'attention_impl': 'splash'}, platform='tpu')
  assert layer_form(minilm, long, dropout=False, probs=False) == 'blockwise'
  off_tpu = model_config({'size': 'tiny', 'vocab_size': 64, 'attention_impl': 'splash'},
                         platform='cpu')
  assert off_tpu.pallas_interpret  # exact and slow: how this file checks it
  assert jax.default_backend() == 'cpu'
