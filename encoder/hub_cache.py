"""Models named on the Hugging Face Hub, `hf://ORG/NAME[@REVISION]`, as workdirs of ours: the
cache of their conversions and how a name finds one there, without the network or JAX.

The layout, under $ENCODER_HF_CACHE (default: $XDG_CACHE_HOME/encoder/hf, else
~/.cache/encoder/hf):

  ORG--NAME/COMMIT/          the workdir `python -m encoder.convert --from-hf` made of the
                             repository at that commit (config.json, tokenizer/, checkpoints/0)
  ORG--NAME/refs/REVISION    the commit a revision (main, a tag, refs/pr/N) was converted at

A name with a commit (`hf://ORG/NAME@<40 hex digits>`) finds its workdir directly; a name
with a branch or tag (or none: main) through its ref, so the second load of a name reads this
cache only: no network, no conversion. A branch that moves on the Hub after that is not
followed until the ref is renewed (`python -m encoder.convert --from-hf hf://ORG/NAME`). A
conversion is written under `.partial/` and renamed into place whole, and its ref written
after that (atomically), so an interrupted one is never read: the next call converts again.

Everything that reads a checkpoint below the command line (`init_from`, the suite's arms,
`encoder.inference.load`) finds a name's workdir here (`local_path`); fetching and converting
a name not yet here is `encoder.convert.from_hub`'s, which `encoder.load`, `launch.py`,
`python -m encoder.embed` and `python -m encoder.convert` call first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import socket
from urllib import parse

from encoder import storage
from encoder.errors import CheckpointError, ConfigError

PREFIX = 'hf://'
ENV = 'ENCODER_HF_CACHE'
DEFAULT_REVISION = 'main'  # what huggingface_hub resolves a name without a revision to
_COMMIT = re.compile(r'[0-9a-f]{40}')
_PARTIAL = '.partial'


@dataclasses.dataclass(frozen=True)
class HubName:
  """A parsed `hf://ORG/NAME[@REVISION]`; `revision` None: the default branch."""
  repo_id: str
  revision: str | None = None

  def __str__(self) -> str:
    return PREFIX + self.repo_id + (f'@{self.revision}' if self.revision else '')

  @property
  def pinned(self) -> bool:
    return is_commit(self.revision)


@dataclasses.dataclass(frozen=True)
class HubModel:
  """A name's conversion in this cache: the repository, its commit and our workdir."""
  repo_id: str
  commit: str
  workdir: str

  @property
  def pinned(self) -> str:
    """The name that says exactly which weights these are: `hf://ORG/NAME@COMMIT`."""
    return str(HubName(self.repo_id, self.commit))


def is_hub_name(path) -> bool:
  return isinstance(path, str) and path.startswith(PREFIX)


def is_commit(revision: str | None) -> bool:
  return revision is not None and _COMMIT.fullmatch(revision) is not None


def parse_name(text: str) -> HubName:
  """`hf://ORG/NAME[@REVISION]` as the Hub's own grammar reads it; a one-line ConfigError for
  anything else (a dataset, a file inside a repository, a malformed name)."""
  # lazy: huggingface_hub is needed only where a Hub name is given
  from huggingface_hub.errors import HfUriError
  from huggingface_hub.utils import parse_hf_uri
  try:
    uri = parse_hf_uri(text)
  except HfUriError as e:
    raise ConfigError(f"'{text}' is not a Hub model name hf://ORG/NAME[@REVISION] "
                      f'({e.msg.strip()})') from None
  if uri.type != 'model' or uri.path_in_repo:
    what = f'a {uri.type} repository' if uri.type != 'model' else f"a path ('{uri.path_in_repo}')"
    raise ConfigError(f"'{text}' names {what}: give a model repository as "
                      'hf://ORG/NAME[@REVISION]')
  return HubName(uri.id, uri.revision)


