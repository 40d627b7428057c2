"""Replaced-token detection's pieces: sampling, corruption, the three embedding sharings, the
loss and metrics, the delta's fold, and the task trained through the trainer."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder import configs
from encoder.checkpoint_files import fold_embedding_delta
from encoder.errors import ConfigError
from encoder.modules.config import model_config
from encoder.modules.electra import (
    ElectraForPretraining,
    corrupt,
    eval_sample_key,
    generator_config,
    sample_tokens,
)
from encoder.modules.transformer import Encoder
from encoder.tasks import electra, get_task

VOCAB = 300


def _configs(**model):
  cfg = model_config({'size': 'tiny', 'vocab_size': VOCAB, 'max_position_embeddings': 64,
                      'embedding_size': 64, 'dropout_rate': 0.0,
                      'attention_dropout_rate': 0.0, **model}, platform='cpu')
  return cfg, generator_config(cfg, 0.25)


def _batch(seed=0, b=4, s=16, p=4):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, VOCAB, (b, s)).astype(np.int32)
  positions = np.stack([np.sort(rng.choice(np.arange(1, s), p, replace=False)) for _ in range(b)])
  weights = np.ones((b, p), np.float32)
  weights[0, -1] = 0.0  # a padding slot
  masked_ids = np.take_along_axis(ids, positions, 1)
  corrupted = ids.copy()
  np.put_along_axis(corrupted, positions, 4, 1)  # [MASK]
  mask = np.ones((b, s), np.int32)
  mask[1, -3:] = 0
  return {'input_ids': jnp.asarray(corrupted), 'segment_ids': jnp.zeros((b, s), jnp.int32),
          'input_mask': jnp.asarray(mask), 'masked_positions': jnp.asarray(positions, jnp.int32),
          'masked_ids': jnp.asarray(masked_ids), 'masked_weights': jnp.asarray(weights)}


def test_generator_config_takes_a_fraction_of_width_heads_and_mlp():
  small = model_config({'size': 'mini', 'num_layers': 12, 'embedding_size': 128,
                        'vocab_size': 100}, platform='cpu')
  gen = generator_config(small, 0.25)  # ELECTRA-Small's generator: 64 wide, 1 head, MLP 256
  assert (gen.num_layers, gen.hidden_size, gen.num_heads, gen.intermediate_size,
          gen.embedding_width, gen.pooler) == (12, 64, 1, 256, 128, 'none')
  base = model_config({'size': 'base', 'vocab_size': 100}, platform='cpu')
  gen = generator_config(base, 1 / 3)  # ELECTRA-Base's: 256, 4 heads, 1,024
  assert (gen.hidden_size, gen.num_heads, gen.intermediate_size, gen.embedding_width) == (
      256, 4, 1024, 768)
  rope = model_config({'size': 'tiny', 'position_embedding': 'rope', 'vocab_size': 100},
                      platform='cpu')
  assert generator_config(rope, 1 / 3).head_dim % 2 == 0  # 42.7 rounds to an even 42
  with pytest.raises(ConfigError, match='generator_size=0.0'):
    generator_config(base, 0.0)


def test_a_sample_equal_to_the_original_counts_as_original():
  ids = jnp.asarray([[2, 4, 4, 4, 3, 0]])  # [CLS] three [MASK]s [SEP] [PAD]
  positions, originals = jnp.asarray([[1, 2, 3, 0]]), jnp.asarray([[7, 8, 9, 0]])
  weights = jnp.asarray([[1.0, 1.0, 1.0, 0.0]])
  sampled = jnp.asarray([[7, 5, 9, 6]])  # right, wrong, right; the padding slot's sample 6
  corrupted, replaced = corrupt(ids, positions, originals, weights, sampled)
  np.testing.assert_array_equal(corrupted, [[2, 7, 5, 9, 3, 0]])  # slot 3 wrote nothing at 0
  np.testing.assert_array_equal(replaced, [[False, False, True, False, False, False]])


def test_sampling_follows_the_softmax():
  probs = np.array([0.5, 0.3, 0.15, 0.05] + [0.0] * 200)
  logits = jnp.log(jnp.asarray(probs) + 1e-30)
  draws = jax.jit(jax.vmap(sample_tokens, (0, None)))(jax.random.split(jax.random.key(0),
                                                                     40_000), logits)
  freq = np.bincount(np.asarray(draws), minlength=len(probs)) / len(draws)
  np.testing.assert_allclose(freq[:4], probs[:4], atol=0.01)  # 4+ deviations of each
  assert freq[4:].sum() == 0  # zero mass is never drawn
  assert jax.grad(lambda x: sample_tokens(jax.random.key(1), x).sum().astype(float))(
      jnp.ones(10)).sum() == 0


def test_evaluation_samples_repeat_per_batch_and_differ_between_batches():
  """An evaluation batch draws the same replacements at every evaluation (comparable steps),
  and two batches do not share one set of uniforms (independent held-out draws)."""
  rows = jnp.asarray(np.random.default_rng(0).integers(5, 100, (2, 4, 16)), jnp.int32)
  same = [jax.random.key_data(eval_sample_key(rows[0])) for _ in range(2)]
  np.testing.assert_array_equal(same[0], same[1])
  logits = jnp.zeros((4, 8, 1000))  # uniform over the vocabulary: the draw shows the key
  first, second = (np.asarray(sample_tokens(eval_sample_key(r), logits)) for r in rows)
  assert (first != second).mean() > 0.9
  swapped = rows[0][::-1]  # the same rows in another order: another batch
  assert not np.array_equal(np.asarray(sample_tokens(eval_sample_key(swapped), logits)), first)


@functools.cache
def _grads(sharing):
  """(the parameters, the gradients of the discriminator's loss, those of the generator's),
  unboxed: both gradients in one compiled function per sharing, shared by the tests."""
  cfg, gen = _configs()
  model = ElectraForPretraining(cfg, gen, sharing)
  batch = _batch()
  params = nn.unbox(model.init(jax.random.key(0), batch)['params'])

  def term(p, name):
    outputs = model.apply({'params': p}, batch)
    return electra.loss_and_metrics(outputs, batch, discriminator_weight=50.0)[1][name]
  both = jax.jit(lambda p: (jax.grad(term)(p, 'disc_loss'), jax.grad(term)(p, 'gen_mlm_loss')))
  return (params, *both(params))


def _norm(tree) -> float:
  return float(sum(jnp.abs(x).sum() for x in jax.tree.leaves(tree)))


@pytest.mark.parametrize('sharing', ['shared', 'disentangled', 'none'])
def test_no_gradient_reaches_the_generator_through_its_samples(sharing):
  """The discriminator's loss reads the generator's samples, never its logits: the generator's
  own layers and head get nothing from it, where they get the MLM loss's gradient."""
  _, disc, gen = _grads(sharing)
  for group in ('generator_mlm', 'generator'):
    own = {k: v for k, v in disc[group].items() if k != 'embeddings'}
    assert _norm(own) == 0.0 and _norm(gen[group]) > 0
  assert _norm(gen['encoder']['layer_0']) == 0.0 and _norm(disc['encoder']['layer_0']) > 0


