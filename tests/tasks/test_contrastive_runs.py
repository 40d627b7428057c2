"""Contrastive training steps: in-batch negatives gathered across devices (1 device == 8), the
cached-gradient accumulation (GradCache) equal to the whole batch at once, runs of every data
layout, and an exact resume."""

import json
import os

import jax
import numpy as np
import pytest

import encoder
from encoder import configs
from encoder.errors import ConfigError, DataError
from encoder.tasks import get_task
from encoder.train.optim import make_optimizer
from encoder.train.resolve import resolve_config
from encoder.train.strategy import OneDeviceStrategy, PmapStrategy
from encoder.train.trainer import train_and_evaluate


def _config(*overrides):
  config = configs.load_experiment('embed_nli:smoke')
  configs.apply_overrides(config, ['model.dropout_rate=0.0', 'model.attention_dropout_rate=0.0',
                                   'data.max_seq_length=16', 'train.batch_size=16',
                                   'contrastive.loss=mnrl', 'train.num_steps=10',
                                   'train.warmup_steps=1', 'train.learning_rate=1e-3',
                                   *overrides])
  config = resolve_config(config)
  config.model.vocab_size = config.data.vocab_size
  return config


def _batches(config, num=3, k=1, seed=0):
  """Random token batches with real variety: lengths, filler rows, absent negatives, and two
  examples of one anchor."""
  rng = np.random.default_rng(seed)
  b, seq = config.train.batch_size, config.data.max_seq_length

  def texts(*shape):
    lengths = rng.integers(3, seq + 1, shape)
    mask = (np.arange(seq) < lengths[..., None]).astype(np.int32)
    return rng.integers(5, config.data.vocab_size, (*shape, seq)).astype(np.int32) * mask, mask

  out = []
  for _ in range(num):
    batch = {}
    for role, shape in (('anchor', (b,)), ('positive', (b,)), ('negative', (b, k))):
      batch[f'{role}_ids'], batch[f'{role}_mask'] = texts(*shape)
    batch['negative_mask'][1, 0] = 0
    batch['negative_ids'][1, 0] = 0
    batch['group'] = np.arange(b, dtype=np.int32)
    batch['group'][5] = batch['group'][2]
    batch['score'] = rng.uniform(0, 5, b).astype(np.float32)
    batch['weight'] = np.ones(b, np.float32)
    batch['weight'][-1] = 0.0
    out.append(batch)
  return out


def _train(config, strategy, batches, accum=1):
  task = get_task(config.task, config)
  model, tx = task.build_model(config), make_optimizer(config.train)
  state = strategy.init_state(model, tx, task.dummy_batch(config), seed=0)
  train, _ = strategy.steps(model, task, tx, accum)
  losses = []
  for batch in batches:
    state, sums = train(state, strategy.place_batch(batch))
    losses.append(task.reduce_metrics(strategy.sum_metrics([sums]))['loss'])
  return losses, jax.tree.map(np.asarray, strategy.to_checkpoint(state).params)


# CoSENT is slow (~50 s on 2 cores: three compiles): its gathered loss is checked the same way.
@pytest.mark.parametrize('loss', ['mnrl', pytest.param('cosent', marks=pytest.mark.slow)])
def test_one_device_equals_eight_and_gradcache_equals_the_whole_batch(loss):
  """The global batch is the negative pool: the same losses and updates on 1 device and on 8
  (each holding 2 of the 16 rows), and with the batch in 2 cached microbatches."""
  assert jax.device_count() == 8
  config = _config(f'contrastive.loss={loss}', 'contrastive.symmetric=true')
  batches = _batches(config)
  one, one_params = _train(config, OneDeviceStrategy(), batches)
  eight, eight_params = _train(config, PmapStrategy(), batches)
  cached, cached_params = _train(config, PmapStrategy(), batches, accum=2)
  assert one[-1] < one[0] - 1e-3  # the steps learn: equal losses are not equal constants
  np.testing.assert_allclose(eight, one, rtol=1e-5)
  np.testing.assert_allclose(cached, one, rtol=1e-5)
  for other in (eight_params, cached_params):
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                 other, one_params)


