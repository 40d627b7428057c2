"""`train.decay_from`: a WSD decay branched off a stable run's checkpoint is, bit for bit, the
decay of an uninterrupted run; and a mask-rate schedule resumes exactly."""

import json

import jax
import numpy as np
import pytest

from encoder import configs
from encoder.errors import CheckpointError, ConfigError
from encoder.train.checkpoint import load_params
from encoder.train.metric_writer import read_metrics
from encoder.train.trainer import train_and_evaluate
from tests.train.test_trainer import losses, train

EXP = 'mlm_modern_tiny:smoke'
COMMON = ('train.log_every=1', 'train.eval_every=2', 'train.checkpoint_every=2')
SHORT = ('train.decay_steps=0',)  # runs too short for a decay after their warmup


def assert_trees_equal(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b),
                                                  strict=True))


def learning_rates(workdir):
  return {r['step']: r['learning_rate'] for r in read_metrics(str(workdir), 'train')}


def test_decay_branched_from_a_stable_checkpoint_equals_the_uninterrupted_decay(
    tmp_path, corpus, cache_dir):
  decay = ('train.num_steps=6', 'train.decay_steps=3', 'train.decay_shape=linear')
  train(tmp_path / 'straight', corpus, cache_dir, *COMMON, *decay, exp=EXP)
  # A longer stable run (no decay), stopped at step 4 as a cluster job would be.
  train(tmp_path / 'stable', corpus, cache_dir, *COMMON, 'train.num_steps=20',
        'train.decay_steps=0', 'train.stop_at_step=4', exp=EXP)
  branch = ('train.num_steps=6', 'train.decay_steps=3', 'train.decay_shape=linear',
            f'train.decay_from={tmp_path / "stable"}:4')
  train(tmp_path / 'branch', corpus, cache_dir, *COMMON, *branch, exp=EXP)
  assert_trees_equal(load_params(str(tmp_path / 'branch')),
                     load_params(str(tmp_path / 'straight')))
  straight, branched = losses(tmp_path / 'straight'), losses(tmp_path / 'branch')
  assert sorted(branched) == [5, 6] and all(branched[s] == straight[s] for s in (5, 6))
  rates = learning_rates(tmp_path / 'straight')
  assert rates[4] == rates[3] > rates[5] > rates[6] > 0  # stable, then decaying
  assert learning_rates(tmp_path / 'stable')[4] == rates[4]
  # The source run is only read: its checkpoints are as they were.
  assert sorted(p.name for p in (tmp_path / 'stable' / 'checkpoints').iterdir()
                if p.name.isdigit()) == ['2', '4']


def test_branch_refuses_a_missing_step_and_init_from_beside_it(tmp_path, corpus, cache_dir):
  train(tmp_path / 'stable', corpus, cache_dir, *COMMON, 'train.num_steps=2', *SHORT, exp=EXP)
  with pytest.raises(CheckpointError, match='no complete checkpoint of step 3'):
    train(tmp_path / 'b1', corpus, cache_dir, *COMMON, 'train.num_steps=4', *SHORT,
          f'train.decay_from={tmp_path / "stable"}:3', exp=EXP)
  with pytest.raises(ConfigError, match='not both'):
    train(tmp_path / 'b2', corpus, cache_dir, *COMMON, 'train.num_steps=4', *SHORT,
          f'train.decay_from={tmp_path / "stable"}', f'init_from={tmp_path / "stable"}', exp=EXP)
  assert not (tmp_path / 'b1').exists() and not (tmp_path / 'b2').exists()


def test_a_branch_that_changes_the_model_shape_fails_in_one_line(tmp_path, corpus, cache_dir):
  train(tmp_path / 'stable', corpus, cache_dir, *COMMON, 'train.num_steps=2', *SHORT, exp=EXP)
  with pytest.raises(CheckpointError, match='does not restore into this run') as e:
    train(tmp_path / 'b', corpus, cache_dir, *COMMON, 'train.num_steps=4', *SHORT,
          'model.intermediate_size=128', f'train.decay_from={tmp_path / "stable"}:2', exp=EXP)
  assert '\n' not in str(e.value)


