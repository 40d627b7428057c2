"""Helpers for training tests: a small real-text corpus and `:smoke` overrides that use it.

The `corpus` and `cache_dir` fixtures live in tests/conftest.py, for every test directory.
"""

import os
import re
import sys
from pydoc_data.topics import topics


def write_corpus(path) -> str:
  """Python's pydoc topics in BERT's format: a sentence per line, a blank line per document."""
  with open(path, 'w') as f:
    for name in sorted(topics)[:120]:
      text = re.sub(r'\s+', ' ', topics[name])
      sentences = [s.strip() for s in re.split(r'(?<=[.!?])\s+(?=[A-Z])', text) if len(s) > 20]
      if len(sentences) >= 2:
        f.write('\n'.join(sentences) + '\n\n')
  return str(path)


def smoke_overrides(corpus: str, cache_dir: str, *extra: str) -> list[str]:
  """Overrides that make `:smoke` runs use the test corpus and cache, without dropout."""
  return [f'data.corpus=text:{corpus}', f'data.cache_dir={cache_dir}',
          'model.dropout_rate=0.0', 'model.attention_dropout_rate=0.0', *extra]


def launch_cmd(workdir, corpus, cache_dir, *extra, exp='mlm_nsp_tiny:smoke') -> list[str]:
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  return [sys.executable, os.path.join(root, 'launch.py'), '--exp', exp, '--workdir', str(workdir),
          *(f'--config.{o}' for o in smoke_overrides(corpus, cache_dir, *extra))]
