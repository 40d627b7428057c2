"""SQuAD-format question answering examples: local JSON files and TFDS `squad/v1.1|v2.0`.

Every example keeps its context verbatim, so an answer is a character span of it that the
metrics and the predictions file can quote exactly. Each problem in a file is a one-line
`DataError` naming the file and the entry (`data[i].paragraphs[j].qas[k]`, with its id).
"""

from __future__ import annotations

import dataclasses
import json

from encoder import storage
from encoder.data import tfds_splits
from encoder.data.finetune.file_readers import read_utf8
from encoder.errors import DataError

MISMATCH_POLICIES = ('error', 'nearest', 'skip')


@dataclasses.dataclass
class QAExample:
  """One question on one context; `answers` are (text, character start) as read."""
  qid: str
  question: str
  context: str
  answers: list[tuple[str, int]]
  is_impossible: bool
  where: str  # file and entry, for error messages
  title: str = ''


def _load_json(path: str):
  if not storage.isfile(path):
    raise DataError(f"data file '{path}' does not exist: point data.train / data.eval at a "
                    'SQuAD JSON file')
  try:
    return json.loads(read_utf8(path))
  except json.JSONDecodeError as e:
    raise DataError(f'{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); '
                    'SQuAD files are one JSON object {"data": [...]}') from None


def _field(obj, key: str, kind, where: str):
  if not isinstance(obj, dict) or key not in obj:
    raise DataError(f"{where}: no '{key}' field (SQuAD format: data[].paragraphs[].context, "
                    '.qas[].id/question/answers[].text/answer_start)')
  value = obj[key]
  if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
    names = kind.__name__ if isinstance(kind, type) else '/'.join(k.__name__ for k in kind)
    raise DataError(f"{where}: '{key}' should be {names}, got {type(value).__name__}")
  return value


def read_squad_json(path: str) -> list[QAExample]:
  """Every question of a SQuAD v1.1 or v2.0 JSON file (v2.0's `is_impossible` is optional)."""
  root = _load_json(path)
  articles = _field(root, 'data', list, path)
  examples, seen = [], {}
  for i, article in enumerate(articles):
    title = str(article.get('title', '')) if isinstance(article, dict) else ''
    for j, paragraph in enumerate(_field(article, 'paragraphs', list, f'{path}: data[{i}]')):
      at = f'{path}: data[{i}].paragraphs[{j}]'
      context = _field(paragraph, 'context', str, at)
      for k, qa in enumerate(_field(paragraph, 'qas', list, at)):
        where = f'{at}.qas[{k}]'
        qid = str(_field(qa, 'id', (str, int), where))
        where = f'{where} (id {qid})'
        if qid in seen:
          raise DataError(f'{where}: id repeats {seen[qid]}; ids must be unique')
        seen[qid] = where
        answers = []
        for n, a in enumerate(_field(qa, 'answers', list, where)):
          answers.append((_field(a, 'text', str, f'{where}.answers[{n}]'),
                          _field(a, 'answer_start', int, f'{where}.answers[{n}]')))
        impossible = bool(qa.get('is_impossible', False))
        examples.append(QAExample(qid, _field(qa, 'question', str, where), context,
                                  [] if impossible else answers, impossible, where, title))
  if not examples:
    raise DataError(f"'{path}' holds no questions")
  return examples


def read_squad_tfds(name: str, split: str, data_dir: str = '') -> list[QAExample]:
  """`squad/v1.1` or `squad/v2.0` (or another dataset with SQuAD's features), TF-free."""
  source, _ = tfds_splits.open_split(name, split, data_dir)
  examples = []
  for i in range(len(source)):
    row = source[i]
    answers = row.get('answers') or {}
    texts = [tfds_splits.text(t) for t in answers.get('text', [])]
    starts = [int(s) for s in answers.get('answer_start', [])]
    where = f'tfds:{name}:{split}[{i}] (id {tfds_splits.text(row["id"])})'
    if len(texts) != len(starts):
      raise DataError(f'{where}: {len(texts)} answer texts but {len(starts)} answer_starts')
    impossible = bool(row.get('is_impossible', False))
    qid, question, context, title = (tfds_splits.text(row.get(k, ''))
                                     for k in ('id', 'question', 'context', 'title'))
    examples.append(QAExample(qid, question, context,
                              [] if impossible else list(zip(texts, starts, strict=True)),
                              impossible, where, title))
  return examples


def answer_span(example: QAExample, policy: str = 'error') -> tuple[int, int] | None:
  """The first answer's character span [start, end) in the context, checked against its text.

  When the text is not at `answer_start`: 'error' raises, 'nearest' takes the occurrence of
  the text closest to answer_start, 'skip' returns None (the caller drops the question). A
  text found nowhere in the context is always an error.
  """
  text, start = example.answers[0]
  if not text.strip():
    raise DataError(f'{example.where}: the answer text is empty')
  if example.context[start:start + len(text)] == text and start >= 0:
    return start, start + len(text)
  found = [i for i in _occurrences(example.context, text)]
  shown = example.context[max(start, 0):max(start, 0) + len(text)]
  if not found:
    raise DataError(f'{example.where}: answer {text!r} does not occur in the context')
  if policy == 'error':
    raise DataError(f'{example.where}: answer_start={start} points at {shown!r}, not the answer '
                    f'{text!r}; fix the file or set data.answer_start_mismatch=nearest (use the '
                    'closest occurrence) or skip')
  if policy == 'skip':
    return None
  best = min(found, key=lambda i: abs(i - start))
  return best, best + len(text)


def _occurrences(context: str, text: str):
  i = context.find(text)
  while i >= 0:
    yield i
    i = context.find(text, i + 1)
