"""The modern encoder's fields (ModernBERT, NeoBERT): each test fails if its field is ignored."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.config_schema import MODERN_ARCHITECTURE
from encoder.errors import ConfigError
from encoder.modules.config import ModelConfig, model_config
from encoder.modules.heads import ClassificationHead
from encoder.modules.layers import init_stddev
from encoder.modules.rotary import apply_rope, rope_tables
from encoder.modules.transformer import Encoder, Mlp
from tests.modules.helpers import tiny_config

SEQ = 16


def _model(**fields):
  config = tiny_config(dropout_rate=0.0, attention_dropout_rate=0.0, max_position_embeddings=64,
                       **fields)
  model = Encoder(config)
  ids = jax.random.randint(jax.random.key(0), (2, SEQ), 5, config.vocab_size)
  return model, nn.unbox(model.init(jax.random.key(1), ids)), ids


def _out(model, variables, ids, **kw):
  return np.asarray(model.apply(variables, ids, **kw).sequence_output)


def _names(tree) -> set[str]:
  return {'/'.join(str(k.key) for k in path) for path, _ in
          jax.tree_util.tree_flatten_with_path(tree)[0]}


def test_rope_depends_on_relative_positions_only():
  """Shifting every position leaves a rotary model's outputs alone and a learned one's not;
  and RoPE does encode order: without it (`none`) a permutation just permutes the outputs."""
  shift = {'input_positions': jnp.arange(SEQ)[None] + 7}
  model, variables, ids = _model(position_embedding='rope')
  np.testing.assert_allclose(_out(model, variables, ids, **shift), _out(model, variables, ids),
                             atol=2e-5)
  learned, lv, _ = _model(position_embedding='learned')
  assert np.abs(_out(learned, lv, ids, **shift) - _out(learned, lv, ids)).max() > 1e-3
  permutation = np.random.default_rng(0).permutation(SEQ)
  for kind, equivariant in (('none', True), ('rope', False)):
    model, variables, _ = _model(position_embedding=kind)
    moved = _out(model, variables, ids[:, permutation])
    gap = np.abs(moved - _out(model, variables, ids)[:, permutation]).max()
    assert (gap < 1e-5) == equivariant, (kind, gap)


def test_rope_rotates_pairs_half_a_head_apart():
  """Against the rotation written out by hand: dims i and i + d/2 turn by p * theta^(-2i/d)."""
  d, theta, p = 8, 100.0, 3
  x = np.random.default_rng(0).standard_normal((1, 1, d)).astype(np.float32)
  cos, sin = rope_tables(jnp.array([[p]]), d, theta)
  got = np.asarray(apply_rope(jnp.asarray(x), cos, sin))[0, 0]
  want = np.empty(d, np.float32)
  for i in range(d // 2):
    angle = p * theta ** (-2 * i / d)
    a, b = x[0, 0, i], x[0, 0, i + d // 2]
    want[i], want[i + d // 2] = (a * math.cos(angle) - b * math.sin(angle),
                                 b * math.cos(angle) + a * math.sin(angle))
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('impl', ['explicit', 'xla'])
def test_a_local_layer_does_not_see_past_its_window_and_a_global_one_does(impl):
  """One layer: token 0 with a window of 8 (4 each side) sees tokens 1..4, not 5..; the same
  layer made global (local_window=0) sees them all."""
  for window, blind_from in ((8, 5), (0, None)):
    model, variables, ids = _model(num_layers=1, local_window=window, global_every=0,
                                   attention_impl=impl)
    base = _out(model, variables, ids)
    for j in range(1, SEQ):
      changed = ids.at[:, j].set((ids[:, j] + 11) % 90 + 5)
      moved = np.abs(_out(model, variables, changed) - base)[:, 0].max()
      assert (moved < 1e-6) == (blind_from is not None and j >= blind_from), (window, j, moved)


def test_global_every_counts_from_layer_zero_as_modernbert():
  cfg = tiny_config(num_layers=7, local_window=8, global_every=3)
  assert [cfg.is_local(i) for i in range(7)] == [False, True, True, False, True, True, False]
  assert not any(tiny_config(num_layers=3, local_window=0, global_every=3).is_local(i)
                 for i in range(3))
  # Two layers, both local (global_every=0) vs layer 0 global: token 0 sees 2 windows away only
  # through a global layer.
  far = SEQ - 1
  for every, sees_far in ((0, False), (2, True)):
    model, variables, ids = _model(num_layers=2, local_window=4, global_every=every)
    changed = ids.at[:, far].set((ids[:, far] + 11) % 90 + 5)
    moved = np.abs(_out(model, variables, changed) - _out(model, variables, ids))[:, 0].max()
    assert (moved > 1e-6) == sees_far, (every, moved)


def test_local_rope_theta_applies_to_local_layers_only():
  # Larger weights than BERT's 0.02, so attention is peaked enough for positions to matter.
  base = dict(position_embedding='rope', num_layers=2, local_window=6, global_every=2,
              initializer_range=0.3)
  model, variables, ids = _model(**base)
  out = _out(model, variables, ids)
  for field, changes in (('rope_theta', True), ('local_rope_theta', True)):
    other = Encoder(model.config.__class__(**{**model.config.__dict__, field: 50.0}))
    assert (np.abs(_out(other, variables, ids) - out).max() > 1e-4) == changes, field
  # With every layer global, the local theta is unused.
  model, variables, ids = _model(**{**base, 'local_window': 0})
  other = Encoder(model.config.__class__(**{**model.config.__dict__, 'local_rope_theta': 50.0}))
  np.testing.assert_array_equal(_out(other, variables, ids), _out(model, variables, ids))


def test_use_bias_false_makes_no_bias_anywhere_but_the_classifier():
  model, variables, ids = _model(use_bias=False, norm='pre')
  names = _names(variables['params'])
  assert not [n for n in names if n.endswith('/bias')], names
  head = ClassificationHead(model.config, 3)
  head_params = nn.unbox(head.init(jax.random.key(0), jnp.zeros((1, 32))))['params']
  assert _names(head_params) == {'dense/kernel', 'dense/bias'}  # ModernBERT keeps this one
  with_bias, bv, _ = _model(use_bias=True, norm='pre')
  assert len(jax.tree.leaves(bv)) > len(jax.tree.leaves(variables))


def test_embedding_norm_and_first_attention_norm_are_switches():
  _, on, _ = _model(norm='pre')
  _, off, _ = _model(norm='pre', embedding_norm=False, first_attention_norm=False)
  assert 'norm' in on['params']['embeddings'] and 'norm' not in off['params']['embeddings']
  assert 'attention_norm' in on['params']['layer_0']
  assert 'attention_norm' not in off['params']['layer_0']
  assert 'attention_norm' in off['params']['layer_1']  # only layer 0 goes without
  # Post-LN normalises after each sublayer: layer 0 keeps its norm whatever the switch says.
  _, post, _ = _model(norm='post', first_attention_norm=False)
  assert 'attention_norm' in post['params']['layer_0']


def test_swiglu_is_silu_gated_and_geglu_gelu_gated():
  x = jax.random.normal(jax.random.key(0), (2, 3, 32))
  for act, gate_fn in (('swiglu', jax.nn.silu), ('geglu', lambda v: jax.nn.gelu(v, False))):
    mlp = Mlp(tiny_config(activation=act))
    params = nn.unbox(mlp.init(jax.random.key(1), x))['params']
    p = jax.tree.map(np.asarray, params)
    hidden = gate_fn(x @ p['gate']['kernel'] + p['gate']['bias']) * (
        x @ p['intermediate']['kernel'] + p['intermediate']['bias'])
    want = hidden @ p['output']['kernel'] + p['output']['bias']
    np.testing.assert_allclose(mlp.apply({'params': params}, x), want, rtol=1e-5, atol=1e-5)


def _truncated_std(cutoff: float) -> float:
  """Deviation of a unit normal cut at +-cutoff (the textbook formula, not our code)."""
  phi = math.exp(-cutoff ** 2 / 2) / math.sqrt(2 * math.pi)
  mass = math.erf(cutoff / math.sqrt(2))
  return math.sqrt(1 - 2 * cutoff * phi / mass)


def test_modern_init_scales_output_layers_by_depth():
  layers, big = 4, dict(hidden_size=256, num_heads=4, intermediate_size=512)
  _, bert, _ = _model(init='bert', num_layers=layers, **big)
  _, modern, _ = _model(init='modern', init_cutoff=3.0, num_layers=layers, **big)
  expected_in = 0.02 * _truncated_std(3.0)
  expected_out = 0.02 / math.sqrt(2 * layers) * _truncated_std(3.0)
  layer = modern['params']['layer_1']
  for kernel, want in ((layer['attention']['query']['kernel'], expected_in),
                       (layer['mlp']['intermediate']['kernel'], expected_in),
                       (layer['attention']['out']['kernel'], expected_out),
                       (layer['mlp']['output']['kernel'], expected_out)):
    assert abs(float(np.std(kernel)) / want - 1) < 0.05, (np.std(kernel), want)
    assert np.abs(kernel).max() <= 3.0 * want / _truncated_std(3.0) + 1e-7
  bert_out = bert['params']['layer_1']['mlp']['output']['kernel']
  assert abs(float(np.std(bert_out)) / (0.02 * _truncated_std(2.0)) - 1) < 0.05
  cfg = tiny_config(init='modern')
  assert init_stddev(cfg, 'final') == cfg.hidden_size ** -0.5


def test_pooler_none_and_mean_pooling():
  model, variables, ids = _model(pooler='none', pooling='cls')
  out = model.apply(variables, ids)
  assert 'pooler' not in variables['params']
  np.testing.assert_array_equal(out.pooled_output, out.sequence_output[:, 0])
  model, variables, ids = _model(pooler='none', pooling='mean')
  mask = np.ones(ids.shape, np.int32)
  mask[0, 10:] = 0
  out = model.apply(variables, ids, input_mask=mask)
  want = (np.asarray(out.sequence_output) * mask[..., None]).sum(1) / mask.sum(1)[:, None]
  np.testing.assert_allclose(out.pooled_output, want, rtol=1e-5, atol=1e-6)
  _, tanh, _ = _model(pooler='tanh')
  assert 'pooler' in tanh['params']


def test_mlp_classifier_head_transforms_before_the_classifier():
  pooled = jax.random.normal(jax.random.key(0), (2, 32))
  cfg = tiny_config(classifier_head='mlp', use_bias=False)
  head = ClassificationHead(cfg, 3)
  params = nn.unbox(head.init(jax.random.key(1), pooled))['params']
  assert _names(params) == {'transform/kernel', 'transform_norm/scale', 'dense/kernel',
                            'dense/bias'}
  p = jax.tree.map(np.asarray, params)
  h = jax.nn.gelu(pooled @ p['transform']['kernel'], approximate=False)
  h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + cfg.layer_norm_eps)
  want = (h * p['transform_norm']['scale']) @ p['dense']['kernel'] + p['dense']['bias']
  np.testing.assert_allclose(head.apply({'params': params}, pooled), want, rtol=1e-4, atol=1e-5)


def test_no_segment_table_ignores_segment_ids():
  model, variables, ids = _model(type_vocab_size=0)
  assert 'segment_embeddings' not in variables['params']['embeddings']
  segments = jnp.ones_like(ids)
  np.testing.assert_array_equal(_out(model, variables, ids, segment_ids=segments),
                                _out(model, variables, ids))


def test_modern_presets_set_modernberts_architecture_and_explicit_fields_win():
  cfg = model_config({'size': 'modern_base'}, vocab_size=50368)
  assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.intermediate_size) == (
      22, 768, 12, 1152)
  for field, value in MODERN_ARCHITECTURE.items():
    assert getattr(cfg, field) == value, field
  large = model_config({'size': 'modern_large'}, vocab_size=50368)
  assert (large.num_layers, large.hidden_size, large.num_heads, large.intermediate_size) == (
      28, 1024, 16, 2624)
  mixed = model_config({'size': 'modern_mini', 'norm': 'post', 'local_window': None},
                       vocab_size=100)
  assert (mixed.norm, mixed.local_window, mixed.hidden_size) == ('post', 64, 256)
  bert = model_config({'size': 'base'}, vocab_size=100)
  assert (bert.norm, bert.position_embedding, bert.use_bias) == ('post', 'learned', True)


@pytest.mark.parametrize('fields, message', [
    ({'position_embedding': 'alibi'}, 'position_embedding'),
    ({'local_window': 7}, 'local_window'),
    ({'global_every': -1}, 'global_every'),
    ({'position_embedding': 'rope', 'hidden_size': 36, 'num_heads': 12}, 'even head size'),
    ({'pooling': 'max'}, 'pooling'),
])
def test_bad_modern_fields_are_config_errors(fields, message):
  with pytest.raises(ConfigError, match=message):
    ModelConfig(**fields)


@pytest.mark.parametrize('size, encoder_count', [
    # transformers 5.24's ModernBertModel(ModernBertConfig(...)) at ModernBERT-base's and
    # -large's shapes, vocabulary 50,368: sum(p.numel() for p in model.parameters()).
    ('modern_base', 149_014_272), ('modern_large', 394_781_696)])
def test_describe_counts_the_encoder_as_transformers_modernbertmodel(size, encoder_count):
  from encoder.describe import describe
  from encoder.tasks.pretraining import BertForPretraining
  cfg = model_config({'size': size}, vocab_size=50368)
  model = BertForPretraining(cfg, nsp=False)
  batch = {'input_ids': jnp.zeros((1, 8), jnp.int32), 'segment_ids': jnp.zeros((1, 8), jnp.int32),
           'input_mask': jnp.ones((1, 8), jnp.int32)}
  text = describe(model, batch)
  assert f'Encoder parameters: {encoder_count:,}' in text
  rows = text.split('\n', 1)[1]  # after the config's repr
  assert 'Heads: mlm ' in rows and 'pooler' not in rows and 'nsp' not in rows
