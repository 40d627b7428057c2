"""One path layer for every file the project reads or writes: local paths and bucket URLs.

A TPU pod slice has no shared disk, so its workdir is a bucket (`gs://bucket/run`), and so
are corpora, `init_from` runs and checkpoints opened in Colab. Everything goes through here:

- Local paths take the very calls the project always made (`open`, `os.path`, `os.replace`),
  so local behaviour is unchanged byte for byte.
- `gs://` and `s3://` go through etils `epath`, the path type Orbax itself uses, backed by
  fsspec (gcsfs, s3fs) when TensorFlow is absent, as here. epath rather than bare fsspec: the
  paths we hand Orbax and the paths we touch ourselves then resolve to one client with one
  configuration. fsspec is used directly only where epath has no word for it: the exclusive
  create (`mode='xb'`) that the workdir lock needs, and the client settings below.
- Any other `scheme://` is refused with a one-line ConfigError before anything is written.
- Orbax's arrays are written by tensorstore, not through here: gs:// by its gcs driver (Orbax
  does that itself), s3:// by its s3 driver, which Orbax 0.12 does not select on its own;
  `check_checkpoint_location` installs encoder/orbax_s3.py for that.

Every bucket call made here is bounded: each try has `store_retry`'s timeout (the coroutine
is cancelled when it runs out), transient failures are retried within its budget, and what
still fails is one StoreError line naming the call and the path. What the clients do on their
own (Orbax's metadata through epath, streamed reads) is bounded by the per-request timeouts
`configure()` gives them. gs:// uses gcsfs's JSON-API client (`gcsfs.core.GCSFileSystem`):
gcsfs 2026.10 otherwise swaps in a class that first asks the Storage Control API over gRPC
what kind of bucket it is, 60 s of retries per call whenever the answer does not come (an
emulator, a locked-down network), never cached when it fails.
`GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=true`, set by the user, keeps gcsfs's choice (zonal buckets
need it).

One variable points every layer at a local emulator, as Google's and Amazon's clients read it:
`STORAGE_EMULATOR_HOST=http://127.0.0.1:PORT` (GCS) or `AWS_ENDPOINT_URL=...` (S3).
`configure()` maps it to what each layer reads (gcsfs and google-cloud-storage read the same
variable; tensorstore, Orbax's array writer, reads `TENSORSTORE_GCS_HTTP_URL` and
`GOOGLE_AUTH_TOKEN_FOR_TESTING` for GCS, and takes AWS_ENDPOINT_URL as its s3 spec's
`endpoint` from encoder/orbax_s3.py) and uses anonymous credentials (meaningless keys for a
loopback S3 endpoint), so no client asks a cloud metadata server (169.254.169.254) for a token.
"""

from __future__ import annotations

import builtins
import glob as globlib
import io
import os
import re
import shutil
from urllib import parse

from encoder import orbax_s3, store_retry
from encoder.errors import ConfigError

SCHEMES = ('gs', 's3')
_FSSPEC_PROTOCOL = {'gs': 'gcs', 's3': 's3'}
_applied = None  # the (STORAGE_EMULATOR_HOST, AWS_ENDPOINT_URL) configure() applied
_derived: set[str] = set()  # the variables configure() set itself
_LOOPBACK = ('127.0.0.1', 'localhost', '::1')


def scheme(path) -> str | None:
  """'gs', 's3', another URL scheme, or None for a local path."""
  text = os.fspath(path)
  if '://' not in text:
    return None
  return text.split('://', 1)[0].lower()


def is_remote(path) -> bool:
  return scheme(path) is not None


def check(path) -> str:
  """`path` as a string; ConfigError (one line) for a URL scheme we cannot serve."""
  text = os.fspath(path)
  kind = scheme(text)
  if kind is not None and kind not in SCHEMES:
    raise ConfigError(f"unsupported storage URL '{text}': use a local path, gs://BUCKET/... or "
                      's3://BUCKET/...')
  if kind is not None and not parse.urlparse(text).netloc:
    raise ConfigError(f"storage URL '{text}' names no bucket: use {kind}://BUCKET/PATH")
  if kind is not None:
    check_bucket_name(kind, parse.urlparse(text).netloc, text)
  if kind is not None:
    configure()  # before any layer (Orbax included) is handed the URL
  if kind == 'gs':  # after configure: gcsfs reads its settings when first imported
    _json_api_gcsfs()
    store_retry.watch_gcsfs()  # gcsfs's own retries, counted in the trainer's log line
  return text


_ZB_HNS = 'GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT'
_user_zb_hns = os.environ.get(_ZB_HNS, '').lower() in ('true', '1')  # the user's own choice


