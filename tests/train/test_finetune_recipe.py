"""The fine-tuning recipe's knobs: layer-wise learning-rate decay, re-initialised top layers
and standardised regression targets, each checked against what it is defined to do."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder import configs
from encoder.convert import from_hf
from encoder.errors import ConfigError, DataError
from encoder.tasks import classification, get_task
from encoder.train import checkpoint, run_setup
from encoder.train.optim import layer_depth, make_optimizer
from encoder.train.resolve import resolve_config
from tests.golden.smoke import GOLDEN
from tests.train.test_optim import train_config


def _tree(value: float) -> dict:
  leaf = {'kernel': jnp.full((2, 2), value), 'bias': jnp.full((2,), value)}
  return {'encoder': {'embeddings': {'word': {'embedding': jnp.full((3, 2), value)}},
                      'layer_0': {'dense': dict(leaf)}, 'layer_1': {'dense': dict(leaf)},
                      'layer_2': {'dense': dict(leaf)}, 'pooler': dict(leaf)},
          'classifier': {'dense': dict(leaf)}}


def test_layer_depth_counts_as_electra():
  assert layer_depth(['encoder', 'embeddings', 'norm', 'scale'], 12) == 0
  assert layer_depth(['encoder', 'layer_0', 'mlp', 'kernel'], 12) == 1
  assert layer_depth(['encoder', 'layer_11', 'mlp', 'kernel'], 12) == 12
  assert layer_depth(['encoder', 'pooler', 'kernel'], 12) == 13
  assert layer_depth(['classifier', 'dense', 'kernel'], 12) == 13


@pytest.mark.parametrize('optimizer', ['adamw', 'lamb', 'stable_adamw'])
def test_layer_decay_scales_each_layers_step_by_its_depth(optimizer):
  """The decayed step of every leaf is decay ** (layers + 1 - depth) times the plain one
  (weight decay included): 3 layers, decay 0.5 -> embeddings x1/16, layer_0 x1/8, layer_2
  x1/2, pooler and head x1."""
  params, grads = _tree(1.0), jax.tree.map(lambda x: x * 0.3, _tree(1.0))
  grads['encoder']['layer_1']['dense']['kernel'] = jnp.array([[0.1, -2.0], [0.0, 5.0]])

  def step(decay):
    tx = make_optimizer(train_config(optimizer=optimizer, layer_decay=decay, warmup_steps=0,
                                     schedule='constant'))
    state = tx.init(params)
    for _ in range(2):  # the second step reads the optimizer state the first one wrote
      updates, state = tx.update(grads, state, params)
    return updates

  plain, decayed = step(1.0), step(0.5)
  expected = {'embeddings': 1 / 16, 'layer_0': 1 / 8, 'layer_1': 1 / 4, 'layer_2': 1 / 2,
              'pooler': 1.0}
  for name, factor in expected.items():
    for p, d in zip(jax.tree.leaves(plain['encoder'][name]),
                    jax.tree.leaves(decayed['encoder'][name]), strict=True):
      np.testing.assert_allclose(d, factor * p, rtol=1e-6)
      assert np.abs(p).max() > 0
  for p, d in zip(jax.tree.leaves(plain['classifier']), jax.tree.leaves(decayed['classifier']),
                  strict=True):
    np.testing.assert_allclose(d, p, rtol=1e-6)


def test_layer_decay_out_of_range_is_refused():
  with pytest.raises(ConfigError, match='layer_decay'):
    make_optimizer(train_config(layer_decay=1.5))


def test_reinitialise_top_layers_takes_them_and_the_pooler_fresh():
  loaded, fresh = _tree(1.0), _tree(2.0)
  params, names = checkpoint.reinitialise_top_layers(loaded, fresh, 2)
  assert names == ['encoder/layer_1', 'encoder/layer_2', 'encoder/pooler']
  value = {k: float(jax.tree.leaves(v)[0].ravel()[0]) for k, v in params['encoder'].items()}
  assert value == {'embeddings': 1.0, 'layer_0': 1.0, 'layer_1': 2.0, 'layer_2': 2.0,
                   'pooler': 2.0}
  assert float(params['classifier']['dense']['kernel'][0, 0]) == 1.0
  assert checkpoint.reinitialise_top_layers(loaded, fresh, 0) == (loaded, [])
  with pytest.raises(ConfigError, match='reinit_layers=4 exceeds the 3 layers'):
    checkpoint.reinitialise_top_layers(loaded, fresh, 4)


def test_a_run_with_reinit_layers_starts_its_top_layer_fresh(tmp_path):
  """Through the trainer's set-up: init_from's weights everywhere but the top layer and the
  pooler, which are the run's own fresh initialisation."""
  init = str(tmp_path / 'tiny')
  from_hf(os.path.join(GOLDEN, 'tiny_bert'), init)
  config = configs.load_experiment('classify_sst2:smoke')
  configs.apply_overrides(config, [f'init_from={init}', 'train.reinit_layers=1'])
  run = run_setup.setup_train_loop(resolve_config(config), str(tmp_path / 'run'))
  ours = jax.tree.map(np.asarray, run.strategy.to_checkpoint(run.state).params)['encoder']
  theirs = checkpoint.load_params(init)['encoder']
  assert sorted(k for k in ours if k.startswith('layer_')) == ['layer_0', 'layer_1']
  for name in ('embeddings', 'layer_0'):
    for a, b in zip(jax.tree.leaves(ours[name]), jax.tree.leaves(theirs[name]), strict=True):
      np.testing.assert_array_equal(a, b)
  for name in ('layer_1', 'pooler'):
    kernel_ours = ours[name]['attention']['query']['kernel'] if name == 'layer_1' else \
        ours[name]['kernel']
    kernel_theirs = theirs[name]['attention']['query']['kernel'] if name == 'layer_1' else \
        theirs[name]['kernel']
    assert not np.allclose(kernel_ours, kernel_theirs)
    scale = run.config.model.initializer_range  # a (truncated) normal of this deviation
    assert 0.7 * scale < float(np.std(kernel_ours)) < 1.05 * scale