@pytest.mark.slow  # exact resume is the default suite's in test_trainer; this adds the schedule
def test_mask_rate_schedule_resumes_exactly_and_masks_at_each_steps_rate(
    tmp_path, corpus, cache_dir):
  schedule = ('train.num_steps=6', 'data.mask_rate=0.4', 'data.mask_rate_schedule=steps',
              'data.mask_rate_steps=2:0.2,4:0.1')
  train(tmp_path / 'straight', corpus, cache_dir, *COMMON, *schedule, exp=EXP)
  train(tmp_path / 'resumed', corpus, cache_dir, *COMMON, *schedule, 'train.stop_at_step=3',
        exp=EXP)
  train(tmp_path / 'resumed', corpus, cache_dir, *COMMON, *schedule, exp=EXP)
  assert_trees_equal(load_params(str(tmp_path / 'resumed')),
                     load_params(str(tmp_path / 'straight')))
  assert losses(tmp_path / 'resumed') == losses(tmp_path / 'straight')

  from encoder.data.pretrain.pretraining_data import build_pretraining_data
  config = configs.load_experiment(EXP)
  configs.apply_overrides(config, [f'data.corpus=text:{corpus}', f'data.cache_dir={cache_dir}',
                                   *schedule])
  data = build_pretraining_data(config, str(tmp_path / 'data'))
  for step, rate in ((0, 0.4), (1, 0.4), (2, 0.2), (4, 0.1), (5, 0.1)):
    batch = data.train_batch(step)
    assert batch['masked_positions'].shape[1] == round(32 * 0.4)  # one width: one compile
    masked = batch['masked_weights'].sum()
    real = (batch['input_mask'].sum() - 2 * batch['input_segmentation'].max(axis=1).sum())
    assert masked / real == pytest.approx(rate, abs=0.03), step
  eval_width = {b['masked_positions'].shape[1] for b in data.eval_batches(2)}
  assert eval_width == {round(32 * 0.15)}  # held-out masks stay at data.eval_mask_rate


def test_mask_rate_schedule_is_refused_with_static_masks(tmp_path, corpus, cache_dir):
  config = configs.load_experiment(EXP)
  configs.apply_overrides(config, [f'data.corpus=text:{corpus}', f'data.cache_dir={cache_dir}',
                                   'data.mask_rate_schedule=linear', 'data.mask_rate_final=0.1',
                                   'data.dynamic_masking=false'])
  with pytest.raises(ConfigError, match='dynamic_masking'):
    train_and_evaluate(config, str(tmp_path / 'w'))
  np.testing.assert_equal((tmp_path / 'w' / 'checkpoints').exists(), False)


def test_a_context_extension_branches_off_a_short_run_at_longer_rows(tmp_path, corpus, cache_dir):
  # ModernBERT's phase 2 in small: a stable run at 32-token rows, then a decay branched off it
  # at 128-token packed rows (data prepared anew at that length) with a higher global RoPE
  # theta, the blockwise form in tiles of 16 and the blocks rematerialised.
  train(tmp_path / 'stable', corpus, cache_dir, *COMMON, 'train.num_steps=2', *SHORT,
        'data.packing=documents', exp=EXP)
  longer = ('data.max_seq_length=128', 'model.max_position_embeddings=128',
            'model.rope_theta=160000', 'model.attention_impl=blockwise',
            'model.attention_block_size=16', 'model.remat=true', 'data.packing=documents')
  train(tmp_path / 'context', corpus, cache_dir, *COMMON, 'train.num_steps=4',
        'train.decay_steps=2', f'train.decay_from={tmp_path / "stable"}:2', *longer, exp=EXP)
  config = json.loads((tmp_path / 'context' / 'config.json').read_text())
  assert (config['data']['max_seq_length'], config['model']['rope_theta']) == (128, 160000.0)
  assert sorted(losses(tmp_path / 'context')) == [3, 4]
  assert all(np.isfinite(v) for v in losses(tmp_path / 'context').values())
