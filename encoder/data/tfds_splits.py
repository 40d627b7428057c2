"""The one way we open a prepared TFDS split: `tfds.data_source` (array_record), no TensorFlow.

Corpora (`tfds:NAME` in data.corpus) and fine-tuning readers (GLUE, CoNLL-2003, SQuAD) both come
through `open_split`, so an unknown, unprepared or unreadable dataset is the same one-line
`DataError` saying which `tfds build` to run. Nothing is downloaded or built here.
"""

from __future__ import annotations

from encoder.errors import DataError


def open_split(name: str, split: str, data_dir: str | None = None):
  """(data source, builder info) of split `split` of the prepared dataset `name`."""
  import tensorflow_datasets as tfds  # heavy: imported when a TFDS dataset is read
  data_dir = data_dir or None
  builder = _builder(tfds, name, data_dir)
  try:
    source = tfds.data_source(name, split=split, data_dir=data_dir, download=False)
  except Exception as e:  # noqa: BLE001 - classified below into one-line user errors
    if not builder.is_prepared():
      raise DataError(f"TFDS dataset '{name}' is not prepared in {builder.data_dir}: run "
                      f'`tfds build {name} --file_format=array_record`') from None
    raise DataError(f"cannot read split '{split}' of TFDS dataset '{name}' ({first_line(e)}): "
                    f'check the split and prepare it with `tfds build {name} '
                    '--file_format=array_record`') from None
  return source, builder.info


def text(value) -> str:
  """A TFDS string feature as text (bytes decoded as UTF-8, bad bytes replaced)."""
  return value.decode('utf-8', errors='replace') if isinstance(value, bytes) else str(value)


def first_line(e: BaseException) -> str:
  return (str(e).strip().splitlines() or [type(e).__name__])[0][:160]


def _builder(tfds, name: str, data_dir: str | None):
  if not name:
    raise DataError('no TFDS dataset named: give NAME[/CONFIG], e.g. glue/sst2')
  try:
    return tfds.builder(name, data_dir=data_dir)
  except tfds.core.registered.DatasetNotFoundError:
    found = _registered_late(tfds, name, data_dir)
  except Exception as e:  # noqa: BLE001 - bad config names and the like
    raise DataError(f"TFDS dataset '{name}' cannot be loaded ({first_line(e)}): check the "
                    'name with `tfds build --help` or the TFDS catalog') from None
  if found is None:
    raise DataError(f"TFDS has no dataset '{name}': check the name (see the TFDS catalog)")
  return found


def _registered_late(tfds, name: str, data_dir: str | None):
  """The builder of a dataset (glue, conll2003, ...) that registers only once its family
  module is imported; None when the name is not usable even then."""
  import tensorflow_datasets.text  # noqa: F401 - registers the text families
  try:
    return tfds.builder(name, data_dir=data_dir)
  except Exception:  # noqa: BLE001 - any failure here means the name is not usable
    return None
