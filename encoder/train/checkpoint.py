"""Orbax checkpoints: save, resume from the newest, and `init_from` another run's encoder.

Layout of `WORKDIR/checkpoints/<step>/` (one Orbax CheckpointManager step):
  params/   the model parameters (a nested dict of float32 arrays): all `encoder.load` needs
  train/    {'step', 'opt_state', 'rng'}: what exact resumption needs besides the params
  data/     the data loader's position (JSON), with the open log window's sums when the save
            falls between two train records (train_loop.LogWindow), and with a wall-clock
            budget the run's training clock (time_budget.CLOCK_KEY: minutes spent, ended)
Each item restores with plain Orbax, without this project:
  ocp.StandardCheckpointer().restore('WORKDIR/checkpoints/1000/params')
Orbax (0.12) writes a step into `<step>.orbax-checkpoint-tmp`, and renames it to `<step>` only
after every item is written (and `commit_success.txt` is in it), so a save killed at any point
never looks like a checkpoint: `all_steps` lists only renamed directories, and leftover
temporary directories are removed when the next run opens the directory. On a gs:// or s3://
bucket, where a rename is a copy, Orbax writes `<step>` in place and `commit_success.txt` last
instead, and only steps holding that file count (s3:// through encoder/orbax_s3.py). What the
rename cannot guard against (files damaged or deleted later, a disk that lied) is handled on
restore: the newest step that restores in full wins, and newer unreadable ones are moved aside
(never deleted) to `checkpoints_unreadable/`, with a one-line warning each. A save that fails
(disk full) raises a CheckpointError naming the step; Orbax deletes old steps only after a save
committed, so the earlier checkpoints stay.
"""

from __future__ import annotations

import logging
import os
import time
from typing import NamedTuple

import jax
import numpy as np
import orbax.checkpoint as ocp

from encoder import orbax_s3, storage, store_retry
from encoder.checkpoint_files import find_run_directory, resolve_checkpoint, restore_newest_params  # noqa: F401 - find_run_directory: read from here too
from encoder.errors import CheckpointError, ConfigError
from encoder.train.steps import TrainState

log = logging.getLogger('encoder')
TRASH = 'deleting'  # checkpoints/deleting/<step>: old steps on their way out


class Saved(NamedTuple):
  """One checkpoint step read back: the train state on the host and the loader's position."""
  step: int
  state: TrainState
  data_state: dict


def save_args(state: TrainState, data_state: dict) -> ocp.args.Composite:
  """The step's three items from the train state: the params alone (what `encoder.load` and
  `init_from` read), the rest of the state, and the loader's position."""
  train = {'step': state.step, 'opt_state': state.opt_state, 'rng': state.rng}
  return ocp.args.Composite(params=ocp.args.StandardSave(state.params),
                            train=ocp.args.StandardSave(train),
                            data=ocp.args.JsonSave(data_state))


def restore_args(like: TrainState | None) -> ocp.args.Composite:
  """What restores the three items into `like`'s shapes and layout (None: as saved)."""
  train_like = None if like is None else {'step': like.step, 'opt_state': like.opt_state,
                                          'rng': like.rng}
  return ocp.args.Composite(
      params=ocp.args.StandardRestore(None if like is None else like.params),
      train=ocp.args.StandardRestore(train_like), data=ocp.args.JsonRestore())


def from_items(step: int, restored) -> Saved:
  """The items Orbax restored (`restore_args`) as one `Saved`."""
  train = restored['train']
  state = TrainState(step=train['step'], params=restored['params'],
                     opt_state=train['opt_state'], rng=train['rng'])
  return Saved(step, state, restored['data'])


