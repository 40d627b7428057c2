"""Pallas's splash kernel (TPU), run on this CPU in Pallas's interpret mode, equals the explicit
form on the masks it is fed (padding and packed rows as segment ids, a two-sided local window,
causal), values and gradients, on rows of several kernel blocks (so it skips the blocks a
window or causal mask leaves empty, and accumulates across the others) and batches of two;
the Encoder runs it in its layers; and `layer_form` hands it only what it takes."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.modules.attention import layer_form
from encoder.modules.attention_mask import AttentionMask
from encoder.modules.config import model_config
from encoder.modules.splash_attention import kernel_blocks, splash_attention
from encoder.modules.transformer import Encoder
from tests.modules.helpers import runs_forms, tiny_config
from tests.modules.test_blockwise_attention import explicit, loss_and_grads, packed_ids

# Splash works in blocks of 128 positions: 300 of them pad to 384, three blocks of 128 (the
# largest of 512, 256, 128 that divides them); a window of 40 leaves the corner blocks empty.
BATCH, LENGTH, HEADS, HEAD_DIM = 2, 300, 2, 64


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
  assert kernel_blocks(LENGTH) == (384, 128)  # three blocks a row, not one
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


def test_the_encoder_runs_splash_in_its_global_and_local_layers():
  # Two heads of 64 (splash's least), a local layer of window 40 beside a global one, packed
  # rows of 300: the model built with splash (in interpret mode here) runs it in both kinds
  # of layer and gives the explicit form's outputs and gradients.
  base = dict(hidden_size=128, num_heads=2, intermediate_size=128, position_embedding='rope',
              local_window=40, global_every=2, type_vocab_size=0, max_position_embeddings=512,
              dropout_rate=0.0, attention_dropout_rate=0.0)
  rng = np.random.default_rng(3)
  seg = packed_ids(BATCH, LENGTH, rng, tail=10)
  ids = jnp.asarray(rng.integers(5, 97, (BATCH, LENGTH)), jnp.int32)
  batch = dict(input_mask=jnp.asarray(seg > 0, jnp.int32), input_segmentation=jnp.asarray(seg))
  real = jnp.asarray(seg > 0)[..., None]
  explicit_cfg = tiny_config(**base, attention_impl='explicit')
  variables = Encoder(explicit_cfg).init(jax.random.key(0), ids, None, **batch)

  def loss(cfg, params):
    out = Encoder(cfg).apply(params, ids, None, **batch).sequence_output
    return jnp.sum(jnp.sin(out) * real)

  splash = tiny_config(**base, attention_impl='splash', pallas_interpret=True)
  with runs_forms(global_='splash', local='splash'):
    got = jax.jit(jax.value_and_grad(functools.partial(loss, splash)))(variables)
  want = jax.jit(jax.value_and_grad(functools.partial(loss, explicit_cfg)))(variables)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
  # Gradients summed over 600 tokens reach 240: float32 rounds them at 1e-4.
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5), got[1],
               want[1])


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