def _json_api_gcsfs() -> None:
  """fsspec's gs:// and gcs:// are gcsfs's JSON-API class (the module docstring says why),
  whatever imported gcsfs first, unless the user asked for gcsfs's experimental class."""
  if _user_zb_hns:
    return
  import fsspec
  try:
    from gcsfs.core import GCSFileSystem
  except ImportError:  # no gcsfs: fsspec's own one-line hint follows at the first call
    return
  for protocol in ('gs', 'gcs'):
    if fsspec.registry.get(protocol) is not GCSFileSystem:
      fsspec.register_implementation(protocol, GCSFileSystem, clobber=True)


# The names each store accepts (GCS: 3-63 characters, or up to 222 in dot-separated parts;
# S3: 3-63), lower-case letters, digits and - . (and _ on GCS), a letter or digit at each end.
# A name outside them is accepted by fsspec's clients for reads and listings, and refused only
# by tensorstore at the first checkpoint: so it is refused here, before anything is written.
_BUCKET_NAME = {'gs': re.compile(r'[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]'),
                's3': re.compile(r'[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]')}


def check_bucket_name(kind: str, bucket: str, text: str) -> None:
  """ConfigError (one line) for a bucket name the store would refuse."""
  pattern = _BUCKET_NAME.get(kind)
  parts_ok = kind != 'gs' or all(1 <= len(p) <= 63 for p in bucket.split('.'))
  if pattern is not None and not (pattern.fullmatch(bucket) and parts_ok and '..' not in bucket
                                  and (kind != 'gs' or '.' in bucket or len(bucket) <= 63)):
    raise ConfigError(
        f"'{bucket}' (in '{text}') is not a valid {kind}:// bucket name: 3-63 characters of "
        'lower-case letters, digits, hyphens' + (', underscores' * (kind == 'gs'))
        + ' and dots, beginning and ending with a letter or digit')


def configure() -> None:
  """Points every storage layer at the emulator the user named (again if the variables change)."""
  global _applied
  if not _user_zb_hns:  # before gcsfs is first imported, which reads it then (and only then)
    os.environ[_ZB_HNS] = 'false'
  wanted = (os.environ.get('STORAGE_EMULATOR_HOST', ''), os.environ.get('AWS_ENDPOINT_URL', ''))
  if wanted == _applied and all(name in os.environ for name in _derived):
    return
  import fsspec
  if _applied is not None:  # undo the previous endpoints; their clients must not be reused
    for name in _derived:
      os.environ.pop(name, None)
    _derived.clear()
    fsspec.config.conf.get('gcs', {}).pop('token', None)
    fsspec.config.conf.get('gcs', {}).pop('endpoint_url', None)
    for protocol in _FSSPEC_PROTOCOL.values():
      fsspec.get_filesystem_class(protocol).clear_instance_cache()
    _forget_epath_filesystems()
  _applied = wanted
  gcs_emulator, aws_endpoint = wanted
  if gcs_emulator:
    url = gcs_emulator if '://' in gcs_emulator else f'http://{gcs_emulator}'
    _derive('TENSORSTORE_GCS_HTTP_URL', url)
    _derive('GOOGLE_AUTH_TOKEN_FOR_TESTING', 'anonymous')
    fsspec.config.conf.setdefault('gcs', {}).update(token='anon', endpoint_url=url)
  if aws_endpoint:
    _derive('AWS_EC2_METADATA_DISABLED', 'true')  # never ask 169.254.169.254
    host = parse.urlparse(aws_endpoint if '://' in aws_endpoint else f'http://{aws_endpoint}')
    if host.hostname in _LOOPBACK and not os.environ.get('AWS_ACCESS_KEY_ID'):
      # An S3 emulator refuses unsigned reads of private objects, as S3 does: it gets keys that
      # mean nothing instead (a real endpoint keeps the user's own credentials).
      _derive('AWS_ACCESS_KEY_ID', 'emulator')
      _derive('AWS_SECRET_ACCESS_KEY', 'emulator')
  # Orbax's arrays are written by tensorstore behind fsspec's back: a cached listing would miss
  # them, so listings are always asked afresh.
  for protocol in _FSSPEC_PROTOCOL.values():
    fsspec.config.conf.setdefault(protocol, {})['use_listings_cache'] = False
  _request_timeouts(fsspec.config.conf)


def _forget_epath_filesystems() -> None:
  """epath keeps the first filesystem it made for each protocol (an lru_cache), whatever the
  endpoint since: forgotten too, so Orbax and epath's other users follow a changed endpoint."""
  try:
    from etils.epath import backend
  except ImportError:
    return
  cached = getattr(getattr(backend, 'fsspec_backend', None), '_get_filesystem', None)
  if hasattr(cached, 'cache_clear'):
    cached.cache_clear()