def test_standardised_loss_is_the_loss_on_standardised_targets():
  """With the head's output s*h + m, the loss in units of s equals the squared error of h
  against (y - m) / s: a numpy transcription of training on standardised targets."""
  rng = np.random.default_rng(0)
  h, y = rng.normal(size=8).astype(np.float32), rng.uniform(0, 5, 8).astype(np.float32)
  weight = np.array([1, 1, 1, 1, 1, 1, 0, 0], np.float32)
  m, s = 2.7, 1.4
  loss, _ = classification.loss_and_metrics({'logits': jnp.asarray(m + s * h)[:, None]},
                                            {'label': y, 'weight': weight}, target_std=s)
  expected = np.sum(weight * (h - (y - m) / s) ** 2) / weight.sum()
  np.testing.assert_allclose(float(loss), expected, rtol=1e-5)


def test_standardisation_records_the_training_targets_and_the_bound_loss_uses_them(tmp_path):
  config = configs.load_experiment('classify_stsb:smoke')
  configs.apply_overrides(config, ['data.standardize_targets=true'])
  config = resolve_config(config)
  task = get_task(config.task, config)
  data = task.datasets(config, str(tmp_path))
  fields = task.resolved_fields(config, data)
  with open(config.data.train, encoding='utf-8') as f:  # the scores, read independently
    labels = np.asarray([float(line.rstrip('\n').split('\t')[-1])
                         for line in f.readlines()[1:]], np.float64)
  assert fields['data.target_mean'] == pytest.approx(labels.mean())
  assert fields['data.target_std'] == pytest.approx(labels.std())
  bound = get_task(config.task, configs.with_fields(config, fields))
  logits = jnp.asarray([[fields['data.target_mean'] + fields['data.target_std']]])
  loss, _ = bound.loss_and_metrics({'logits': logits},
                                   {'label': jnp.asarray([fields['data.target_mean']]),
                                    'weight': jnp.ones(1)})
  np.testing.assert_allclose(float(loss), 1.0, rtol=1e-5)  # one standard deviation off


def _segments(row_ids: np.ndarray, mask: np.ndarray, segments: np.ndarray) -> tuple[list, list]:
  """The token ids of text A and text B of one encoded row ([CLS] and [SEP]s dropped)."""
  ids, seg = row_ids[mask == 1], segments[mask == 1]
  return list(ids[1:][seg[1:] == 0][:-1]), list(ids[seg == 1][:-1])


def _stsb_data(workdir, swap: bool):
  config = configs.load_experiment('classify_stsb:smoke')
  configs.apply_overrides(config, [f'data.swap_pairs={str(swap).lower()}',
                                   'data.max_seq_length=64'])  # pairs left whole
  config = resolve_config(config)
  return get_task(config.task, config).datasets(config, str(workdir))


def test_swap_pairs_adds_every_training_pair_reversed_with_its_label(tmp_path):
  """data.swap_pairs: the training set is the pairs as read, then each one B-first with the
  same score; the eval set is left as read."""
  plain, swapped = _stsb_data(tmp_path / 'plain', False), _stsb_data(tmp_path / 'swapped', True)
  n = plain.num_train_examples
  assert swapped.num_train_examples == 2 * n
  a, b = plain._train, swapped._train  # noqa: SLF001 (the encoded arrays under test)
  np.testing.assert_array_equal(b['label'], np.concatenate([a['label'], a['label']]))
  np.testing.assert_array_equal(b['input_ids'][:n], a['input_ids'])
  whole = [i for i in range(n) if a['input_mask'][i].sum() < plain.max_seq_length]
  assert len(whole) > n // 2  # rows cut to max_seq_length lose B's tail or A's: not compared
  for i in whole:
    first, second = _segments(a['input_ids'][i], a['input_mask'][i], a['segment_ids'][i])
    assert second and first
    assert _segments(b['input_ids'][n + i], b['input_mask'][n + i],
                     b['segment_ids'][n + i]) == (second, first)
  assert len(swapped.eval_sets[0].examples) == len(plain.eval_sets[0].examples)
  assert [e.texts for e in swapped.eval_sets[0].examples] == \
      [e.texts for e in plain.eval_sets[0].examples]


def test_swap_pairs_on_single_sentences_is_refused(tmp_path):
  config = configs.load_experiment('classify_sst2:smoke')
  configs.apply_overrides(config, ['data.swap_pairs=true'])
  config = resolve_config(config)
  with pytest.raises(DataError, match='swap_pairs=true needs sentence pairs'):
    get_task(config.task, config).datasets(config, str(tmp_path))