def test_sharing_modes_route_each_loss_to_its_embeddings():
  words = ('embeddings', 'word_embeddings', 'embedding')

  def at(tree, path):
    for key in path:
      tree = tree[key]
    return _norm(tree)
  # shared: one table, both losses train it; the generator has no embeddings of its own.
  params, disc, gen = _grads('shared')
  assert 'embeddings' not in params['generator']
  assert at(disc['encoder'], words) > 0 and at(gen['encoder'], words) > 0
  # disentangled: the generator's loss alone moves the shared table; the discriminator's
  # moves its delta (zero at the start), which the generator never reads.
  params, disc, gen = _grads('disentangled')
  assert _norm(params['word_embedding_delta']) == 0.0
  assert at(disc['encoder'], words) == 0.0 and _norm(disc['word_embedding_delta']) > 0
  assert at(gen['encoder'], words) > 0 and _norm(gen['word_embedding_delta']) == 0.0
  # none: two embedding blocks, each trained by its own model's loss alone.
  params, disc, gen = _grads('none')
  assert params['generator']['embeddings']['word_embeddings']['embedding'].shape == (VOCAB, 64)
  assert at(disc['generator'], words) == 0.0 and at(gen['generator'], words) > 0
  assert at(gen['encoder'], words) == 0.0 and at(disc['encoder'], words) > 0


