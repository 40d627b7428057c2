"""Orbax checkpoints: save, resume from the newest, and `init_from` another run's encoder.

Layout of `WORKDIR/checkpoints/<step>/` (one Orbax CheckpointManager step):
  params/   the model parameters (a nested dict of float32 arrays): all `encoder.load` needs
  train/    {'step', 'opt_state', 'rng'}: what exact resumption needs besides the params
  data/     the data loader's position (JSON)
Each item restores with plain Orbax, without this project:
  ocp.StandardCheckpointer().restore('WORKDIR/checkpoints/1000/params')
Orbax writes a step into a temporary directory and renames it when complete, so a killed save
never looks like a checkpoint.
"""

from __future__ import annotations

import logging
import os

import jax
import numpy as np
import orbax.checkpoint as ocp

from encoder.errors import CheckpointError

log = logging.getLogger(__name__)


class Checkpointer:
  """A CheckpointManager over `workdir/checkpoints` with our three items."""

  def __init__(self, workdir: str, keep: int, asynchronous: bool = True):
    self.directory = os.path.abspath(os.path.join(workdir, 'checkpoints'))
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                           enable_async_checkpointing=asynchronous)
    self.manager = ocp.CheckpointManager(self.directory, options=options)

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def save(self, step: int, params, train: dict, data_state: dict, force: bool = False) -> None:
    """Saves host (numpy) trees; asynchronous: returns once the arrays are copied."""
    args = ocp.args.Composite(params=ocp.args.StandardSave(params),
                              train=ocp.args.StandardSave(train),
                              data=ocp.args.JsonSave(data_state))
    self.manager.save(step, args=args, force=force)

  def restore(self, step: int, params_like, train_like) -> tuple:
    """(params, train, data_state) at `step`, shaped like the given abstract trees."""
    args = ocp.args.Composite(params=ocp.args.StandardRestore(params_like),
                              train=ocp.args.StandardRestore(train_like),
                              data=ocp.args.JsonRestore())
    restored = self.manager.restore(step, args=args)
    return restored['params'], restored['train'], restored['data']

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.close()


def find_params_directory(path: str) -> str:
  """A workdir (its newest checkpoint), a checkpoints/ directory or one step -> its params/."""
  path = os.path.abspath(os.path.expanduser(path))
  if not os.path.exists(path):
    raise CheckpointError(f"no checkpoint at '{path}': give a workdir or a checkpoint step "
                          'directory')
  if os.path.isdir(os.path.join(path, 'params')):
    return os.path.join(path, 'params')
  directory = os.path.join(path, 'checkpoints') if os.path.isdir(
      os.path.join(path, 'checkpoints')) else path
  steps = sorted((int(name) for name in os.listdir(directory) if name.isdigit()
                  and os.path.isdir(os.path.join(directory, name, 'params'))), reverse=True)
  if not steps:
    raise CheckpointError(f"'{path}' holds no complete checkpoint (no <step>/params)")
  return os.path.join(directory, str(steps[0]), 'params')


def load_params(path: str) -> dict:
  """The parameters of a checkpoint as numpy, restored on the host."""
  directory = find_params_directory(path)
  try:
    restored = ocp.StandardCheckpointer().restore(directory)
  except Exception as e:  # Orbax raises many types for unreadable data
    raise CheckpointError(f"cannot read checkpoint '{directory}': {e}".split('\n')[0]) from None
  return jax.tree.map(np.asarray, restored)


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
