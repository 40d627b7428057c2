"""The one dispatcher over corpus specs: plan a corpus into shards, read a shard, or load it all.

A corpus spec is one string, as in `data.corpus`:
  python_docs                     English text shipped with the interpreter (no download)
  text:GLOB                       UTF-8 files (or .gz): a sentence per line, blank line between docs
  tfds:NAME[/CONFIG][:SPLIT]      a prepared TFDS dataset read through array_record (no TensorFlow)

A shard is a small JSON-able dict (its 'kind' names the source module that reads it), so a
process pool or a Beam pipeline can hand it to any worker, and the plan (the list of shards) is
a pure function of the corpus files and sizes. Every shard starts a new document, so the
documents of the shards, in order, are exactly those of reading the whole corpus at once.
"""

from __future__ import annotations

from collections.abc import Iterator

from encoder.data.corpus import python_docs, text_files, tfds_documents
from encoder.errors import DataError

Documents = list[list[str]]
_READERS = {'python_docs': python_docs, 'text': text_files, 'tfds': tfds_documents}


def plan(spec: str, shard_bytes: int, cache_dir: str | None = None,
         data_dir: str | None = None) -> list[dict]:
  """The shards of corpus `spec`, each about `shard_bytes` of text. `cache_dir` keeps the built
  python_docs corpus; `data_dir` is the TFDS data directory (None: TFDS's own)."""
  if spec == 'python_docs':
    return python_docs.plan(cache_dir, shard_bytes)
  if spec.startswith('text:'):
    return text_files.plan(spec[len('text:'):], shard_bytes)
  if spec.startswith('tfds:'):
    return tfds_documents.plan(spec[len('tfds:'):], data_dir, shard_bytes)
  raise DataError(f"unknown corpus '{spec}': use python_docs, text:GLOB or "
                  'tfds:NAME[/CONFIG][:SPLIT]')


def read(shard: dict) -> Iterator[list[str]]:
  """The shard's non-empty documents (lists of sentences), in corpus order, one at a time."""
  if shard.get('kind') not in _READERS:
    raise ValueError(f"unknown shard kind {shard.get('kind')!r}")
  return _READERS[shard['kind']].read(shard)


def load_documents(spec: str, cache_dir: str | None = None, data_dir: str | None = None
                   ) -> Documents:
  """Every document of corpus `spec` (one shard's worth of reading: for small corpora, tests
  and benchmarks; preparation reads shard by shard)."""
  if spec == 'python_docs' and not cache_dir:
    docs = python_docs.documents(None)  # built afresh, nothing written
  else:
    docs = [doc for shard in plan(spec, 1 << 62, cache_dir, data_dir) for doc in read(shard)]
  docs = [doc for doc in docs if doc]
  if not docs and spec.startswith('text:'):
    raise DataError(f"the files matching '{spec[len('text:'):]}' are empty: give them one "
                    'sentence per line')
  if not docs:
    raise DataError(f"corpus '{spec}' holds no text: give it non-empty documents")
  return docs