def test_the_folded_delta_is_the_table_the_discriminator_read():
  cfg, gen = _configs()
  model = ElectraForPretraining(cfg, gen, 'disentangled')
  batch = _batch()
  params = nn.unbox(model.init(jax.random.key(0), batch)['params'])
  params['word_embedding_delta'] = 0.1 * jax.random.normal(jax.random.key(1), (VOCAB, 64))
  params = jax.tree.map(np.asarray, params)
  folded = fold_embedding_delta(params)
  assert 'word_embedding_delta' not in folded
  ids = np.asarray(batch['input_ids'])
  encoder = Encoder(cfg)
  want = encoder.apply({'params': params['encoder']}, ids,
                       word_delta=params['word_embedding_delta']).sequence_output
  got = encoder.apply({'params': folded['encoder']}, ids).sequence_output
  np.testing.assert_allclose(got, want, atol=1e-5)
  # The generator keeps the shared table it trained on.
  np.testing.assert_array_equal(folded['generator']['embeddings']['word_embeddings']['embedding'],
                                params['encoder']['embeddings']['word_embeddings']['embedding'])
  assert fold_embedding_delta(folded) is folded  # nothing more to fold


def test_loss_and_metrics_against_numpy():
  rng = np.random.default_rng(3)
  b, s, p, v = 3, 6, 2, 5
  mask = np.ones((b, s), np.float32)
  mask[2, 4:] = 0
  replaced = rng.random((b, s)) < 0.3
  rtd = rng.normal(size=(b, s)).astype(np.float32)
  mlm = rng.normal(size=(b, p, v)).astype(np.float32)
  ids = rng.integers(0, v, (b, p))
  weights = np.array([[1, 1], [1, 0], [1, 1]], np.float32)
  batch = {'input_mask': jnp.asarray(mask), 'masked_ids': jnp.asarray(ids),
           'masked_weights': jnp.asarray(weights)}
  outputs = {'mlm_logits': jnp.asarray(mlm), 'rtd_logits': jnp.asarray(rtd),
             'replaced': jnp.asarray(replaced)}
  loss, sums = electra.loss_and_metrics(outputs, batch, discriminator_weight=50.0)
  metrics = electra.reduce_metrics(sums, discriminator_weight=50.0)
  # Independent numpy: log-softmax cross-entropy, logistic loss, counts over real tokens.
  logp = mlm - np.log(np.exp(mlm).sum(-1, keepdims=True))
  xent = -np.take_along_axis(logp, ids[..., None], -1)[..., 0]
  gen_loss = (xent * weights).sum() / weights.sum()
  real, label = mask.astype(bool), replaced & mask.astype(bool)
  bce = np.log1p(np.exp(-np.abs(rtd))) + np.maximum(rtd, 0) - rtd * label
  disc_loss = bce[real].mean()
  pred = rtd > 0
  assert float(loss) == pytest.approx(gen_loss + 50 * disc_loss, rel=1e-5)
  expected = {'gen_mlm_loss': gen_loss,
              'gen_mlm_accuracy': ((mlm.argmax(-1) == ids) * weights).sum() / weights.sum(),
              'disc_loss': disc_loss, 'disc_accuracy': (pred == label)[real].mean(),
              'disc_precision': (pred & label)[real].sum() / pred[real].sum(),
              'disc_recall': (pred & label)[real].sum() / label[real].sum(),
              'replaced_fraction': label[real].mean(), 'loss': gen_loss + 50 * disc_loss}
  for name, value in expected.items():
    assert metrics[name] == pytest.approx(value, rel=1e-5), name


