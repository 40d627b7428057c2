"""Finding and reading a checkpoint's parameters: shared by `encoder.load` and `init_from`.

Light on purpose (Orbax and numpy only), so notebooks load checkpoints without training code.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from encoder.errors import CheckpointError


def resolve_checkpoint(path: str) -> tuple[str, str]:
  """A workdir, its checkpoints/ directory, one step directory or its params/ -> (workdir,
  params directory). The workdir is where config.json and tokenizer/ live."""
  path = os.path.abspath(os.path.expanduser(str(path)))
  if not os.path.exists(path):
    raise CheckpointError(f"no checkpoint at '{path}': give a workdir or a checkpoint step "
                          'directory')
  if os.path.basename(path) == 'params' and os.path.isdir(path):
    path = os.path.dirname(path)
  if os.path.isdir(os.path.join(path, 'params')):  # one step
    parent = os.path.dirname(path)
    workdir = os.path.dirname(parent) if os.path.basename(parent) == 'checkpoints' else parent
    return workdir, os.path.join(path, 'params')
  if os.path.exists(os.path.join(path, 'model.safetensors')):
    raise CheckpointError(f"'{path}' is a Hugging Face model: convert it first with "
                          f'python -m encoder.convert --from-hf {path} --out WORKDIR')
  directory = os.path.join(path, 'checkpoints')
  workdir = path
  if not os.path.isdir(directory):
    directory, workdir = path, os.path.dirname(path)
  steps = [int(n) for n in os.listdir(directory)
           if n.isdigit() and os.path.isdir(os.path.join(directory, n, 'params'))]
  if not steps:
    raise CheckpointError(f"'{path}' holds no complete checkpoint (no checkpoints/<step>/params)")
  return workdir, os.path.join(directory, str(max(steps)), 'params')


def restore_params(params_dir: str) -> dict:
  """The params item as a nested dict of numpy arrays, restored on the host with plain Orbax."""
  import orbax.checkpoint as ocp
  try:
    restored = ocp.StandardCheckpointer().restore(params_dir)
  except Exception as e:  # Orbax raises many types for unreadable data
    raise CheckpointError(f"cannot read checkpoint '{params_dir}': {e}".split('\n')[0]) from None
  params = jax.tree.map(np.asarray, restored)
  if not isinstance(params, dict) or 'encoder' not in params:
    raise CheckpointError(f"'{params_dir}' holds no 'encoder' parameters: not one of our models")
  return params
