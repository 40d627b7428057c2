"""`train.decay_from=DIR:STEP`: a new run that starts where another run's checkpoint left off.

Why: a warmup-stable-decay schedule keeps the learning rate constant until the decay, so one
long stable run can feed several decays (shorter and longer budgets, other shapes or mask
rates) that each start from one of its checkpoints. A branch restores that checkpoint whole,
the parameters, the optimizer state (Adam's moments and step count), the dropout key and the
data position, into its own workdir, and trains on from that step with its own config: with the
same stable steps behind it, its decay is bit for bit the decay an uninterrupted run would
have made from there (tests/train/test_branch.py). The source run is only read: its
directory, checkpoints and lock are left alone, so it may go on training meanwhile.

`init_from` differs: it copies the encoder's weights only, for a new task and a new optimizer.
"""

from __future__ import annotations

import logging

import jax
import numpy as np
import orbax.checkpoint as ocp

from encoder import orbax_s3, storage
from encoder.checkpoint_files import decay_source as source
from encoder.errors import CheckpointError
from encoder.train.checkpoint import Saved, from_items, restore_args
from encoder.train.steps import TrainState

log = logging.getLogger('encoder')


def restore(text: str, like: TrainState) -> Saved:
  """The source checkpoint, shaped like `like` (this run's layout), read without opening the
  source for writing."""
  workdir, step = source(text)
  directory = storage.join(workdir, 'checkpoints')
  options = orbax_s3.manager_options(directory, create=False, read_only=True)
  manager = ocp.CheckpointManager(directory, options=options)
  try:
    restored = manager.restore(step, args=restore_args(like))
  except Exception as e:  # noqa: BLE001 - Orbax raises many types for a mismatched tree
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    raise CheckpointError(
        f"train.decay_from='{text}': step {step} does not restore into this run ({first}); a "
        'branch needs the source run\'s model and train.optimizer') from None
  finally:
    manager.close()
  saved = from_items(step, restored)
  _check_shapes(text, step, like, saved.state)
  log.info('Branching from %s at step %d (parameters, optimizer state, data position)',
           workdir, step)
  return saved


def _check_shapes(text: str, step: int, like: TrainState, restored: TrainState) -> None:
  """Orbax restores an array of another shape as it was saved: name the first that differs."""
  wanted = jax.tree_util.tree_flatten_with_path(like)[0]
  got = {jax.tree_util.keystr(p): np.shape(v)
         for p, v in jax.tree_util.tree_flatten_with_path(restored)[0]}
  for path, value in wanted:
    name = jax.tree_util.keystr(path)
    if got.get(name) != tuple(value.shape):
      raise CheckpointError(
          f"train.decay_from='{text}': step {step} does not restore into this run ({name} is "
          f'{got.get(name)} there, {tuple(value.shape)} here); a branch needs the source '
          "run's model and train.optimizer")