def root() -> str:
  """The cache's folder: $ENCODER_HF_CACHE, else $XDG_CACHE_HOME/encoder/hf, else
  ~/.cache/encoder/hf."""
  chosen = os.environ.get(ENV)
  if not chosen:
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    chosen = os.path.join(base, 'encoder', 'hf')
  if storage.is_remote(chosen):
    raise ConfigError(f"{ENV}='{chosen}': the conversions are cached in a local folder")
  return os.path.abspath(os.path.expanduser(chosen))


def repo_dir(repo_id: str) -> str:
  return os.path.join(root(), repo_id.replace('/', '--'))


def workdir_path(repo_id: str, commit: str) -> str:
  """Where the conversion of `repo_id` at `commit` is (or will be)."""
  return os.path.join(repo_dir(repo_id), commit)


def _ref_path(repo_id: str, revision: str | None) -> str:
  return os.path.join(repo_dir(repo_id), 'refs', parse.quote(revision or DEFAULT_REVISION,
                                                             safe=''))


def cached(name: HubName) -> HubModel | None:
  """The conversion `name` finds in this cache (its commit, or the commit its revision was
  converted at), or None."""
  commit = name.revision if name.pinned else None
  if commit is None:
    ref = _ref_path(name.repo_id, name.revision)
    if not os.path.isfile(ref):
      return None
    with open(ref, encoding='utf-8') as f:
      commit = f.read().strip()
    if not is_commit(commit):
      return None
  workdir = workdir_path(name.repo_id, commit)
  if not os.path.isfile(os.path.join(workdir, 'config.json')):
    return None
  return HubModel(name.repo_id, commit, workdir)


def record_revision(name: HubName, commit: str) -> None:
  """Notes that `name`'s revision is `commit` (once its conversion is in place)."""
  if name.pinned:
    return
  path = _ref_path(name.repo_id, name.revision)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  storage.write_atomic(path, commit)


def find(text: str) -> HubModel:
  """The conversion of name `text` in this cache, or a one-line CheckpointError saying how to
  make it (no network and no JAX here: the layers below the command line call this)."""
  name = parse_name(text)
  found = cached(name)
  if found is None:
    raise CheckpointError(f'{text} is not converted here yet: run python -m encoder.convert '
                          f"--from-hf {text} (or encoder.load('{text}')) first; it converts "
                          f'into {root()}')
  return found


def local_path(path: str) -> str:
  """`path` itself, or the workdir of a Hub name (`find`)."""
  return find(path).workdir if is_hub_name(path) else path


def pinned(path: str) -> str:
  """`path` itself, or a Hub name with the commit its conversion here was made at."""
  return find(path).pinned if is_hub_name(path) else path


@contextlib.contextmanager
def placing(repo_id: str, commit: str):
  """Yields an empty folder to convert `repo_id` at `commit` into; once the block ends without
  an error it is renamed to the conversion's place whole (where another process got there
  first, theirs is kept). An error, or a kill, leaves nothing in that place; the folder is
  removed on an error, and a killed process's is removed by the next conversion on this
  host."""
  partial_root = os.path.join(root(), _PARTIAL)
  os.makedirs(partial_root, exist_ok=True)
  _remove_abandoned(partial_root)
  host = socket.gethostname().replace('-', '_')
  partial = os.path.join(partial_root,
                         f"{repo_id.replace('/', '--')}-{commit}-{host}-{os.getpid()}")
  shutil.rmtree(partial, ignore_errors=True)
  try:
    yield partial
    target = workdir_path(repo_id, commit)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
      os.rename(partial, target)
    except OSError:
      if not os.path.isfile(os.path.join(target, 'config.json')):
        raise
  finally:
    shutil.rmtree(partial, ignore_errors=True)
    with contextlib.suppress(OSError):  # the folder of partials, once none is left
      os.rmdir(partial_root)


def _remove_abandoned(partial_root: str) -> None:
  """Removes the partial conversions of this host's processes that no longer run."""
  host = socket.gethostname().replace('-', '_')
  for entry in os.listdir(partial_root):
    parts = entry.rsplit('-', 2)
    if len(parts) == 3 and parts[1] == host and parts[2].isdigit() and not _running(
        int(parts[2])):
      shutil.rmtree(os.path.join(partial_root, entry), ignore_errors=True)


def _running(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True
