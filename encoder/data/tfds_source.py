"""Documents from a prepared TFDS dataset, read with `tfds.data_source` (array_record, no TF).

Each example's text feature ('text', else the first string feature) is one document: paragraphs
are split on newlines, then into sentences by the same rule-based splitter as python_docs.
"""

from __future__ import annotations

import logging

import tqdm

from encoder.data.corpora import split_sentences
from encoder.errors import DataError


def parse_spec(spec: str) -> tuple[str, str]:
  """'NAME[/CONFIG][:SPLIT]' -> ('NAME[/CONFIG]', SPLIT), split default 'train'."""
  name, _, split = spec.partition(':')
  if not name:
    raise DataError("corpus 'tfds:' needs a dataset name, e.g. tfds:wikipedia/20230601.en:train")
  return name, split or 'train'


def _builder(tfds, name: str, data_dir: str | None):
  try:
    return tfds.builder(name, data_dir=data_dir)
  except tfds.core.registered.DatasetNotFoundError:
    try:  # some builders only register once their family module is imported
      import tensorflow_datasets.text  # noqa: F401
      return tfds.builder(name, data_dir=data_dir)
    except Exception:  # noqa: BLE001 - any failure here means the name is not usable
      pass
  except Exception as e:  # noqa: BLE001 - bad config names and the like
    raise DataError(f"TFDS dataset '{name}' cannot be loaded ({_first_line(e)}): check the "
                    'name with `tfds build --help` or the TFDS catalog') from None
  raise DataError(f"TFDS has no dataset '{name}': check the name in data.corpus=tfds:NAME "
                  '(see the TFDS catalog)')


def _first_line(e: BaseException) -> str:
  return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _text_feature(features) -> str:
  strings = [k for k, f in features.items() if type(f).__name__ == 'Text']
  if 'text' in features:
    return 'text'
  if not strings:
    raise DataError(f'the TFDS dataset has no text feature (features: {sorted(features)}): '
                    'pick a dataset with a string feature')
  return strings[0]


def _open(spec: str, data_dir: str | None):
  """(data source, text feature name) of a prepared TFDS split."""
  import tensorflow_datasets as tfds
  name, split = parse_spec(spec)
  builder = _builder(tfds, name, data_dir)
  try:
    source = tfds.data_source(name, split=split, data_dir=data_dir, download=False)
  except Exception as e:  # noqa: BLE001 - classified below into one-line user errors
    if not builder.is_prepared():
      raise DataError(f"TFDS dataset '{name}' is not prepared in {builder.data_dir}: run "
                      f'`tfds build {name} --file_format=array_record`') from None
    raise DataError(f"cannot read split '{split}' of TFDS dataset '{name}' ({_first_line(e)}): "
                    'check the split and prepare it with --file_format=array_record') from None
  return source, _text_feature(builder.info.features)


def num_examples(spec: str, data_dir: str | None = None) -> int:
  """How many examples the split has (preparation cuts it into index ranges)."""
  return len(_open(spec, data_dir)[0])


def read_range(spec: str, data_dir: str | None, start: int, end: int):
  """Documents of examples [start, end): random access, so each shard reads only its range."""
  source, feature = _open(spec, data_dir)
  for i in range(start, min(end, len(source))):
    text = source[i][feature]
    if isinstance(text, bytes):
      text = text.decode('utf-8', errors='replace')
    doc = [s for para in str(text).split('\n') for s in split_sentences(para)]
    if doc:
      yield doc


def load(spec: str, data_dir: str | None = None) -> list[list[str]]:
  """Every document of the split (small datasets; preparation reads by range instead)."""
  n = num_examples(spec, data_dir)
  logging.info('Reading %d examples of tfds:%s', n, spec)
  return list(tqdm.tqdm(read_range(spec, data_dir, 0, n), total=n, desc=f'tfds:{spec}',
                        leave=False, disable=n < 10000))
