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

import json
import logging
import os

import jax
import numpy as np
import orbax.checkpoint as ocp

from encoder.checkpoint_files import resolve_checkpoint, restore_params

log = logging.getLogger(__name__)


class Checkpointer:
  """A CheckpointManager over `workdir/checkpoints` with our three items."""

  def __init__(self, workdir: str, keep: int, asynchronous: bool = True, best_metric: str = ''):
    """Keeps the newest `keep` steps; with `best_metric`, also the step that scored highest
    on it (an Orbax BestN policy over the metrics passed to `save`)."""
    self.directory = os.path.abspath(os.path.join(workdir, 'checkpoints'))
    keeping = {'max_to_keep': keep}
    if best_metric:
      from orbax.checkpoint import checkpoint_managers as policies
      keeping = {'preservation_policy': policies.AnyPreservationPolicy([
          policies.LatestN(n=keep),
          policies.BestN(get_metric_fn=lambda m: m[best_metric], n=1,
                         keep_checkpoints_without_metrics=False)])}
    options = ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=asynchronous,
                                           **keeping)
    self.manager = ocp.CheckpointManager(self.directory, options=options)

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def save(self, step: int, params, train: dict, data_state: dict, force: bool = False,
           metrics: dict | None = None) -> None:
    """Saves host (numpy) trees; asynchronous: returns once the arrays are copied."""
    args = ocp.args.Composite(params=ocp.args.StandardSave(params),
                              train=ocp.args.StandardSave(train),
                              data=ocp.args.JsonSave(data_state))
    self.manager.save(step, args=args, force=force, metrics=metrics)

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
  return resolve_checkpoint(path)[1]


def load_params(path: str) -> dict:
  """The parameters of a checkpoint as numpy, restored on the host."""
  return restore_params(find_params_directory(path))


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


ARCHITECTURE_FIELDS = ('size', 'vocab_size', 'hidden_size', 'num_layers', 'num_heads',
                       'intermediate_size', 'max_position_embeddings', 'type_vocab_size',
                       'attention', 'norm', 'activation', 'initializer_range', 'layer_norm_eps')


def find_run_directory(path: str) -> str | None:
  """The workdir (holding config.json) that a checkpoint path belongs to, if any."""
  path = os.path.abspath(os.path.expanduser(path))
  for candidate in (path, os.path.dirname(path), os.path.dirname(os.path.dirname(path)),
                    os.path.dirname(os.path.dirname(os.path.dirname(path)))):
    if os.path.isfile(os.path.join(candidate, 'config.json')):
      return candidate
  return None


def inherit_from_init(config) -> list[str]:
  """Takes the architecture and tokenizer of the `init_from` run, so its weights fit.

  Fine-tuning swaps heads, not encoders: the layers, sizes, vocabulary and tokenizer must be
  those the weights were trained with. Returns what changed, for the log.
  """
  run = find_run_directory(config.init_from)
  if run is None:
    return []
  with open(os.path.join(run, 'config.json')) as f:
    saved = json.load(f).get('model', {})
  changed = []
  for key in ARCHITECTURE_FIELDS:
    if key in saved and saved[key] is not None and config.model.get(key) != saved[key]:
      config.model[key] = saved[key]
      changed.append(f'model.{key}={saved[key]!r}')
  tokenizer_dir = os.path.join(run, 'tokenizer')
  if not config.data.tokenizer and os.path.isdir(tokenizer_dir):
    config.data.tokenizer = tokenizer_dir
    changed.append(f'data.tokenizer={tokenizer_dir}')
  return changed
