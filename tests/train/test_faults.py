"""Faults other than kills: damaged checkpoints, failed writes, NaNs, a second run on a workdir.

Fast tests use the real Checkpointer, lock and train step on tiny trees and a toy model; the
`slow` ones run the smoke experiment end to end.
"""

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from encoder import checkpoint_files
from encoder.errors import CheckpointError, ConfigError
from encoder.train import faults, metric_writer, sharding, steps, strategy, workdir_lock
from encoder.train.checkpoint import Checkpointer
from tests.toy_state import toy_state

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARAMS = {'encoder': {'w': np.arange(12, dtype=np.float32).reshape(3, 4)}}


def save_steps(workdir, steps_to_save=(1, 2, 3), keep=5) -> Checkpointer:
  checkpointer = Checkpointer(str(workdir), keep)
  for step in steps_to_save:
    checkpointer.save(step, toy_state({'encoder': {'w': PARAMS['encoder']['w'] + step}}, step),
                      {'step': step}, force=True)
  checkpointer.wait()
  return checkpointer


def truncate_arrays(step_dir):
  for root, _, names in os.walk(os.path.join(step_dir, 'params')):
    for name in names:
      if '/d' in root.replace(os.sep, '/'):
        path = os.path.join(root, name)
        with open(path, 'r+b') as f:
          f.truncate(os.path.getsize(path) // 2)


def garbage_metadata(step_dir):
  with open(os.path.join(step_dir, 'params', '_METADATA'), 'w') as f:
    f.write('{"tree_metadata": [garbage')


def delete_train_item(step_dir):
  shutil.rmtree(os.path.join(step_dir, 'train'))


def delete_data_item(step_dir):
  os.remove(os.path.join(step_dir, 'data', 'metadata'))


DAMAGE = [truncate_arrays, garbage_metadata, delete_train_item, delete_data_item]


def restore_like():
  return toy_state(jax.tree.map(np.zeros_like, PARAMS))


@pytest.mark.parametrize('damage', DAMAGE, ids=lambda f: f.__name__)
def test_resume_falls_back_to_the_newest_readable_checkpoint(tmp_path, damage, encoder_log):
  save_steps(tmp_path).close()
  damage(str(tmp_path / 'checkpoints' / '3'))
  checkpointer = Checkpointer(str(tmp_path), 5)
  saved = checkpointer.restore_newest_readable(restore_like())
  assert (saved.step, int(saved.state.step), saved.data_state) == (2, 2, {'step': 2})
  np.testing.assert_array_equal(saved.state.params['encoder']['w'], PARAMS['encoder']['w'] + 2)
  np.testing.assert_array_equal(saved.state.opt_state['count'], [2, 2])
  warnings = [r.getMessage() for r in encoder_log.records if r.levelno == logging.WARNING]
  assert any('checkpoints/3 is unreadable' in w for w in warnings), warnings
  assert all('\n' not in w for w in warnings)
  # The damaged step is moved aside, never deleted; the readable ones stay where they were.
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['1', '2']
  assert [n.split('-')[0] for n in os.listdir(tmp_path / 'checkpoints_unreadable')] == ['3']
  assert checkpointer.latest_step() == 2
  # The resumed run can write step 3 again.
  checkpointer.save(3, toy_state(PARAMS, 3), {'step': 3}, force=True)
  checkpointer.close()
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['1', '2', '3']


def test_nothing_readable_is_one_line_and_moves_nothing(tmp_path):
  save_steps(tmp_path, (1, 2)).close()
  for step in ('1', '2'):
    garbage_metadata(str(tmp_path / 'checkpoints' / step))
  with pytest.raises(CheckpointError, match=r'no readable checkpoint .*step 2') as e:
    Checkpointer(str(tmp_path), 5).restore_newest_readable(restore_like())
  assert '\n' not in str(e.value)
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['1', '2']


def test_load_skips_an_unreadable_newest_step_and_says_so(tmp_path, encoder_log):
  save_steps(tmp_path).close()
  truncate_arrays(str(tmp_path / 'checkpoints' / '3'))
  _, params_dir, params = checkpoint_files.restore_newest_params(str(tmp_path))
  assert params_dir.endswith('checkpoints/2/params')
  np.testing.assert_array_equal(params['encoder']['w'], PARAMS['encoder']['w'] + 2)
  assert any('checkpoints/3/params' in r.getMessage() for r in encoder_log.records)
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['1', '2', '3']  # load moves nothing
  for step in ('1', '2'):
    delete_train_item(str(tmp_path / 'checkpoints' / step))  # params alone suffice for load
    garbage_metadata(str(tmp_path / 'checkpoints' / step))
  with pytest.raises(CheckpointError, match='no readable checkpoint .*3 tried') as e:
    checkpoint_files.restore_newest_params(str(tmp_path))
  assert '\n' not in str(e.value)
  with pytest.raises(CheckpointError, match='cannot read checkpoint'):  # one step: no fallback
    checkpoint_files.restore_newest_params(str(tmp_path / 'checkpoints' / '2'))


def inject_write_error(monkeypatch, asynchronous: bool):
  """ENOSPC from the array writer (background thread) or the JSON writer (blocking part)."""
  from orbax.checkpoint._src.handlers import json_checkpoint_handler
  from orbax.checkpoint._src.serialization import type_handlers

  async def no_space(*args, **kwargs):
    await asyncio.sleep(0.05)
    raise OSError(28, 'No space left on device')

  if asynchronous:
    monkeypatch.setattr(type_handlers.NumpyHandler, '_open_and_write', no_space)
  else:
    monkeypatch.setattr(json_checkpoint_handler.JsonCheckpointHandler, '_save_fn', no_space)


@pytest.mark.parametrize('asynchronous', [True, False], ids=['array_write', 'json_write'])
def test_failed_write_is_one_line_and_keeps_earlier_checkpoints(tmp_path, monkeypatch,
                                                                asynchronous):
  checkpointer = save_steps(tmp_path, (1, 2), keep=2)
  with monkeypatch.context() as patch:
    inject_write_error(patch, asynchronous)
    with pytest.raises(CheckpointError) as e:
      checkpointer.save(3, toy_state(PARAMS, 3), {'step': 3}, force=True)
      checkpointer.wait()
  message = str(e.value)
  assert '\n' not in message
  assert 'checkpoint of step 3' in message and 'No space left on device' in message
  assert 'newest intact checkpoint: step 2' in message
  for step in (1, 2):  # keep=2 would have dropped step 1 had step 3 committed
    params = checkpoint_files.restore_params(str(tmp_path / 'checkpoints' / str(step) /
                                                 'params'))
    np.testing.assert_array_equal(params['encoder']['w'], PARAMS['encoder']['w'] + step)
  assert '3' not in os.listdir(tmp_path / 'checkpoints')
  # Space again: the same step saves over Orbax's leftover temporary directory.
  checkpointer = Checkpointer(str(tmp_path), 2)
  checkpointer.save(3, toy_state(PARAMS, 3), {'step': 3}, force=True)
  checkpointer.close()
  assert sorted(n for n in os.listdir(tmp_path / 'checkpoints') if n.isdigit())[-1] == '3'


class Toy(nn.Module):
  @nn.compact
  def __call__(self, batch, deterministic=True):
    return nn.Dense(1)(batch['x'])[:, 0]


class ToyTask:
  couples_examples = False  # each example's loss is its own

  @staticmethod
  def loss_denominators(batch):
    return {'n': jnp.asarray(batch['x'].shape[0], jnp.float32)}

  @staticmethod
  def loss_and_metrics(outputs, batch, denominators):
    err = jnp.square(outputs - batch['y']).sum()
    return err / denominators['n'], {'loss': err, 'count': denominators['n']}


def toy_run(skip: bool, ys: list[float]):
  """Per step: (params, opt_state, step counter, sums) after a pmap-ed train step on 8 devices."""
  model, tx = Toy(), optax.adam(0.1)
  params = jax.tree.map(np.asarray, model.init(jax.random.key(0), {'x': np.ones((1, 2))})['params'])
  train, _ = strategy.PmapStrategy().steps(model, ToyTask, tx, 1, skip)
  rstate = sharding.replicate(steps.create_state(params, tx, 0))
  out = []
  for y in ys:
    batch = {'x': np.ones((8, 2), np.float32), 'y': np.full((8,), y, np.float32)}
    rstate, sums = train(rstate, sharding.shard(batch))
    host = sharding.unreplicate(rstate)
    out.append((host.params, host.opt_state, int(host.step), jax.device_get(sums)))
  return out


def test_a_nonfinite_step_is_skipped_inside_the_pmapped_step():
  (p1, o1, s1, _), (p2, o2, s2, sums2), (p3, _, s3, sums3) = toy_run(True, [1.0, np.nan, 2.0])
  assert (s1, s2, s3) == (1, 2, 3)  # the counter advances with the data position
  assert jax.tree.all(jax.tree.map(np.array_equal, p2, p1))  # update not applied ...
  assert jax.tree.all(jax.tree.map(np.array_equal, o2, o1))  # ... nor the optimizer moment
  assert np.all(sums2[faults.FLAG] == 1) and np.all(sums2['loss'] == 0)  # counts in no mean
  assert np.all(sums3[faults.FLAG] == 0) and np.isfinite(p3['Dense_0']['kernel']).all()
  assert not np.array_equal(p3['Dense_0']['kernel'], p2['Dense_0']['kernel'])


def test_without_skipping_the_flag_reaches_the_monitor_which_names_the_step():
  runs = toy_run(False, [1.0, 1.0, np.inf, 1.0])
  monitor = faults.NonfiniteMonitor(skip=False)
  for step, (_, _, _, sums) in enumerate(runs, 1):
    monitor.add(step, dict(sums))
  with pytest.raises(faults.NonFiniteError, match='at step 3: stopped') as e:
    monitor.check()
  assert '\n' not in str(e.value)
  skipping = faults.NonfiniteMonitor(skip=True)
  for step, (_, _, _, sums) in enumerate(runs, 1):
    skipping.add(step, dict(sums))
  assert skipping.check() == 2  # step 3 and the poisoned step 4 after it
  assert skipping.check() == 0


def test_a_cut_short_metrics_line_is_dropped_on_resume(tmp_path):
  path = tmp_path / 'metrics.jsonl'
  good = [json.dumps({'step': s, 'split': 'train', 'loss': 1.0}) for s in (1, 2, 3)]
  path.write_text('\n'.join(good) + '\n{"step": 4, "split": "tr')
  metric_writer._truncate_after(str(path), 2)
  assert path.read_text() == '\n'.join(good[:2]) + '\n'


def test_a_second_run_on_a_workdir_is_refused(tmp_path):
  with workdir_lock.hold(str(tmp_path)):
    owner = json.loads((tmp_path / 'run.lock').read_text())
    assert owner['pid'] == os.getpid()
    with pytest.raises(ConfigError, match=f"in use by another run \\(pid {os.getpid()} on host"):
      with workdir_lock.hold(str(tmp_path)):
        pass
  assert (tmp_path / 'run.lock').read_text() == ''  # released
  with workdir_lock.hold(str(tmp_path)):  # and free again
    pass


def test_a_lock_held_by_another_process_refuses_until_it_dies(tmp_path, encoder_log):
  holder = subprocess.Popen(
      [sys.executable, '-c', 'import sys, time\n'
       f'sys.path.insert(0, {ROOT!r})\n'
       'from encoder.train import workdir_lock\n'
       f'with workdir_lock.hold({str(tmp_path)!r}):\n'
       '  print("held", flush=True); time.sleep(60)\n'],
      stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == 'held'
    with pytest.raises(ConfigError, match=f'pid {holder.pid} on host'):
      with workdir_lock.hold(str(tmp_path)):
        pass
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  with workdir_lock.hold(str(tmp_path)):
    pass
  assert any(f'stale lock of a run that died (pid {holder.pid}' in r.getMessage()
             for r in encoder_log.records)


def test_old_steps_leave_through_a_rename_so_no_half_deleted_step_remains(tmp_path):
  checkpointer = save_steps(tmp_path, (1, 2, 3, 4), keep=2)
  checkpointer.close()
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['3', '4']  # trash emptied
  (tmp_path / 'checkpoints' / 'deleting' / '1').mkdir(parents=True)  # a kill left it there
  Checkpointer(str(tmp_path), 2).close()
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['3', '4']
