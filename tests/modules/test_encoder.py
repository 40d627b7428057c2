"""Behaviour of the encoder: who sees whom, padding, dtypes, the two attention paths."""

import functools
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.errors import ConfigError
from encoder.modules.attention import _Projection
from encoder.modules.config import attention_impl, model_config
from encoder.modules.layers import kernel_init
from tests.modules.helpers import init_encoder, random_inputs, tiny_config


def outputs(model, variables, ids, segments, mask, **kw):
  return model.apply(variables, ids, segments, mask, **kw).sequence_output


@pytest.mark.parametrize('norm', ['post', 'pre'])
def test_bidirectional_sees_the_right_context_and_causal_does_not(norm):
  for attention in ('bidirectional', 'causal'):
    model, variables = init_encoder(tiny_config(attention=attention, norm=norm))
    ids, segments, mask = random_inputs()
    base = outputs(model, variables, ids, segments, mask)
    for j in range(1, ids.shape[1]):
      changed = ids.at[:, j].set((ids[:, j] + 7) % 90 + 5)
      out = outputs(model, variables, changed, segments, mask)
      moved = np.abs(np.asarray(out - base)).max(axis=-1)[:, :j]  # positions i < j
      if attention == 'bidirectional':
        assert (moved > 1e-5).all(), (j, moved)
      else:
        np.testing.assert_array_equal(moved, 0.0)


@pytest.mark.parametrize('attention', ['bidirectional', 'causal'])
def test_padded_tokens_do_not_change_real_positions(attention):
  model, variables = init_encoder(tiny_config(attention=attention))
  ids, segments, _ = random_inputs()
  mask = jnp.array([[1] * 5 + [0] * 3, [1] * 8])
  base = model.apply(variables, ids, segments, mask)
  garbage = jnp.where(mask == 1, ids, (ids * 3) % 90 + 5)
  garbage_segments = jnp.where(mask == 1, segments, 1 - segments)
  out = model.apply(variables, garbage, garbage_segments, mask)
  real = np.asarray(mask, bool)
  np.testing.assert_allclose(np.asarray(out.sequence_output)[real],
                             np.asarray(base.sequence_output)[real], atol=1e-6)
  np.testing.assert_allclose(out.pooled_output, base.pooled_output, atol=1e-6)
  assert np.abs(np.asarray(out.sequence_output - base.sequence_output))[~real].max() > 1e-4


PADDED = jnp.array([[1] * 6 + [0] * 2, [1] * 8])


@pytest.mark.parametrize('attention', ['bidirectional', 'causal'])
@pytest.mark.parametrize('dtype,tol', [('float32', 1e-5), ('bfloat16', 3e-2)])
def test_explicit_and_xla_attention_agree_in_values_and_gradients(attention, dtype, tol):
  explicit, variables = init_encoder(tiny_config(attention=attention, dtype=dtype))
  xla, _ = init_encoder(tiny_config(attention=attention, dtype=dtype, attention_impl='xla'))
  ids, segments, _ = random_inputs()
  real = PADDED[..., None].astype(jnp.float32)  # padding positions' outputs are never read

  def loss(model, variables):
    out = model.apply(variables, ids, segments, PADDED).sequence_output.astype(jnp.float32)
    return jnp.sum(jnp.sin(out) * real)

  values = {name: jax.jit(jax.value_and_grad(functools.partial(loss, model)))(variables)
            for name, model in (('explicit', explicit), ('xla', xla))}
  np.testing.assert_allclose(values['xla'][0], values['explicit'][0], rtol=tol, atol=tol)
  scale = max(float(jnp.abs(g).max()) for g in jax.tree.leaves(values['explicit'][1]))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=tol * scale),
               values['xla'][1], values['explicit'][1])


def test_attention_impl_picks_the_path_without_asking_the_backend(monkeypatch):
  calls = []
  original = jax.nn.dot_product_attention
  monkeypatch.setattr(jax.nn, 'dot_product_attention',
                      lambda *a, **k: calls.append(k.get('implementation')) or original(*a, **k))
  monkeypatch.setattr(jax, 'default_backend', lambda: pytest.fail('backend asked in a module'))
  ids, segments, _ = random_inputs()
  for impl, probs, expected in (('xla', False, ['xla', 'xla']), ('explicit', False, []),
                                ('xla', True, [])):  # probabilities need the explicit form
    model, variables = init_encoder(tiny_config(attention_impl=impl))
    calls.clear()
    model.apply(variables, ids, segments, PADDED, return_probs=probs)
    assert calls == expected, (impl, probs)


