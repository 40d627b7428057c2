"""Documents from a prepared TFDS dataset (`data.corpus=tfds:NAME[/CONFIG][:SPLIT]`).

Each example's text feature ('text', else the first string feature) is one document: paragraphs
are split on newlines, then into sentences by the same rule-based splitter as python_docs. A
shard is an index range, {'kind': 'tfds', 'spec', 'data_dir', 'start', 'end'}, read by random
access.
"""

from __future__ import annotations

from encoder.data import tfds_splits
from encoder.data.corpus.sentences import split_sentences
from encoder.errors import DataError


def parse_spec(spec: str) -> tuple[str, str]:
  """'NAME[/CONFIG][:SPLIT]' -> ('NAME[/CONFIG]', SPLIT), split default 'train'."""
  name, _, split = spec.partition(':')
  if not name:
    raise DataError("corpus 'tfds:' needs a dataset name, e.g. tfds:wikipedia/20230601.en:train")
  return name, split or 'train'


def _open(spec: str, data_dir: str | None):
  """(data source, text feature name) of a prepared TFDS split."""
  source, info = tfds_splits.open_split(*parse_spec(spec), data_dir)
  return source, _text_feature(info.features)


def _text_feature(features) -> str:
  strings = [k for k, f in features.items() if type(f).__name__ == 'Text']
  if 'text' in features:
    return 'text'
  if not strings:
    raise DataError(f'the TFDS dataset has no text feature (features: {sorted(features)}): '
                    'pick a dataset with a string feature')
  return strings[0]


def num_examples(spec: str, data_dir: str | None = None) -> int:
  """How many examples the split has (preparation cuts it into index ranges)."""
  return len(_open(spec, data_dir)[0])


def plan(spec: str, data_dir: str | None, shard_bytes: int) -> list[dict]:
  """Index ranges of about `shard_bytes` of text each."""
  n = num_examples(spec, data_dir)
  per = max(1, shard_bytes // 4096)  # Wikipedia articles average a few KB of text
  return [{'kind': 'tfds', 'spec': spec, 'data_dir': data_dir, 'start': i,
           'end': min(i + per, n)} for i in range(0, max(n, 1), per)]


def read(shard: dict):
  """The shard's documents."""
  yield from read_range(shard['spec'], shard['data_dir'], shard['start'], shard['end'])


def read_range(spec: str, data_dir: str | None, start: int, end: int):
  """Documents of examples [start, end): random access, so each shard reads only its range."""
  source, feature = _open(spec, data_dir)
  for i in range(start, min(end, len(source))):
    text = tfds_splits.text(source[i][feature])
    doc = [s for para in text.split('\n') for s in split_sentences(para)]
    if doc:
      yield doc