def _request_timeouts(conf: dict) -> None:
  """Per-request timeouts for what the clients do outside `_call` (Orbax's metadata through
  epath, streamed reads): gcsfs hands aiohttp no timeout at all unless given one, so a server
  that accepts and never answers holds a request forever. s3fs has its own (5 s to connect,
  15 s a read). A silent socket is what times out, not a slow transfer."""
  global _our_timeout
  import aiohttp
  seconds = store_retry.DEFAULT.timeout_s
  gcs = conf.setdefault('gcs', {})
  if 'requests_timeout' not in gcs or gcs['requests_timeout'] is _our_timeout:
    _our_timeout = aiohttp.ClientTimeout(total=None, sock_connect=seconds, sock_read=seconds)
    gcs['requests_timeout'] = _our_timeout


_our_timeout = None  # the ClientTimeout set above (a user's own setting is kept)


def _derive(name: str, value: str) -> None:
  """Sets a variable that the user's one variable implies, unless the user set it too."""
  if name not in os.environ or name in _derived:
    os.environ[name] = value
    _derived.add(name)


def _call(path: str, name: str, *args, what: str = '', kind: str = 'call', **kwargs):
  """`await fs._NAME(*args)` on the filesystem of `path`, each try cancelled after
  `store_retry.DEFAULT.timeout_s` and retried within its budget; StoreError naming the call
  (`what`, or NAME) and `path` when it still fails. Retries count under `kind`."""
  import fsspec.asyn
  policy = store_retry.DEFAULT

  def once():
    fs = filesystem(path)  # after each failure too: a changed endpoint is followed
    return fsspec.asyn.sync(fs.loop, getattr(fs, f'_{name}'), *args, timeout=policy.timeout_s,
                            **kwargs)
  return store_retry.call(once, what or f'{name} of {path}', kind, policy)


def _missing(error: store_retry.StoreError) -> bool:
  return isinstance(error.__cause__, FileNotFoundError)


def epath(path):
  """An `etils.epath.Path` for a local path or a checked bucket URL."""
  from etils import epath as epath_lib
  text = check(path)
  if is_remote(text):
    configure()
  return epath_lib.Path(text)


def filesystem(path):
  """The fsspec filesystem of a bucket URL (what epath uses underneath)."""
  import fsspec
  configure()
  return fsspec.filesystem(_FSSPEC_PROTOCOL[scheme(check(path))])


def abspath(path) -> str:
  """A local path made absolute; a URL as given (less a trailing slash)."""
  text = check(path)
  return text.rstrip('/') if is_remote(text) else os.path.abspath(text)


def join(path, *parts) -> str:
  return os.path.join(os.fspath(path), *parts)


def exists(path) -> bool:
  return _call(check(path), 'exists', path) if is_remote(path) else os.path.exists(path)


def isdir(path) -> bool:
  return _call(check(path), 'isdir', path) if is_remote(path) else os.path.isdir(path)


def isfile(path) -> bool:
  if not is_remote(path):
    return os.path.isfile(path)
  try:
    return _call(check(path), 'info', path)['type'] != 'directory'  # one request, not two
  except store_retry.StoreError as e:
    if _missing(e):
      return False
    raise


def getsize(path) -> int:
  return _call(check(path), 'size', path) if is_remote(path) else os.path.getsize(path)


def version(path) -> str:
  """What changes when the file does (size and modification time; a bucket's object info,
  hashed as fsspec's `ukey` hashes it)."""
  if is_remote(path):
    import hashlib
    return hashlib.sha256(str(_call(check(path), 'info', path)).encode()).hexdigest()
  info = os.stat(path)
  return f'{info.st_size}:{info.st_mtime_ns}'


def listdir(path) -> list[str]:
  if is_remote(path):
    names = _call(check(path), 'ls', path, detail=False)
    children = [n.rstrip('/').rsplit('/', 1)[-1] for n in names
                if n.rstrip('/') != _bare(path).rstrip('/')]
    return [n for n in children if not n.endswith('~')]  # as epath lists
  return os.listdir(path)


def _bare(path: str) -> str:
  """A bucket URL as fsspec's listings name it: `bucket/key`, no scheme."""
  return os.fspath(path).split('://', 1)[1]


def makedirs(path) -> None:
  """A directory and its parents; a no-op on buckets, which have no directories."""
  if not is_remote(path):
    os.makedirs(path, exist_ok=True)
  else:
    check(path)


