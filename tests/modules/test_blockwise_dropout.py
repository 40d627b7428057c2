"""Blockwise attention's dropout on every loop the kernel runs, checked by means that share
nothing with the kernel's own mask: finite differences of the dropped-out function under a
fixed key (`jax.test_util.check_grads`: the backward must drop what the forward dropped), and
the mean over many keys against the output without dropout (kept probabilities scaled by
1 / (1 - rate)), with the spread the rate implies. Rows of 37 positions in blocks of 8: a
global (or padded) row is one query block walking five tiles; causal, packed and wide-window
rows are query blocks walking several. And the Encoder in training mode through the blockwise
form, its local layer on the band (one tile a block)."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util
from jax.test_util import check_grads

from encoder.modules.attention_mask import AttentionMask
from encoder.modules.blockwise_attention import blockwise_attention
from encoder.modules.transformer import Encoder
from tests.modules.helpers import blockwise_walk, runs_forms, tiny_config
from tests.modules.test_blockwise_attention import explicit, inputs, make_mask, packed_ids

BLOCK, LENGTH, RATE = 8, 37, 0.3
# kind: (the walk it takes, the most tiles a query block visits). The band (a narrow window,
# one tile a block) is checked through the encoder below, whose local layer takes it.
WALKS = {'global': ('one query block', 5), 'padded': ('one query block', 5),
         'causal': ('query blocks', 5), 'packed': ('query blocks', 3),
         'wide window': ('query blocks', 4)}


def dropped(mask, key, rate=RATE):
  return jax.jit(functools.partial(blockwise_attention, mask=mask, block=BLOCK,
                                   dropout_rate=rate, dropout_rng=key))


@pytest.mark.parametrize('kind', WALKS)
def test_the_backward_drops_what_the_forward_dropped(kind):
  mask = make_mask(kind, 2, LENGTH, np.random.default_rng(1))
  assert blockwise_walk(mask, BLOCK) == WALKS[kind]
  # A fixed key makes the dropped-out attention a smooth function of q, k and v: its VJP
  # must match central differences (eps 3e-3: truncation and float32 rounding ~3e-4 here,
  # where a backward drawing another mask is off by 3 or more).
  check_grads(dropped(mask, jax.random.key(3)), inputs(2, LENGTH), order=1, modes=['rev'],
              eps=3e-3, atol=2e-3, rtol=2e-3)


def z_scores(samples, expected):
  """(mean - expected) / its standard error, per element, over the first axis; the error
  floored at float32's rounding (a causal row's first query has one key: its gradient is 0
  under every mask)."""
  samples = np.asarray(samples, np.float64)
  error = samples.std(axis=0) / np.sqrt(len(samples))
  return (samples.mean(axis=0) - np.asarray(expected, np.float64)) / np.maximum(error, 1e-5)


@pytest.mark.parametrize('kind', ['global', 'causal', 'packed', 'wide window'])
def test_over_many_keys_dropout_averages_to_the_attention_without_it(kind):
  mask = make_mask(kind, 2, LENGTH, np.random.default_rng(1))
  assert blockwise_walk(mask, BLOCK)[1] > 1  # several tiles, each with a mask of its own
  q, k, v = inputs(2, LENGTH, seed=4)
  real = np.asarray(mask.input_mask != 0)[:, :, None, None]
  weights = jnp.asarray(np.random.default_rng(5).normal(size=q.shape), jnp.float32) * real
  loss = lambda out: jnp.sum(out * weights)

  def one_key(key):
    out, pullback = jax.vjp(lambda *a: blockwise_attention(
        *a, mask, block=BLOCK, dropout_rate=RATE, dropout_rng=key), q, k, v)
    return out, pullback(weights)

  keys = jax.random.split(jax.random.key(5), 1000)
  outs, grads = jax.jit(jax.vmap(one_key))(keys)
  want = explicit(q, k, v, mask)
  want_grads = jax.grad(lambda *a: loss(explicit(*a, mask)), argnums=(0, 1, 2))(q, k, v)
  # The dropped output is unbiased: its mean over 1,000 keys is the output without dropout
  # within 5 standard errors at every real position (no scaling by 1 / (1 - rate) would be
  # ~50 off), and so are the gradients (the mask does not depend on q, k, v).
  z = z_scores(outs, want)[np.broadcast_to(real, want.shape)]
  assert np.abs(z).max() < 5 and 0.8 < (z**2).mean() < 1.2, (np.abs(z).max(), (z**2).mean())
  for got, expected in zip(grads, want_grads, strict=True):
    z = z_scores(got, expected)
    assert np.abs(z).max() < 5 and 0.8 < (z**2).mean() < 1.2
  # Its spread is the rate's: each kept probability p times v is scaled by 1 / (1 - r) and
  # dropped with chance r independently, so the variance is r / (1 - r) sum_k p^2 v^2
  # (0.43 for r = 0.3; a rate of 0.25 would give 0.33).
  scores = jnp.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(q.shape[-1])
  probs = jax.nn.softmax(jnp.where(mask.dense(), scores, jnp.finfo(jnp.float32).min), -1)
  variance = RATE / (1 - RATE) * np.einsum('bhqk,bkhd->bqhd', np.asarray(probs, np.float64)**2,
                                           np.asarray(v, np.float64)**2)
  ratio = (np.asarray(outs, np.float64).var(axis=0) * real).sum() / (variance * real).sum()
  assert abs(ratio - 1) < 0.05, ratio


def test_the_encoder_trains_through_the_blockwise_form():
  # ModernBERT's layout in small (rotary positions, a local layer of window 6 beside a global
  # one, packed rows) in training mode, hidden and attention dropout on: rows of 30 in blocks
  # of 8 take the blockwise form in both kinds of layer (a train step keeps the explicit form
  # up to one block), the local one its band.
  cfg = tiny_config(position_embedding='rope', local_window=6, global_every=2, norm='pre',
                    use_bias=False, type_vocab_size=0, max_position_embeddings=64,
                    attention_impl='blockwise', attention_block_size=8, dropout_rate=0.1,
                    attention_dropout_rate=0.2)
  rng = np.random.default_rng(6)
  seg = packed_ids(2, 30, rng)
  ids = jnp.asarray(rng.integers(5, 97, (2, 30)), jnp.int32)
  batch = dict(input_mask=jnp.asarray(seg > 0, jnp.int32), input_segmentation=jnp.asarray(seg))
  real = jnp.asarray(seg > 0)[..., None]
  local = AttentionMask(batch['input_mask'], batch['input_segmentation'], window=6)
  assert blockwise_walk(local, 8) == ('band', 1)
  variables = nn.meta.unbox(Encoder(cfg).init(jax.random.key(0), ids, None, **batch))
  # The gradient with respect to Q, K and V's kernels (what reaches them passes through the
  # attention's backward) is the dropped-out function's, by finite differences under fixed
  # keys: 2.24 both ways here, 0.12 from a backward drawing another mask.
  flat = traverse_util.flatten_dict(variables)
  qkv = {path: kernel for path, kernel in flat.items()
         if path[-3] == 'attention' and path[-2] in ('query', 'key', 'value')}

  @jax.jit
  def loss(kernels, key):
    params = traverse_util.unflatten_dict({**flat, **kernels})
    out = Encoder(cfg).apply(params, ids, None, **batch, deterministic=False,
                             rngs={'dropout': key}).sequence_output
    return jnp.sum(jnp.sin(out) * real)

  with runs_forms(global_='blockwise', local='blockwise'):
    check_grads(lambda kernels: loss(kernels, jax.random.key(9)), (qkv,), order=1,
                modes=['rev'], eps=3e-3, atol=2e-3, rtol=2e-3)
  assert float(loss(qkv, jax.random.key(9))) != float(loss(qkv, jax.random.key(10)))
