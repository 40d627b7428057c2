"""Finding and reading a checkpoint's parameters: shared by `encoder.load` and `init_from`.

Light on purpose (Orbax and numpy only), so notebooks load checkpoints without training code.
"""

from __future__ import annotations

import json
import logging
import os

import numpy as np

from encoder import hub_cache, storage
from encoder.errors import CheckpointError

log = logging.getLogger('encoder')


def resolve_checkpoint(path: str) -> tuple[str, str]:
  """A workdir, its checkpoints/ directory, one step directory or its params/ -> (workdir,
  params directory of the newest step). The workdir is where config.json and tokenizer/ live."""
  workdir, candidates = checkpoint_candidates(path)
  return workdir, candidates[0]


def checkpoint_candidates(path: str) -> tuple[str, list[str]]:
  """(workdir, params directories to try, newest first): one for a step, every step for a
  workdir, the conversion of a Hub name (`hf://ORG/NAME[@REVISION]`, found in our cache:
  encoder/hub_cache.py). Orbax's unfinished `<step>.orbax-checkpoint-tmp` directories are
  never candidates."""
  path = storage.abspath(os.path.expanduser(hub_cache.local_path(str(path))))
  storage.check_checkpoint_location(path)
  storage.check_bucket(path)
  if not storage.exists(path):
    raise CheckpointError(f"no checkpoint at '{path}': give a workdir or a checkpoint step "
                          'directory')
  if os.path.basename(path) == 'params' and storage.isdir(path):
    path = os.path.dirname(path)
  if storage.isdir(os.path.join(path, 'params')):  # one step
    parent = os.path.dirname(path)
    workdir = os.path.dirname(parent) if os.path.basename(parent) == 'checkpoints' else parent
    return workdir, [os.path.join(path, 'params')]
  if storage.exists(os.path.join(path, 'model.safetensors')):
    raise CheckpointError(f"'{path}' is a Hugging Face model: convert it first with "
                          f'python -m encoder.convert --from-hf {path} --out WORKDIR')
  directory = os.path.join(path, 'checkpoints')
  workdir = path
  if not storage.isdir(directory):
    directory, workdir = path, os.path.dirname(path)
  if not storage.isdir(directory):
    raise CheckpointError(f"'{path}' is not a directory: give a workdir or a checkpoint step")
  steps = sorted((int(n) for n in storage.listdir(directory)
                  if n.isdigit() and _complete(os.path.join(directory, n))), reverse=True)
  if not steps:
    raise CheckpointError(f"'{path}' holds no complete checkpoint (no checkpoints/<step>/params)")
  return workdir, [os.path.join(directory, str(s), 'params') for s in steps]


def decay_source(text: str) -> tuple[str, int]:
  """`train.decay_from`'s `DIR:STEP` or `DIR` (its newest complete step) -> (the run's workdir,
  the step). A CheckpointError when there is no such complete checkpoint."""
  path, step = text, None
  head, sep, tail = text.rpartition(':')
  if sep and tail.isdigit():
    path, step = head, int(tail)
  workdir, candidates = checkpoint_candidates(path)
  steps = [int(os.path.basename(os.path.dirname(c))) for c in candidates]
  if step is None:
    return workdir, steps[0]
  if step not in steps:
    shown = ', '.join(map(str, sorted(steps)[-8:]))
    raise CheckpointError(f"train.decay_from='{text}': {workdir} has no complete checkpoint "
                          f'of step {step} (it has: {shown})')
  return workdir, step


def find_run_directory(path: str) -> str | None:
  """The workdir (holding config.json) that a checkpoint path belongs to, if any."""
  path = storage.abspath(os.path.expanduser(path))
  for candidate in (path, os.path.dirname(path), os.path.dirname(os.path.dirname(path)),
                    os.path.dirname(os.path.dirname(os.path.dirname(path)))):
    if storage.is_remote(candidate) and '/' not in candidate.split('://', 1)[1]:
      break  # up to the bucket itself, no further
    if storage.isfile(os.path.join(candidate, 'config.json')):
      return candidate
  return None