def open(path, mode: str = 'r', encoding: str | None = None):  # noqa: A001 - mirrors builtins.open
  """A file; on a bucket, writes are one bounded upload when the file is closed, and reads
  stream through the client (its per-request timeouts, after a bounded look that it exists)."""
  if not is_remote(path):
    return builtins.open(path, mode, encoding=encoding)
  if mode.strip('bt') == 'w':
    upload = _UploadOnClose(check(path))
    return upload if 'b' in mode else io.TextIOWrapper(upload, encoding=encoding or 'utf-8')
  if mode.strip('bt') == 'r' and not isfile(path):
    raise FileNotFoundError(path)
  # The client configure() set up last, the one `_call` uses.
  if 'b' in mode:
    return filesystem(path).open(path, mode)
  return filesystem(path).open(path, mode, encoding=encoding or 'utf-8')


class _UploadOnClose(io.BytesIO):
  """A bucket object written in memory and uploaded whole by `write_atomic` when closed."""

  def __init__(self, path: str):
    super().__init__()
    self._path = path

  def close(self) -> None:
    if not self.closed:
      data = self.getvalue()
      super().close()
      write_atomic(self._path, data)


def read_text(path) -> str:
  with open(path, encoding='utf-8') as f:
    return f.read()


def read_bytes(path) -> bytes:
  with open(path, 'rb') as f:
    return f.read()


def write_atomic(path, data: bytes | str) -> None:
  """Writes a whole file so a reader never sees half of it: locally a temporary file renamed
  into place; on a bucket one upload, which an object store commits whole."""
  data = data.encode('utf-8') if isinstance(data, str) else data
  if is_remote(path):
    _call(check(path), 'pipe_file', path, data, what=f'upload of {path}', kind='upload')
    return
  tmp = path + '.tmp'
  with builtins.open(tmp, 'wb') as f:
    f.write(data)
  os.replace(tmp, path)


def remove(path) -> None:
  if is_remote(path):
    _call(check(path), 'rm_file', path)
  else:
    os.remove(path)


def rmtree(path, ignore_errors: bool = False) -> None:
  """A directory tree removed; with `ignore_errors`, a missing tree and a store that still
  fails after its bound are let go (the caller may try again later)."""
  if not is_remote(path):
    shutil.rmtree(path, ignore_errors=ignore_errors)
    return
  try:
    _call(check(path), 'rm', path, recursive=True)
  except store_retry.StoreError as e:
    if _missing(e) and ignore_errors:
      return
    if _missing(e):
      raise FileNotFoundError(path) from None
    if not ignore_errors:
      raise


def move(source, target) -> None:
  """Moves a file or directory tree (copy then delete on a bucket, which cannot rename)."""
  if not is_remote(source):
    shutil.move(source, target)
    return
  _call(check(source), 'copy', source, check(target), recursive=True)
  _call(source, 'rm', source, recursive=True)


def glob(pattern: str) -> list[str]:
  """Paths matching `pattern` (`**` recursive); files and directories, as `glob.glob`."""
  if not is_remote(pattern):
    return globlib.glob(os.path.expanduser(pattern), recursive=True)
  prefix = scheme(pattern) + '://'
  return [prefix + p for p in _call(check(pattern), 'glob', pattern)]


def check_checkpoint_location(path) -> None:
  """Readies Orbax for checkpoints at `path`, before it is handed the path.

  Local paths and gs:// Orbax serves itself. For s3:// it needs tensorstore's s3 driver, which
  encoder/orbax_s3.py plugs into Orbax's one spec builder (that module says why, and why not a
  local staging copy); that is installed here, or a ConfigError (one line) given if this Orbax
  has no such builder.
  """
  if scheme(check(path)) == 's3':
    orbax_s3.check_supported(path)


def check_bucket(path) -> None:
  """ConfigError (one line) unless the bucket of `path` exists and our credentials reach it;
  nothing local. Called before a run writes anything, so a typo costs nothing."""
  text = check(path)
  if not is_remote(text):
    return
  kind, bucket = scheme(text), parse.urlparse(text).netloc
  try:
    _call(text, 'info', f'{kind}://{bucket}', what=f'info of {kind}://{bucket}')
  except store_retry.StoreError as e:
    cause = e.__cause__ or e
    if _missing(e):
      raise ConfigError(f"bucket {kind}://{bucket} does not exist (in '{text}'): create it "
                        'first or fix the URL') from None
    if store_retry.is_transient(cause):
      raise ConfigError(
          f'cannot reach bucket {kind}://{bucket}: {e}, {store_retry.DEFAULT.timeout_s:g} s '
          f'a try at most: check the network (or raise {store_retry.TIMEOUT_VARIABLE})') from None
    raise ConfigError(
        f'cannot reach bucket {kind}://{bucket} ({store_retry.describe(cause)}): check your '
        'credentials (gcloud auth application-default login; AWS_PROFILE or AWS_ACCESS_KEY_ID) '
        'and the bucket name') from None