def test_electra_settings_are_refused_in_one_line():
  c = configs.load_experiment('electra_small:smoke')
  c.electra.embedding_sharing = 'tied'
  with pytest.raises(ConfigError, match="embedding_sharing='tied' is not one of shared"):
    get_task('electra', c)
  c = configs.load_experiment('electra_small:smoke')
  c.data.nsp = True
  with pytest.raises(ConfigError, match='ELECTRA has no next-sentence head'):
    get_task('electra', c)


def test_electra_small_smoke_trains_with_its_metrics(tmp_path, corpus, cache_dir):
  from tests.train.test_trainer import train
  metrics = train(tmp_path / 'w', corpus, cache_dir, 'train.num_steps=2', 'train.eval_every=2',
                  exp='electra_small:smoke')
  for name in ('gen_mlm_accuracy', 'disc_accuracy', 'disc_precision', 'disc_recall',
               'replaced_fraction'):
    assert 0 <= metrics[name] <= 1, name
  assert 0 < metrics['replaced_fraction'] < 0.2 and metrics['loss'] > 0


@pytest.mark.slow
def test_modern_packed_mesh_bfloat16_electra_trains(tmp_path, corpus, cache_dir):
  """ELECTRA on a modern encoder (rotary, pre-LN, GeGLU, local layers), rows packed from
  documents, the mesh strategy over 8 devices, bfloat16, a wall-clock budget, GDES."""
  from tests.train.test_trainer import train
  metrics = train(tmp_path / 'w', corpus, cache_dir, 'train.num_steps=2', 'train.eval_every=2',
                  'model.size=modern_tiny', 'model.local_window=16', 'model.embedding_size=0',
                  'data.packing=documents', 'parallel.strategy=mesh', 'model.dtype=bfloat16',
                  'train.max_minutes=5', 'electra.embedding_sharing=disentangled',
                  exp='electra_small:smoke')
  assert np.isfinite(metrics['loss']) and 0 <= metrics['disc_accuracy'] <= 1


def test_step_flops_count_both_encoders_and_heads_from_the_parameter_shapes():
  """`electra_flops` against a count from ElectraForPretraining's own kernels (embedding
  projections left out): 6 x kernel size x the rows each kernel sees (every token for the
  encoders and the discriminator's head, one a row for the pooler, the masked positions for
  the generator's MLM head, whose dense maps to the embedding
  width and decodes through the tied table), plus attention's 12 d B T^2 a layer."""
  from encoder.modules.flops import electra_flops
  cfg, gen = _configs()
  shapes = jax.eval_shape(lambda: nn.unbox(ElectraForPretraining(cfg, gen).init(
      jax.random.key(0), _batch()))['params'])
  batch, seq, preds = 3, 16, 4
  want = 0
  for path, leaf in jax.tree_util.tree_flatten_with_path(shapes)[0]:
    name = jax.tree_util.keystr(path)
    if path[-1].key != 'kernel' or 'embedding_projection' in name:
      continue
    rows = (batch * preds if name.startswith("['generator_mlm']") else
            batch if 'pooler' in name else batch * seq)
    want += 6 * int(np.prod(leaf.shape)) * rows
  want += 6 * cfg.embedding_width * VOCAB * batch * preds  # the tied decoder
  want += sum(12 * c.hidden_size * batch * seq * seq * c.num_layers for c in (cfg, gen))
  assert electra_flops(cfg, gen, batch, seq, preds) == pytest.approx(want)