def test_cudnn_gets_padding_as_key_lengths_and_means_what_explicit_means(monkeypatch):
  # cuDNN is not on this machine: the call is taken over by XLA's, after recording what cuDNN
  # would be handed (right-padded rows as key lengths, causal as a flag, no mask).
  seen = []
  original = jax.nn.dot_product_attention

  def as_cudnn_would_get_it(query, key, value, *, is_causal, key_value_seq_lengths,
                            implementation):
    seen.append((tuple(np.asarray(key_value_seq_lengths)), is_causal, implementation))
    return original(query, key, value, is_causal=is_causal,
                    key_value_seq_lengths=key_value_seq_lengths, implementation='xla')

  monkeypatch.setattr(jax.nn, 'dot_product_attention', as_cudnn_would_get_it)
  ids, segments, _ = random_inputs()
  for attention in ('bidirectional', 'causal'):
    explicit, variables = init_encoder(tiny_config(attention=attention, dtype='bfloat16'))
    cudnn, _ = init_encoder(tiny_config(attention=attention, attention_impl='cudnn',
                                        dtype='bfloat16'))
    seen.clear()
    got = cudnn.apply(variables, ids, segments, PADDED).sequence_output
    assert seen == [((6, 8), attention == 'causal', 'cudnn')] * 2
    want = explicit.apply(variables, ids, segments, PADDED).sequence_output
    real = np.asarray(PADDED, bool)
    np.testing.assert_allclose(np.asarray(got, np.float32)[real],
                               np.asarray(want, np.float32)[real], atol=5e-2)


def test_output_projection_keeps_dense_generals_parameters():
  # Checkpoints and the Hugging Face mapping name `attention/out/{kernel,bias}` as
  # nn.DenseGeneral made them; the hand-made projection must give the same initial values.
  cfg = tiny_config()
  model, variables = init_encoder(cfg)
  ours = nn.unbox(variables['params']['layer_0']['attention']['out'])
  dense = nn.DenseGeneral(cfg.hidden_size, axis=(-2, -1), kernel_init=kernel_init(
      cfg, ('heads', 'kv', 'embed')))
  key = jax.random.fold_in(jax.random.key(0), 0)
  made = dense.init(key, jnp.zeros((1, 1, cfg.num_heads, cfg.head_dim)))['params']
  assert jax.tree.map(jnp.shape, nn.unbox(made)) == jax.tree.map(jnp.shape, ours)
  mine = _Projection(cfg, into_heads=False).init(key)['params']
  np.testing.assert_array_equal(nn.unbox(mine)['kernel'], nn.unbox(made)['kernel'])


def test_cudnn_is_refused_off_an_nvidia_gpu():
  with pytest.raises(ConfigError, match='needs an NVIDIA GPU'):
    attention_impl('cudnn', 'cpu', 'bfloat16', 0.0)
  assert attention_impl('cudnn', 'gpu', 'bfloat16', 0.0) == 'cudnn'
  assert attention_impl('auto', 'rocm', 'bfloat16', 0.0) == 'blockwise'


@pytest.mark.parametrize('platform,dtype,dropout,expected', [
    ('cpu', 'bfloat16', 0.0, 'blockwise'), ('cpu', 'float32', 0.1, 'blockwise'),
    ('tpu', 'float32', 0.1, 'splash'), ('gpu', 'bfloat16', 0.0, 'cudnn'),
    ('cuda', 'bfloat16', 0.0, 'cudnn'), ('gpu', 'float32', 0.1, 'cudnn')])
def test_auto_attention_impl_follows_the_platform(platform, dtype, dropout, expected):
  # Dropout and dtype are read per layer (attention.layer_form), not here.
  assert attention_impl('auto', platform, dtype, dropout) == expected
  assert attention_impl('xla', platform, dtype, dropout) == 'xla'  # an explicit choice stays
  cfg = model_config({'size': 'tiny', 'vocab_size': 64, 'dtype': dtype,
                      'attention_dropout_rate': dropout}, platform=platform)
  assert cfg.attention_impl == expected


def test_explicit_probs_are_masked():
  model, variables = init_encoder(tiny_config())
  ids, segments, _ = random_inputs()
  explicit = model.apply(variables, ids, segments, PADDED, return_probs=True)
  assert len(explicit.attention_probs) == 2
  probs = np.asarray(explicit.attention_probs[0])
  assert probs.shape == (2, 4, 8, 8)
  np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)
  np.testing.assert_array_equal(probs[0, :, :, 6:], 0.0)


