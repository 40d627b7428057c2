"""The rule-based sentence splitter every corpus source shares (python_docs, TFDS articles).

Deterministic and model-free, so a corpus's sentences depend only on its text and this file
(which is part of the python_docs cache key).
"""

from __future__ import annotations

import re

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