def test_summed_microbatches_would_differ_so_gradcache_is_what_matches():
  """The check above has teeth: a plain mean over microbatches (each its own negative pool)
  gives another loss for the same batch."""
  from encoder.tasks import contrastive
  config = _config()
  task = get_task(config.task, config)
  model = task.build_model(config)
  batch = _batches(config, num=1)[0]
  params = jax.jit(model.init)(jax.random.key(0), task.dummy_batch(config))['params']
  denominators = contrastive.loss_denominators(batch)
  loss = jax.jit(lambda b: task.loss_and_metrics(model.apply({'params': params}, b), b,
                                                 denominators)[0])
  halves = [{k: v[i::2] for k, v in batch.items()} for i in range(2)]
  whole, split = float(loss(batch)), sum(float(loss(h)) for h in halves)
  assert abs(whole - split) > 1e-3


# Slow (9-20 s each on 2 cores): the layouts' readers are tested in
# tests/data/finetune/test_text_pairs.py, and the NLI triplets train in the device test above.
@pytest.mark.slow
@pytest.mark.parametrize('experiment', ['embed_nli', 'embed_stsb', 'embed_beir'])
def test_each_layout_trains_and_is_judged(tmp_path, experiment):
  """Triplets (JSONL), scored pairs (TSV, CoSENT: loss chosen from the data), BEIR folders:
  a smoke run trains, evaluates whole eval sets, and the run embeds with `encoder.load`."""
  config = configs.load_experiment(f'{experiment}:smoke')
  configs.apply_overrides(config, ['train.num_steps=2', 'train.eval_every=2'])
  metrics = train_and_evaluate(config, str(tmp_path))
  saved = json.loads((tmp_path / 'config.json').read_text())
  expected = {'embed_stsb': ('cosent', 'spearman'), 'embed_nli': ('mnrl', 'mrr@10'),
              'embed_beir': ('mnrl', 'mrr@10')}[experiment]
  assert saved['contrastive']['loss'] == expected[0]
  assert expected[1] in metrics and np.isfinite(metrics[expected[1]])
  vectors = encoder.load(str(tmp_path)).embed(['a river by the castle', 'a tiger'])
  assert vectors.shape[0] == 2 and np.all(np.isfinite(vectors))


def test_bad_settings_and_data_fail_in_one_line(tmp_path):
  with pytest.raises(ConfigError, match='contrastive.loss'):
    get_task('contrastive', _config('contrastive.loss=triplet'))
  with pytest.raises(ConfigError, match='data.packing'):
    get_task('contrastive', _config('data.packing=examples'))
  bad = tmp_path / 'pairs.jsonl'
  bad.write_text('{"query": "a", "doc": "b"}\n')
  config = configs.load_experiment('embed_nli:smoke')
  configs.apply_overrides(config, [f'data.train={bad}', f'data.eval={bad}'])
  with pytest.raises(DataError, match='anchor/positive'):
    train_and_evaluate(config, str(tmp_path / 'run'))
  assert not os.path.exists(tmp_path / 'run' / 'checkpoints')


# Slow (three short runs, ~40 s on 2 cores).
@pytest.mark.slow
def test_a_stopped_embedding_run_resumes_to_the_uninterrupted_one(tmp_path):
  """Dropout on, a stop in the middle: the resumed run ends on the same parameters."""
  def run(workdir, *overrides):
    config = configs.load_experiment('embed_nli:smoke')
    configs.apply_overrides(config, ['train.num_steps=4', 'train.checkpoint_every=100',
                                     *overrides])
    return train_and_evaluate(config, str(workdir))

  straight = run(tmp_path / 'straight')
  run(tmp_path / 'resumed', 'train.stop_at_step=2')
  assert run(tmp_path / 'resumed') == straight
  a, b = (encoder.load(str(tmp_path / w)).params for w in ('straight', 'resumed'))
  jax.tree.map(np.testing.assert_array_equal, a, b)
