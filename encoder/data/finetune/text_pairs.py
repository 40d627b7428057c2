"""Contrastive training examples: (anchor, positive[, negatives]) texts or scored pairs.

Three sources, each a one-line `DataError` on bad input:
  JSONL   one object per line; keys `anchor`, `positive` and optional `negative` (a string or a
          list: hard negatives), sentence-transformers' column names; or `sentence1`,
          `sentence2` and a score (`data.label_column`, else `score`).
  TSV/CSV the same names in a header row (or `data.text_columns` naming them; 0-based numbers
          without a header).
  BEIR    a folder (`corpus.jsonl`, `queries.jsonl`, `qrels/<data.train_split>.tsv`): each
          query paired with every document judged relevant (score > 0), `title + " " + text`
          as `encoder.data.beir` joins it for evaluation too.
"""

from __future__ import annotations

import dataclasses
import math

from encoder import storage
from encoder.data import beir
from encoder.data.finetune import file_readers
from encoder.errors import DataError

TRIPLET_KEYS = ('anchor', 'positive', 'negative')
PAIR_KEYS = ('sentence1', 'sentence2')


@dataclasses.dataclass
class TextPair:
  """The anchor, its positive, its hard negatives (maybe none) and a similarity score (scored
  pairs only), with the line it came from."""
  anchor: str
  positive: str
  negatives: tuple[str, ...]
  score: float | None
  where: str


def read(source: str, text_columns, score_column: str, fmt: str = '', header: bool = True,
         beir_split: str = 'train') -> list[TextPair]:
  """The examples of a file or a BEIR folder (see the module docstring)."""
  if storage.isdir(source):
    return read_beir(source, beir_split)
  fmt = file_readers.file_format(source, fmt)
  rows = file_readers.read_rows(source, fmt)
  columns = file_readers.split_list(text_columns)
  if fmt != 'jsonl' and header:
    (_, names), rows = rows[0], rows[1:]
    rows = [(n, dict(zip(names, row, strict=False))) for n, row in rows]
  elif fmt != 'jsonl':
    rows = [(n, {str(i): v for i, v in enumerate(row)}) for n, row in rows]
  if not rows:
    raise DataError(f"'{source}' holds no examples")
  columns, scored = _columns(source, rows[0][1], columns, score_column)
  return [_example(source, n, row, columns, score_column if scored else '') for n, row in rows]


def _columns(source: str, first: dict, columns: list[str], score_column: str
             ) -> tuple[list[str], bool]:
  """The text columns (anchor, positive, negatives...) and whether the rows are scored pairs."""
  if not columns:
    if 'anchor' in first and 'positive' in first:
      columns = [k for k in TRIPLET_KEYS if k in first]
    elif all(k in first for k in PAIR_KEYS):
      columns = list(PAIR_KEYS)
    else:
      raise DataError(f"'{source}': no anchor/positive[/negative] or sentence1/sentence2 "
                      f"columns (found {', '.join(map(str, first))}); set data.text_columns")
  missing = [c for c in columns if c not in first]
  if missing or len(columns) < 2:
    raise DataError(f"'{source}': data.text_columns needs at least two of its columns "
                    f"(missing: {', '.join(missing) or 'a second one'})")
  scored = columns == list(PAIR_KEYS) or (len(columns) == 2 and score_column in first)
  if scored and score_column not in first:
    raise DataError(f"'{source}': scored pairs need a '{score_column}' column "
                    '(data.label_column)')
  return columns, scored


def _example(source: str, number: int, row: dict, columns: list[str], score_column: str
             ) -> TextPair:
  where = f'{source}:{number}'
  texts = []
  for column in columns:
    value = row.get(column)
    values = value if isinstance(value, list) else [value]
    for v in values:
      if v is None:
        raise DataError(f"{where}: no '{column}' field")
      texts.append(file_readers.clean_text(v, where, column))
  score = None
  if score_column:
    try:
      score = float(row.get(score_column))
    except (TypeError, ValueError):
      score = math.nan
    if not math.isfinite(score):
      raise DataError(f'{where}: score {row.get(score_column)!r} is not a finite number')
  return TextPair(texts[0], texts[1], tuple(texts[2:]), score, where)


def read_beir(directory: str, split: str) -> list[TextPair]:
  """Each judged query with each of its relevant documents (qrels score > 0)."""
  data = beir.read(directory, split)
  documents = dict(zip(data.doc_ids, data.documents, strict=True))
  pairs = []
  for query_id, judged in data.qrels.items():
    for doc_id, relevance in judged.items():
      if relevance <= 0:
        continue
      if doc_id not in documents:
        raise DataError(f"{directory}/qrels/{split}.tsv: document '{doc_id}' is not in "
                        'corpus.jsonl')
      pairs.append(TextPair(data.queries[query_id], documents[doc_id], (), None,
                            f'{directory}:{query_id}'))
  if not pairs:
    raise DataError(f'{directory}/qrels/{split}.tsv judges no document relevant')
  return pairs
