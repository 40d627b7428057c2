"""The embedded default corpus: the running interpreter's documentation, built once and cached.

pydoc topics plus standard-library docstrings, collected in a subprocess
(`python_docs_collector.py`) and split into sentences; the JSON list of documents is cached
under `data.cache_dir`, keyed by the Python version and the collector's and splitter's source,
and cut into shards by document ranges.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

from encoder import storage
from encoder.data import cache
from encoder.data.corpus import python_docs_collector, sentences

Documents = list[list[str]]


def documents(cache_dir: str | None) -> Documents:
  """Every document; built in a subprocess, and cached in `cache_dir` when one is given."""
  if cache_dir:
    return json.loads(storage.read_text(cached_path(cache_dir)))
  return _build()


def cached_path(cache_dir: str) -> str:
  """The cached python_docs JSON (a list of documents) under cache_dir, built when absent."""
  key = cache.digest({'corpus': 'python_docs', 'python': sys.version, 'rules': _rules_version()})
  path = os.path.join(cache_dir, f'python_docs-{key}.json')
  if not storage.exists(path):
    cache.write_json(path, _build())
  return path


def plan(cache_dir: str | None, shard_bytes: int) -> list[dict]:
  """Shards of about `shard_bytes` of text, each a range of documents of the cached JSON."""
  path = cached_path(cache_dir)
  docs = json.loads(storage.read_text(path))
  shards, start, size = [], 0, 0
  for i, doc in enumerate(docs):
    size += sum(len(s) + 1 for s in doc)
    if size >= shard_bytes:
      shards.append({'kind': 'python_docs', 'path': path, 'start': start, 'end': i + 1})
      start, size = i + 1, 0
  if start < len(docs) or not shards:
    shards.append({'kind': 'python_docs', 'path': path, 'start': start, 'end': len(docs)})
  return shards


def read(shard: dict):
  """The shard's non-empty documents."""
  docs = json.loads(storage.read_text(shard['path']))
  yield from (doc for doc in docs[shard['start']:shard['end']] if doc)


def _build() -> Documents:
  """The subprocess keeps the imports of ~300 modules (and any side effects they have) out of
  the training process. The text depends only on the Python version, which keys the cache."""
  start = time.time()
  logging.info('Building the python_docs corpus from the interpreter (a few seconds)...')
  # The directory holding the `encoder` package (a checkout or site-packages).
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__)))))
  # setuptools' distutils-precedence.pth swaps its own distutils in for the standard
  # library's where setuptools is installed, which made the corpus depend on the environment
  # (386 or 394 documents here, by setuptools version); 'stdlib' keeps the standard library's
  # everywhere (393).
  env = {**os.environ, 'PYTHONWARNINGS': 'ignore', 'SETUPTOOLS_USE_DISTUTILS': 'stdlib'}
  out = subprocess.run([sys.executable, '-m', python_docs_collector.__name__],
                       capture_output=True, check=True, cwd=root, env=env)
  texts: list[list[str]] = json.loads(out.stdout)
  docs = [[s for text in doc for s in sentences.split_sentences(text)] for doc in texts]
  logging.info('python_docs: %d documents in %.1fs', len(docs), time.time() - start)
  return docs


def _rules_version() -> str:
  """Changes whenever the collector or the sentence splitter changes, so stale caches are not
  reused."""
  sources = []
  for module in (python_docs_collector, sentences):
    with open(module.__file__, 'rb') as f:
      sources.append(f.read().decode())
  return cache.digest(sources)