class Checkpointer:
  """A CheckpointManager over `workdir/checkpoints` with our three items."""

  def __init__(self, workdir: str, keep: int, asynchronous: bool = True, best_metric: str = ''):
    """Keeps the newest `keep` steps; with `best_metric`, also the step that scored highest
    on it (an Orbax BestN policy over the metrics passed to `save`)."""
    self.directory = storage.abspath(os.path.join(workdir, 'checkpoints'))
    keeping = {'max_to_keep': keep}
    if best_metric:
      from orbax.checkpoint import checkpoint_managers as policies
      keeping = {'preservation_policy': policies.AnyPreservationPolicy([
          policies.LatestN(n=keep),
          policies.BestN(get_metric_fn=lambda m: m[best_metric], n=1,
                         keep_checkpoints_without_metrics=False)])}
    # Leftover temporary directories of killed saves are removed at start: safe, since the
    # workdir lock (train/workdir_lock.py) rules out another run writing here.
    # Old steps are renamed into TRASH (atomic) rather than deleted in place: a run killed
    # while Orbax deletes a step would otherwise leave a half-deleted `<step>` that looks
    # committed. TRASH is emptied at start and after each committed save.
    # On s3:// (orbax_s3.manager_options) a step is written in place, commit_success.txt last,
    # and old steps are deleted in place: a rename there is a copy.
    if storage.is_remote(self.directory):
      # One bounded call before Orbax is handed the bucket: a store that does not answer ends
      # here in one line, within store_retry's bound, not inside Orbax's own calls.
      storage.isdir(self.directory)
    options = orbax_s3.manager_options(self.directory, create=True,
                                       enable_async_checkpointing=asynchronous,
                                       cleanup_tmp_directories=True, todelete_subdir=TRASH,
                                       **keeping)
    self.manager = ocp.CheckpointManager(self.directory, options=options)
    self._empty_trash()
    self._writing = None  # the step whose asynchronous save may still be in flight

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def save(self, step: int, state: TrainState, data_state: dict, force: bool = False,
           metrics: dict | None = None) -> None:
    """Saves a host (numpy) train state and the loader's position; asynchronous: returns once
    the arrays are copied.

    A failed write (of this step, or of the previous one, whose error Orbax raises here) is a
    one-line CheckpointError; the steps committed before it are left as they are."""
    args = save_args(state, data_state)
    self.wait()
    self._writing = step
    try:
      if storage.is_remote(self.directory):
        storage.isdir(self.directory)  # bounded: a silent store fails here, not inside Orbax
      self.manager.save(step, args=args, force=force, metrics=metrics)
    except Exception as e:  # noqa: BLE001 - Orbax and the filesystem raise many types
      raise self._write_error(e) from None

  def _write_error(self, e: Exception) -> CheckpointError:
    step, self._writing = self._writing, None
    if isinstance(e, store_retry.StoreError):  # the store did not answer: ask it nothing more
      kept = 'the steps committed before it are as they were'
    else:
      committed = [s for s in _step_dirs(self.directory) if s != step]
      kept = (f'newest intact checkpoint: step {max(committed)}' if committed
              else 'none written yet')
    first = (str(e).strip().splitlines() or [''])[0][:200]
    return CheckpointError(
        f'could not write the checkpoint of step {step} in {self.directory} '
        f'({type(e).__name__}: {first}); {kept}. Free disk space (or fix the directory) and run '
        'the same command to resume')

  def restore_newest_readable(self, like: TrainState) -> Saved | None:
    """The newest step that restores in full (into `like`), or None when there are no
    checkpoints. Newer unreadable steps are moved aside with a warning, so
    the resumed run can write those steps again; if none is readable, CheckpointError and
    nothing is moved."""
    failures = []
    for step in sorted(self.manager.all_steps(), reverse=True):
      try:
        restored = self.restore(step, like)
      except Exception as e:  # noqa: BLE001 - Orbax raises many types for damaged files
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        failures.append((step, reason))
        log.warning('warning: checkpoint %s is unreadable (%s: %s); trying an older one',
                    os.path.join(self.directory, str(step)), type(e).__name__, reason)
        continue
      self.set_aside([s for s, _ in failures])
      return restored
    if not failures:
      return None
    raise CheckpointError(
        f'no readable checkpoint in {self.directory} (step {failures[0][0]}: {failures[0][1]}); '
        'move the directory away to start afresh')

  def set_aside(self, steps: list[int]) -> None:
    """Moves unreadable steps to `checkpoints_unreadable/<step>-<time>` (kept for a look)."""
    if not steps:
      return
    aside = os.path.join(os.path.dirname(self.directory), 'checkpoints_unreadable')
    storage.makedirs(aside)
    for step in steps:
      target = os.path.join(aside, f'{step}-{time.strftime("%Y%m%d-%H%M%S")}')
      storage.move(os.path.join(self.directory, str(step)), target)
      log.warning('warning: moved unreadable checkpoint %s to %s', step, target)
    self.manager.reload()

  def restore(self, step: int, like: TrainState | None) -> Saved:
    """The checkpoint of `step`, shaped like `like` (None: as it was saved)."""
    return from_items(step, self.manager.restore(step, args=restore_args(like)))

  def wait(self) -> None:
    """Blocks until the last save committed; CheckpointError if it failed."""
    try:
      self.manager.wait_until_finished()
    except Exception as e:  # noqa: BLE001 - the asynchronous write's error, of any type
      raise self._write_error(e) from None
    self._writing = None
    self._empty_trash()

  def _empty_trash(self) -> None:
    """Old steps deleted, within store_retry's bound on a bucket; what is left (a store that
    does not answer) is tried again after the next save."""
    if jax.process_index() != 0:  # Orbax moves old steps into TRASH on the primary host only
      return
    trash = os.path.join(self.directory, TRASH)
    if not storage.is_remote(trash):
      storage.rmtree(trash, ignore_errors=True)
      return
    try:
      storage.rmtree(trash, ignore_errors=False)
    except FileNotFoundError:  # nothing in the trash
      return
    except store_retry.StoreError as e:
      log.warning('warning: old checkpoints in %s not deleted yet (%s); tried again after the '
                  'next save', trash, e)

  def close(self) -> None:
    self.wait()
    self.manager.close()


