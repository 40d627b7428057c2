"""Orbax checkpoints on s3://, written and read in place by tensorstore's own `s3` driver.

Why this module exists: Orbax 0.12 builds every tensorstore key-value store spec in one
function, `tensorstore_utils.build_kvstore_tspec`, which hands `gs://` to tensorstore's `gcs`
driver and everything else to the local `file` driver (an `s3://` path is normalised to
`s3:/bucket/...` and refused as not absolute). tensorstore itself (0.1.86 here) has an `s3`
driver, which moto and S3 both serve. `install()` wraps that one function: for an `s3://`
directory it asks Orbax for the spec of the same bucket and path on `gs://`, so Orbax's whole
object-store layout (OCDBT, one subdirectory per process, the kvstack for temporary metadata,
the data file size it picks for buckets) applies unchanged, and swaps each `gcs` driver in it
for an `s3` one. Everything else Orbax does goes through etils epath, which reaches s3:// by
s3fs like the rest of the project (encoder/storage.py).

What was checked before choosing this over staging (save into a local directory, upload the
finished step, download it to restore):
- Staging cannot hold a multi-host sharded checkpoint: under `parallel.strategy=mesh` each
  process writes its own shards into one shared directory and process 0 merges their OCDBT
  metadata there; one local directory per host has no such place. It would also double the
  disk a checkpoint needs and hold a preempted run for a whole upload. The price here is one
  wrapped function of a private Orbax module; requirements.txt pins orbax-checkpoint <0.13,
  and `check_supported` refuses s3:// in one line if a future Orbax moves it (tested).
- Orbax's commit: on a local disk it renames `<step>.orbax-checkpoint-tmp` to `<step>`; on S3
  a rename is a copy then a delete of every object, neither atomic nor cheap. `manager_options`
  selects the commit-file protocol Orbax itself picks for gs://: `<step>/` is written in place
  and `commit_success.txt` last, and a step without it is never listed (Orbax's step listing
  checks it, as does checkpoint_files._complete). Old steps are deleted in place rather than
  renamed into `checkpoints/deleting/` (a rename is a copy there too; Orbax skips that rename
  on gs:// for the same reason).
- Endpoint: tensorstore's s3 driver does not read AWS_ENDPOINT_URL (checked: it went to AWS
  and timed out), so the user's one variable is mapped to the spec's `endpoint`, read at each
  spec so `storage.configure` changes apply. Credentials: with keys in the environment (the
  user's, or the meaningless ones storage.configure gives a loopback emulator) tensorstore is
  told to use those only, so it neither asks a metadata server nor logs an error for each
  missing `~/.aws` file; without them it takes its default chain (profile, then the
  instance's role), as boto does.
"""

from __future__ import annotations

import os

from encoder.errors import ConfigError

_GCS_DRIVERS = ('gcs', 'gcs_grpc')  # what Orbax may hand a gs:// path (TENSORSTORE_GCS_BACKEND)
_installed = None  # Orbax's own build_kvstore_tspec, once wrapped


def is_s3(path) -> bool:
  return os.fspath(path).lower().startswith('s3://')


def _tensorstore_utils():
  """Orbax's module holding the spec builder, or None where this Orbax has none."""
  try:
    from orbax.checkpoint._src.serialization import tensorstore_utils
  except ImportError:
    return None
  return tensorstore_utils if callable(getattr(tensorstore_utils, 'build_kvstore_tspec',
                                               None)) else None


def check_supported(path) -> None:
  """ConfigError (one line) if `path` is on s3:// and this Orbax has no seam for it; else
  installs the seam, so Orbax can be handed the path."""
  if not is_s3(path):
    return
  if _tensorstore_utils() is None:
    from importlib import metadata
    version = metadata.version('orbax-checkpoint')
    raise ConfigError(
        f"'{path}': this Orbax ({version}) has no tensorstore_utils.build_kvstore_tspec, "
        'through which checkpoints reach s3:// (encoder/orbax_s3.py); install '
        'orbax-checkpoint 0.12 (requirements.txt) or put the workdir on gs:// or a local path')
  install()


def install() -> None:
  """Wraps Orbax's spec builder so s3:// directories get tensorstore's s3 driver; idempotent,
  and every other path takes Orbax's own code unchanged."""
  global _installed
  ts_utils = _tensorstore_utils()
  if _installed is not None or ts_utils is None:
    return
  original = ts_utils.build_kvstore_tspec

  def build_kvstore_tspec(directory, *args, **kwargs):
    if not is_s3(directory):
      return original(directory, *args, **kwargs)
    as_gcs = 'gs://' + os.fspath(directory)[len('s3://'):]
    return _gcs_to_s3(original(as_gcs, *args, **kwargs), driver_settings())

  build_kvstore_tspec.__wrapped__ = original
  ts_utils.build_kvstore_tspec = build_kvstore_tspec
  _installed = original


def _gcs_to_s3(spec, settings: dict):
  """`spec` with each gcs kvstore (bucket, path) replaced by the s3 one of the same bucket and
  path; everything else (OCDBT, kvstack, local temporary layers) as Orbax built it."""
  if isinstance(spec, list):
    return [_gcs_to_s3(s, settings) for s in spec]
  if not isinstance(spec, dict):
    return spec
  if spec.get('driver') in _GCS_DRIVERS:
    return {**{k: v for k, v in spec.items() if k != 'driver'}, 'driver': 's3', **settings}
  return {k: _gcs_to_s3(v, settings) for k, v in spec.items()}


def driver_settings() -> dict:
  """What tensorstore's s3 driver needs beyond bucket and path, from the variables boto reads."""
  settings = {}
  endpoint = os.environ.get('AWS_ENDPOINT_URL', '')
  if endpoint:
    settings['endpoint'] = endpoint if '://' in endpoint else f'http://{endpoint}'
  region = os.environ.get('AWS_REGION') or os.environ.get('AWS_DEFAULT_REGION')
  if region:
    settings['aws_region'] = region
  if os.environ.get('AWS_ACCESS_KEY_ID') and os.environ.get('AWS_SECRET_ACCESS_KEY'):
    settings['context'] = {'aws_credentials': {'type': 'environment'}}
  return settings


def manager_options(directory: str, **options):
  """`ocp.CheckpointManagerOptions(**options)`, with what s3:// needs: the commit-file
  protocol (a rename there is a copy) and old steps deleted in place (no `todelete_subdir`)."""
  import orbax.checkpoint as ocp
  if is_s3(directory):
    check_supported(directory)
    options['todelete_subdir'] = None
    options['atomicity_options'] = ocp.options.AtomicityOptions(
        mode=ocp.options.AtomicityMode.COMMIT_FILE)
  return ocp.CheckpointManagerOptions(**options)
