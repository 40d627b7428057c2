"""Documents (lists of sentences) from the embedded default, local text files or TFDS.

A corpus spec is one string, as in `data.corpus`:
  python_docs                     English text shipped with the interpreter (no download)
  text:GLOB                       UTF-8 files (or .gz): a sentence per line, blank line between docs
  tfds:NAME[/CONFIG][:SPLIT]      a prepared TFDS dataset read through array_record (no TensorFlow)
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time

from encoder import storage
from encoder.data import cache
from encoder.errors import DataError

Documents = list[list[str]]

# A sentence ends at . ? ! (optionally closed by a quote/bracket) followed by space and a capital,
# unless the word before the stop is an abbreviation or an initial.
_SENTENCE_END = re.compile(r'(?<=[.!?])\s+(?=["\'(\[]?[A-Z])')
_ABBREVIATIONS = {'mr.', 'mrs.', 'ms.', 'dr.', 'prof.', 'st.', 'vs.', 'etc.', 'e.g.', 'i.e.',
                  'cf.', 'no.', 'fig.', 'approx.', 'jr.', 'sr.'}
_RULE_LINE = re.compile(r'^[\s=\-~^*#+`_:.|]*$')  # reST underlines, table borders, blank-ish lines
_MAX_CODE_LINES = 8  # keep a few lines of each code block: real text, but not dominated by code


def split_sentences(text: str) -> list[str]:
  """Splits free text into sentences with fixed rules (deterministic, no model).

  Paragraphs are separated by blank lines. Prose paragraphs are joined into one line and cut after
  `.`, `?` or `!` followed by a capital. Code (a `>>>` paragraph, or an indented one after a line
  ending in `:`) keeps each line as its own sentence, at most a few per block. Lines without a
  word or under 3 characters are dropped.
  """
  sentences: list[str] = []
  after_colon = False
  for paragraph in re.split(r'\n\s*\n', text):
    lines = [line.rstrip() for line in paragraph.split('\n') if line.strip()]
    if not lines:
      continue
    indented = all(line[:1].isspace() for line in lines)
    if lines[0].lstrip().startswith('>>>') or (indented and after_colon):
      candidates = [' '.join(line.split()) for line in lines[:_MAX_CODE_LINES]]
    else:
      prose = ' '.join(line.strip() for line in lines if not _RULE_LINE.match(line))
      candidates = _split_prose(' '.join(prose.split()))
      after_colon = lines[-1].endswith(':')
    sentences.extend(s for s in candidates if len(s) >= 3 and re.search(r'[A-Za-z]{2}', s))
  return sentences


def _split_prose(text: str) -> list[str]:
  out: list[str] = []
  for piece in _SENTENCE_END.split(text):
    last = out[-1].rsplit(' ', 1)[-1].lower() if out else ''
    if last in _ABBREVIATIONS or re.fullmatch(r'[a-z]\.', last):
      out[-1] += ' ' + piece
    else:
      out.append(piece)
  return out


def load_documents(spec: str, cache_dir: str | None = None, data_dir: str | None = None
                   ) -> Documents:
  """Returns the documents of corpus `spec`, each a non-empty list of sentences.

  `cache_dir` keeps the built python_docs corpus (it takes seconds to build); `data_dir` is the
  TFDS data directory (default: TFDS's own, i.e. $TFDS_DATA_DIR or ~/tensorflow_datasets).
  """
  if spec == 'python_docs':
    docs = _python_docs(cache_dir)
  elif spec.startswith('text:'):
    docs = _text_files(spec[len('text:'):])
  elif spec.startswith('tfds:'):
    from encoder.data import tfds_source
    docs = tfds_source.load(spec[len('tfds:'):], data_dir)
  else:
    raise DataError(f"unknown corpus '{spec}': use python_docs, text:GLOB or "
                    'tfds:NAME[/CONFIG][:SPLIT]')
  docs = [doc for doc in docs if doc]
  if not docs:
    raise DataError(f"corpus '{spec}' holds no text: give it non-empty documents")
  return docs


def _text_files(pattern: str) -> Documents:
  """One sentence per line, a blank line between documents; a new file starts a new document
  (read by the shard reader preparation uses, as one shard per file)."""
  from encoder.data import shards
  docs = [doc for shard in shards.plan('text:' + pattern, 1 << 62) for doc in shards.read(shard)]
  if not docs:
    raise DataError(f"the files matching '{pattern}' are empty: give them one sentence per line")
  return docs


def _python_docs(cache_dir: str | None) -> Documents:
  """pydoc topics plus standard-library docstrings, built in a subprocess and cached.

  The subprocess keeps the imports of ~300 modules (and any side effects they have) out of the
  training process. The text depends only on the Python version, which keys the cache.
  """
  if cache_dir:
    return json.loads(storage.read_text(python_docs_path(cache_dir)))
  return _build_python_docs()


def python_docs_path(cache_dir: str) -> str:
  """The cached python_docs JSON (a list of documents) under cache_dir, built when absent."""
  key = cache.digest({'corpus': 'python_docs', 'python': sys.version, 'rules': _rules_version()})
  path = os.path.join(cache_dir, f'python_docs-{key}.json')
  if not storage.exists(path):
    cache.write_json(path, _build_python_docs())
  return path


def _build_python_docs() -> Documents:
  start = time.time()
  logging.info('Building the python_docs corpus from the interpreter (a few seconds)...')
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  # setuptools' distutils-precedence.pth swaps its own distutils in for the standard
  # library's where setuptools is installed, which made the corpus depend on the environment
  # (386 or 394 documents here, by setuptools version); 'stdlib' keeps the standard library's
  # everywhere (393).
  env = {**os.environ, 'PYTHONWARNINGS': 'ignore', 'SETUPTOOLS_USE_DISTUTILS': 'stdlib'}
  out = subprocess.run([sys.executable, '-m', 'encoder.data.python_docs'], capture_output=True,
                       check=True, cwd=root, env=env)
  texts: list[list[str]] = json.loads(out.stdout)
  docs = [[s for text in doc for s in split_sentences(text)] for doc in texts]
  logging.info('python_docs: %d documents in %.1fs', len(docs), time.time() - start)
  return docs


def _rules_version() -> str:
  """Changes whenever the splitter or collector changes, so stale caches are not reused."""
  here = os.path.dirname(os.path.abspath(__file__))
  with open(os.path.join(here, 'python_docs.py'), 'rb') as f:
    collector = f.read()
  with open(os.path.abspath(__file__), 'rb') as f:
    splitter = f.read()
  return cache.digest([collector.decode(), splitter.decode()])