def _step_dirs(directory: str) -> list[int]:
  """Committed steps on disk (Orbax's own list may be behind after a failed save)."""
  if not storage.isdir(directory):
    return []
  return [int(n) for n in storage.listdir(directory) if n.isdigit()]


def find_params_directory(path: str) -> str:
  """A workdir (its newest checkpoint), a checkpoints/ directory or one step -> its params/."""
  return resolve_checkpoint(path)[1]


def load_params(path: str) -> dict:
  """The parameters of a checkpoint as numpy, restored on the host."""
  return restore_newest_params(path)[2]


def merge_init_from(fresh: dict, loaded: dict) -> tuple[dict, list[str]]:
  """`fresh` with every leaf that `loaded` has at the same path and shape replaced.

  Returns the merged tree and the paths kept fresh (new or reshaped heads), for the log.
  """
  kept_fresh = []

  def pick(path, value):
    node = loaded
    for key in path:
      node = node.get(key.key) if isinstance(node, dict) else None
    if node is not None and np.shape(node) == np.shape(value):
      return np.asarray(node, dtype=value.dtype)
    kept_fresh.append('/'.join(k.key for k in path))
    return value

  return jax.tree_util.tree_map_with_path(pick, fresh), kept_fresh


def reinitialise_top_layers(params: dict, fresh: dict, count: int) -> tuple[dict, list[str]]:
  """`params` with the encoder's top `count` layers and its pooler taken from `fresh` (Zhang
  et al., 2021, "Revisiting Few-sample BERT Fine-tuning": the top layers of a pretrained
  encoder are specialised to its pretraining task, and starting them afresh helps small
  fine-tuning sets). Returns the tree and the groups re-initialised, for the log."""
  if count <= 0:
    return params, []
  encoder = dict(params['encoder'])
  layers = sorted(int(k[6:]) for k in encoder if k.startswith('layer_') and k[6:].isdigit())
  if count > len(layers):
    raise ConfigError(f'train.reinit_layers={count} exceeds the {len(layers)} layers of the '
                      'init_from encoder')
  names = [f'layer_{i}' for i in layers[-count:]] + (['pooler'] if 'pooler' in encoder else [])
  for name in names:
    encoder[name] = fresh['encoder'][name]
  return {**params, 'encoder': encoder}, [f'encoder/{n}' for n in names]
