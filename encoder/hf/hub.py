"""A model repository on the Hugging Face Hub, `hf://ORG/NAME[@REVISION]`, fetched through
huggingface_hub into its own cache (HF_HUB_CACHE; ~/.cache/huggingface/hub by default), as
every Hugging Face tool shares it.

Only what the converter reads is downloaded, in three steps: the small files at the top of the
repository (`*.json`, `*.txt`, `*.model`: config.json, vocab.txt or tokenizer.json,
sentence-transformers' modules.json), those of each module folder modules.json names
(1_Pooling/config.json, a Transformer in a subfolder); then the caller's `recognise` reads
them as the converter reads a directory, refusing a family or pipeline it does not convert;
only then the safetensors weights of the model's own folder. So a refused repository costs no
weights, and pytorch_model.bin, TF, Flax, ONNX or OpenVINO copies are never fetched (a
repository whose only weights are pickled is refused in one line: unpickling runs code).
huggingface_hub writes each file under a temporary name and renames it whole, so an
interrupted download is fetched again, never read.

Offline (HF_HUB_OFFLINE=1) or with the Hub out of reach, huggingface_hub answers from that
cache: a revision through its refs/, a commit through its snapshot. What it lacks, and every
Hub answer that is the user's to act on (no such repository or revision, a gated or private
one), is a one-line CheckpointError.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import glob
import json
import os
from collections.abc import Callable

from encoder.errors import CheckpointError
from encoder.hub_cache import HubName

SMALL_FILES = ('*.json', '*.txt', '*.model')  # configs, vocabularies, SentencePiece models
WEIGHTS = 'model*.safetensors'  # model.safetensors, or its shards (the index is a .json)


@dataclasses.dataclass(frozen=True)
class Snapshot:
  """The files of `name` at `commit`, in huggingface_hub's snapshot folder `directory`."""
  name: HubName
  commit: str
  directory: str


def download(name: HubName, recognise: Callable[[str], str]) -> Snapshot:
  """The snapshot of `name` with the files the converter reads. `recognise(directory)` sees
  the small files first and returns the folder of the model's own files (its weights), or
  raises."""
  with _hub_errors(name):
    directory = _fetch(name, name.revision, '')
    commit = os.path.basename(directory)
    files = _listing(name, commit)
    for folder in _module_folders(directory):
      _fetch(name, commit, folder, files=files)
    model_dir = recognise(directory)
    folder = os.path.relpath(model_dir, directory)
    folder = '' if folder == '.' else folder
    _fetch(name, commit, folder, (WEIGHTS,), files)
  if not glob.glob(os.path.join(model_dir, WEIGHTS)):
    raise CheckpointError(_no_weights(name, commit, folder, files or []))
  return Snapshot(name, commit, directory)


def _listing(name: HubName, commit: str) -> list[str] | None:
  """The repository's files at `commit`, as huggingface_hub cached their listing with the
  first download (None where it did not: a cache filled by other means, offline)."""
  from huggingface_hub import get_cached_repo_tree  # lazy: only where a Hub name is given

  try:
    return [f.path for f in get_cached_repo_tree(name.repo_id, revision=commit)]
  except Exception:  # noqa: BLE001 - no listing cached (its own error type), or unreadable
    return None


def _fetch(name: HubName, revision: str | None, folder: str,
           patterns: tuple[str, ...] = SMALL_FILES, files: list[str] | None = None) -> str:
  """Downloads the files of `folder` ('' : the top) matching `patterns`, not those of its
  subfolders (none where the listing `files` has none); returns the snapshot folder (named
  by its commit)."""
  from huggingface_hub import snapshot_download  # lazy: only where a Hub name is given

  prefix = f'{folder}/' if folder else ''
  if files is not None and not any(
      os.path.dirname(f) == folder and fnmatch.fnmatch(os.path.basename(f), p)
      for f in files for p in patterns):
    return ''
  return snapshot_download(name.repo_id, revision=revision,
                           allow_patterns=[prefix + p for p in patterns],
                           ignore_patterns=[f'{prefix}*/*'])


def _module_folders(directory: str) -> list[str]:
  """The folders a sentence-transformers modules.json names (none without one)."""
  path = os.path.join(directory, 'modules.json')
  if not os.path.isfile(path):
    return []
  try:
    with open(path, encoding='utf-8') as f:
      modules = json.load(f)
  except (OSError, ValueError):
    return []  # the converter's reading of modules.json says what is wrong with it
  folders = [str(m.get('path') or '').strip('/') for m in modules if isinstance(m, dict)] \
      if isinstance(modules, list) else []
  return [f for f in dict.fromkeys(folders) if f and '..' not in f.split('/')]


def _no_weights(name: HubName, commit: str, folder: str, files: list[str]) -> str:
  """Why a repository has nothing to convert: no safetensors in the model's folder, perhaps
  pickled weights only (`files`, its listing, says)."""
  where = f"'{folder}/'" if folder else 'its top folder'
  pickled = [f for f in files if os.path.dirname(f) == folder and f.endswith('.bin')]
  if pickled:
    return (f'{name} ({commit[:12]}) has only pickled weights ({os.path.basename(pickled[0])}) '
            f'in {where}, which are not read (unpickling runs code): a revision with '
            'model.safetensors converts (the Hub bot opens one as a pull request: '
            f'hf://{name.repo_id}@refs/pr/N)')
  return f'{name} ({commit[:12]}) has no model.safetensors in {where}: nothing to convert'


@contextlib.contextmanager
def _hub_errors(name: HubName):
  """huggingface_hub's errors that are the user's to act on, as one-line CheckpointErrors."""
  from huggingface_hub import constants, errors  # lazy: as in _fetch
  try:  # the HTTP client huggingface_hub 2.x downloads with
    from httpx2 import TransportError
  except ImportError:
    TransportError = OSError  # noqa: N806 - the class caught below

  try:
    yield
  except errors.GatedRepoError:
    raise CheckpointError(f'{name} is gated: accept its conditions on its Hub page, then log in '
                          '(hf auth login, or set HF_TOKEN)') from None
  except errors.RepositoryNotFoundError:
    raise CheckpointError(f"no model repository '{name.repo_id}' on the Hub (a private one "
                          'needs a login: hf auth login, or set HF_TOKEN)') from None
  except errors.RevisionNotFoundError:
    revision = name.revision or 'main'
    raise CheckpointError(f"the Hub's {name.repo_id} has no revision '{revision}'") from None
  except errors.DisabledRepoError:
    raise CheckpointError(f'{name.repo_id} is disabled on the Hub') from None
  except errors.LocalEntryNotFoundError:  # incomplete snapshots too
    why = ('HF_HUB_OFFLINE is set' if constants.is_offline_mode() else
           'the Hub cannot be reached')
    raise CheckpointError(
        f'{name} is not in the Hugging Face cache here ({constants.HF_HUB_CACHE}) and {why}: '
        f'where the network is, run python -m encoder.convert --from-hf {name} (it fills '
        f'that cache and ours), or --out DIR to give DIR here instead') from None
  except errors.HfHubHTTPError as e:
    status = getattr(e.response, 'status_code', '?')
    raise CheckpointError(f'the Hub answered {status} for {name}: '
                          f"{(str(e).strip().splitlines() or [''])[0][:160]}") from None
  except (OSError, TransportError) as e:  # a connection dropped mid-download, a full disk
    raise CheckpointError(f'downloading {name} failed ({type(e).__name__}: '
                          f"{(str(e).strip().splitlines() or [''])[0][:160]})") from None