def newest_data_state(workdir: str) -> dict:
  """The newest complete checkpoint's `data` item (the loader's position and, with a wall-clock
  budget, the run's training clock), read as the JSON Orbax's JsonSave wrote (`data/metadata`)
  without Orbax or JAX; {} where the workdir has no checkpoint or the step no such file."""
  try:
    _, candidates = checkpoint_candidates(workdir)
  except CheckpointError:
    return {}
  return step_data_state(os.path.dirname(candidates[0]))


def step_data_state(step_dir: str) -> dict:
  """One checkpoint step's `data` item (as `newest_data_state`); {} where it has none."""
  path = os.path.join(step_dir, 'data', 'metadata')
  return json.loads(storage.read_text(path)) if storage.isfile(path) else {}


def _complete(step_dir: str) -> bool:
  """Whether a step directory holds a whole checkpoint. Locally Orbax renames a step into place
  once written, so its params/ is enough; on a bucket it writes in place and
  `commit_success.txt` last, so that file must be there too."""
  if not storage.isdir(os.path.join(step_dir, 'params')):
    return False
  return not storage.is_remote(step_dir) or storage.exists(
      os.path.join(step_dir, 'commit_success.txt'))


def restore_newest_params(path: str) -> tuple[str, str, dict]:
  """(workdir, params directory, params) of the newest readable checkpoint under `path`.

  An unreadable newer step (damaged or deleted files) gets a one-line warning and the next
  older one is tried; nothing is deleted. CheckpointError when no step is readable.
  """
  workdir, candidates = checkpoint_candidates(path)
  first_error = None
  for params_dir in candidates:
    try:
      return workdir, params_dir, restore_params(params_dir)
    except CheckpointError as e:
      first_error = first_error or e
      if len(candidates) > 1:
        log.warning('warning: skipping unreadable checkpoint %s', e)
  if len(candidates) == 1:
    raise first_error
  raise CheckpointError(f"no readable checkpoint under '{path}' ({len(candidates)} tried; "
                        f'newest: {first_error})')


def restore_params(params_dir: str) -> dict:
  """The params item as a nested dict of numpy arrays, restored on the host with plain Orbax,
  as a model reads them (`fold_embedding_delta`)."""
  import orbax.checkpoint as ocp
  storage.check_checkpoint_location(params_dir)  # s3:// needs tensorstore's s3 driver installed
  try:
    restored = ocp.StandardCheckpointer().restore(params_dir)
  except Exception as e:  # noqa: BLE001 - Orbax raises many types for unreadable data
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    raise CheckpointError(f"cannot read checkpoint '{params_dir}': {first}") from None
  import jax  # lazy: finding checkpoints (a config's init_from) needs no JAX
  params = jax.tree.map(np.asarray, restored)
  if not isinstance(params, dict) or 'encoder' not in params:
    raise CheckpointError(f"'{params_dir}' holds no 'encoder' parameters: not one of our models")
  return fold_embedding_delta(params)


def fold_embedding_delta(params: dict) -> dict:
  """An ELECTRA run trained with gradient-disentangled sharing (encoder/modules/electra.py)
  keeps the generator's word table under `encoder` and the discriminator's difference from it
  as `word_embedding_delta`. Read as models (load, init_from, --to-hf), the encoder gets its
  own table, their sum, and the generator its own copy of the shared embeddings, as a run
  without sharing holds them; other checkpoints come back as they are."""
  delta = params.get('word_embedding_delta')
  if delta is None:
    return params
  shared = params['encoder']['embeddings']
  words = np.asarray(shared['word_embeddings']['embedding']) + np.asarray(delta)
  encoder = {**params['encoder'],
             'embeddings': {**shared, 'word_embeddings': {'embedding': words}}}
  rest = {k: v for k, v in params.items() if k != 'word_embedding_delta'}
  return {**rest, 'encoder': encoder, 'generator': {**params['generator'], 'embeddings': shared}}
