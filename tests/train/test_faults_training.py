"""The smoke experiment end to end under faults: a NaN in the data, a damaged newest checkpoint,
a full disk. Each run is compared with an uninterrupted one where it resumes."""

import asyncio
import math
import os
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from encoder.data.pretrain.pretraining_data import PretrainingData
from encoder.errors import CheckpointError
from encoder.train import checkpoint as ckpt_lib
from encoder.train import faults
from encoder.train.metric_writer import read_metrics
from tests.train.conftest import smoke_overrides
from tests.train.test_faults import truncate_arrays
from tests.train.test_trainer import losses, train

pytestmark = pytest.mark.slow
COMMON = ('train.num_steps=6', 'train.log_every=2', 'train.eval_every=2',
          'train.checkpoint_every=2', 'train.keep_checkpoints=5')


def poison(monkeypatch, at_step: int) -> None:
  """NaN masked-token weights in the batch of `at_step` (1-based): a NaN loss and gradient."""
  original = PretrainingData.train_batch

  def train_batch(self, step):
    batch = original(self, step)
    if step + 1 == at_step:
      batch['masked_weights'] = np.full_like(batch['masked_weights'], np.nan)
    return batch

  monkeypatch.setattr(PretrainingData, 'train_batch', train_batch)


def steps_on_disk(workdir) -> list[int]:
  return sorted(int(n) for n in os.listdir(workdir / 'checkpoints') if n.isdigit())


def restored(workdir, step, item='params'):
  return ocp.StandardCheckpointer().restore(str(workdir / 'checkpoints' / str(step) / item))


def all_finite(workdir) -> bool:
  return all(math.isfinite(v) for r in read_metrics(str(workdir)) for k, v in r.items()
             if k not in ('step', 'split'))


def test_a_nan_stops_the_run_naming_the_step_and_a_skipping_rerun_resumes(
    tmp_path, corpus, cache_dir, monkeypatch, capsys):
  from encoder import launch
  workdir = tmp_path / 'w'
  poison(monkeypatch, 3)
  args = ['launch.py', '--exp', 'mlm_nsp_tiny:smoke', '--workdir', str(workdir),
          *(f'--config.{o}' for o in smoke_overrides(corpus, cache_dir, *COMMON))]
  monkeypatch.setattr(sys, 'argv', args)
  with pytest.raises(SystemExit) as exit_:
    launch.main()
  assert exit_.value.code == 2
  err = [line for line in capsys.readouterr().err.splitlines() if line.startswith('error:')]
  assert len(err) == 1 and 'non-finite loss or gradient norm at step 3' in err[0]
  assert steps_on_disk(workdir) == [2]  # the last good state; nothing after the fault
  assert max(r['step'] for r in read_metrics(str(workdir))) == 2 and all_finite(workdir)
  # The same command with skip_nonfinite resumes from step 2 and steps over the bad batch.
  monkeypatch.setattr(sys, 'argv', [*args, '--config.train.skip_nonfinite=true'])
  with pytest.raises(SystemExit) as exit_:
    launch.main()
  assert exit_.value.code == 0
  train_records = {r['step']: r for r in read_metrics(str(workdir), 'train')}
  assert [train_records[s]['skipped_steps'] for s in (4, 6)] == [1.0, 0.0]
  assert all_finite(workdir) and steps_on_disk(workdir) == [2, 4, 6]


def test_skipped_steps_leave_params_and_optimizer_state_untouched(tmp_path, corpus, cache_dir,
                                                                   monkeypatch):
  poison(monkeypatch, 3)
  train(tmp_path / 'w', corpus, cache_dir, *COMMON, 'train.checkpoint_every=1',
        'train.skip_nonfinite=true')
  workdir = tmp_path / 'w'
  assert all_finite(workdir)
  for item in ('params', 'train'):
    before, after = restored(workdir, 2, item), restored(workdir, 3, item)
    if item == 'train':
      assert (int(before.pop('step')), int(after.pop('step'))) == (2, 3)
      before.pop('rng'), after.pop('rng')
    assert jax.tree.all(jax.tree.map(np.array_equal, before, after)), item
  changed = jax.tree.map(np.array_equal, restored(workdir, 3), restored(workdir, 4))
  assert not all(jax.tree.leaves(changed))


@pytest.fixture(scope='module')
def straight(tmp_path_factory, corpus, cache_dir):
  workdir = tmp_path_factory.mktemp('straight') / 'w'
  train(workdir, corpus, cache_dir, *COMMON)
  return workdir


def test_a_damaged_newest_checkpoint_is_set_aside_and_the_run_resumes_from_the_one_before(
    tmp_path, corpus, cache_dir, straight, encoder_log):
  workdir = tmp_path / 'w'
  train(workdir, corpus, cache_dir, *COMMON, 'train.stop_at_step=4')
  truncate_arrays(str(workdir / 'checkpoints' / '4'))
  train(workdir, corpus, cache_dir, *COMMON)
  assert any('checkpoints/4 is unreadable' in r.getMessage() for r in encoder_log.records)
  assert losses(workdir) == losses(straight) and losses(workdir, 'eval') == losses(straight,
                                                                                    'eval')
  assert steps_on_disk(workdir) == steps_on_disk(straight)
  assert os.listdir(workdir / 'checkpoints_unreadable')[0].startswith('4-')


def test_a_full_disk_stops_with_one_line_keeps_earlier_checkpoints_and_resumes(
    tmp_path, corpus, cache_dir, straight, monkeypatch):
  from orbax.checkpoint._src.serialization import type_handlers
  workdir, saving = tmp_path / 'w', {}
  original_save, original_write = ckpt_lib.Checkpointer.save, \
      type_handlers.NumpyHandler._open_and_write

  def save(self, step, *args, **kwargs):
    saving['step'] = step
    return original_save(self, step, *args, **kwargs)

  async def write(self, *args, **kwargs):
    if saving.get('step') == 4:
      await asyncio.sleep(0.01)
      raise OSError(28, 'No space left on device')
    return await original_write(self, *args, **kwargs)

  with monkeypatch.context() as patch:
    patch.setattr(ckpt_lib.Checkpointer, 'save', save)
    patch.setattr(type_handlers.NumpyHandler, '_open_and_write', write)
    with pytest.raises(CheckpointError, match='checkpoint of step 4 .*No space left on device.*'
                       'newest intact checkpoint: step 2') as e:
      train(workdir, corpus, cache_dir, *COMMON)
  assert '\n' not in str(e.value)
  assert steps_on_disk(workdir) == [2]
  train(workdir, corpus, cache_dir, *COMMON)  # space again: the same command resumes
  assert losses(workdir) == losses(straight) and losses(workdir, 'eval') == losses(straight,
                                                                                    'eval')
  assert faults.FLAG not in read_metrics(str(workdir))[0]