def test_causal_probs_are_lower_triangular():
  model, variables = init_encoder(tiny_config(attention='causal'))
  out = model.apply(variables, *random_inputs(), return_probs=True)
  probs = np.asarray(out.attention_probs[1])
  assert np.abs(np.triu(probs, k=1)).max() == 0.0


def test_dropout_is_active_only_when_not_deterministic():
  model, variables = init_encoder(tiny_config())
  inputs = random_inputs()
  a = outputs(model, variables, *inputs)
  b = outputs(model, variables, *inputs)
  np.testing.assert_array_equal(a, b)
  rngs = lambda seed: {'dropout': jax.random.key(seed)}
  c = outputs(model, variables, *inputs, deterministic=False, rngs=rngs(0))
  d = outputs(model, variables, *inputs, deterministic=False, rngs=rngs(1))
  assert np.abs(np.asarray(c - d)).max() > 1e-3


@pytest.mark.parametrize('overrides', [{}, {'norm': 'pre'}, {'activation': 'geglu'}])
def test_bfloat16_compute_matches_float32(overrides):
  model32, variables = init_encoder(tiny_config(**overrides))
  model16, _ = init_encoder(tiny_config(dtype='bfloat16', **overrides))
  inputs = random_inputs()
  out32 = model32.apply(variables, *inputs)
  out16 = model16.apply(variables, *inputs)
  assert out16.sequence_output.dtype == jnp.bfloat16
  # Post-LN outputs are unit-scale; bfloat16 has an 8-bit mantissa (relative step 2^-8 = 0.004)
  # and two layers of rounding accumulate to a few hundredths at most.
  np.testing.assert_allclose(np.asarray(out16.sequence_output, np.float32),
                             out32.sequence_output, atol=0.06)
  assert jax.tree.leaves(variables)[0].dtype == jnp.float32


def test_parameters_have_logical_axis_names_and_bert_init():
  import flax.linen as nn
  model, variables = init_encoder(tiny_config(vocab_size=2000, hidden_size=128,
                                              intermediate_size=512))
  boxed = jax.tree.leaves(variables, is_leaf=lambda x: isinstance(x, nn.Partitioned))
  assert boxed and all(isinstance(b, nn.Partitioned) for b in boxed)
  assert all(len(b.names) == b.value.ndim for b in boxed)
  params = nn.unbox(variables)['params']
  table = np.asarray(params['embeddings']['word_embeddings']['embedding'])
  assert 0.017 < table.std() < 0.023 and np.abs(table).max() <= 2 * 0.02 + 1e-6
  query = params['layer_0']['attention']['query']
  np.testing.assert_array_equal(query['bias'], 0.0)
  np.testing.assert_array_equal(params['layer_0']['attention_norm']['scale'], 1.0)


def test_pre_ln_adds_a_final_norm_and_sequence_limit_is_enforced():
  _, variables = init_encoder(tiny_config(norm='pre'))
  assert 'final_norm' in variables['params']
  model, variables = init_encoder(tiny_config())
  assert 'final_norm' not in variables['params']
  with pytest.raises(ValueError, match='max_position_embeddings'):
    model.apply(variables, *random_inputs(seq=17))


def test_importing_the_package_does_no_heavy_work():
  code = ('import sys, encoder; heavy = {"jax", "flax", "tensorflow_datasets", "orbax"}; '
          'print(sorted(heavy & set(sys.modules)))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == '[]'


def test_remat_recomputes_the_same_values_and_gradients_dropout_included():
  ids, segments, _ = random_inputs()
  models = {remat: init_encoder(tiny_config(remat=remat))[0] for remat in (False, True)}
  _, variables = init_encoder(tiny_config())

  def loss(model, params):
    out = model.apply(params, ids, segments, PADDED, deterministic=False,
                      rngs={'dropout': jax.random.key(3)}).sequence_output
    return jnp.sum(jnp.sin(out) * PADDED[..., None])

  plain = jax.jit(jax.value_and_grad(functools.partial(loss, models[False])))(variables)
  remat = jax.jit(jax.value_and_grad(functools.partial(loss, models[True])))(variables)
  np.testing.assert_allclose(remat[0], plain[0], rtol=1e-6)
  # The same dropout masks: only the order of some sums differs (fused otherwise).
  scale = max(float(jnp.abs(g).max()) for g in jax.tree.leaves(plain[1]))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6 * scale), remat[1],
               plain[1])
  for remat, model in models.items():  # the blocks really are rematerialised, or not
    jaxpr = str(jax.make_jaxpr(jax.grad(functools.partial(loss, model)))(variables))
    assert ('checkpoint' in jaxpr or 'remat' in jaxpr) == remat
