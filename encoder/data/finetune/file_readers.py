"""Fine-tuning examples from local files: classification TSV/CSV/JSONL and CoNLL columns.

Readers return plain Python examples (texts, a raw label, the line it came from) so that the
label vocabulary, tokenization and every error message can name the file and line at fault.
Every problem is a one-line `DataError`.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import os
import re

from encoder import storage
from encoder.data.finetune import glue_layouts
from encoder.errors import DataError

log = logging.getLogger('encoder')

FORMATS = {'.tsv': 'tsv', '.csv': 'csv', '.jsonl': 'jsonl', '.json': 'jsonl', '.txt': 'tsv'}


@dataclasses.dataclass
class TextExample:
  """One classification example: one or two texts and its label as read (name, id or score)."""
  texts: tuple[str, ...]
  label: str | int | float | None
  where: str  # 'file:line', for error messages


@dataclasses.dataclass
class TaggedSentence:
  """One NER sentence: words and their tags, as read."""
  words: list[str]
  tags: list[str]
  where: str


def split_list(value) -> list[str]:
  """'a,b' -> ['a', 'b']; lists and tuples pass through (ConfigDict fields are strings)."""
  if isinstance(value, list | tuple):
    return [str(v) for v in value]
  return [v.strip() for v in str(value).split(',') if v.strip()]


def _lines(path: str) -> list[str]:
  """The file's lines, split at \\n only (with \\r\\n): str.splitlines would also split at
  U+2028, U+0085, \\x0b ... inside a field, breaking a row in two and shifting its label."""
  if not storage.isfile(path):
    raise DataError(f"data file '{path}' does not exist: point data.train / data.eval at it")
  lines = [line.removesuffix('\r') for line in read_utf8(path).split('\n')]
  if lines and lines[-1] == '':
    lines.pop()
  if not any(line.strip() for line in lines):
    raise DataError(f"data file '{path}' is empty")
  return lines


def read_utf8(path: str, data: bytes | None = None) -> str:
  """The text of a UTF-8 file (a BOM dropped); DataError naming the line of a bad byte."""
  try:
    if data is None:
      with storage.open(path, 'rb') as f:
        data = f.read()
  except OSError as e:
    raise DataError(f'cannot read {path}: {e.strerror or e}') from None
  try:
    return data.decode('utf-8-sig')
  except UnicodeDecodeError as e:
    line = data.count(b'\n', 0, e.start) + 1
    raise DataError(f'{path}:{line}: not UTF-8 text (byte {data[e.start]:#04x}): re-encode '
                    'the file as UTF-8') from None


def clean_text(value, where: str, name: str) -> str:
  """A text field as a string; DataError for non-text values and for unpaired surrogates
  (JSON escapes like \\ud800 that no encoder can write)."""
  if value is None:
    return ''
  if isinstance(value, dict | list | bool):
    raise DataError(f"{where}: field '{name}' is {type(value).__name__} {str(value)[:40]!r}, "
                    'not text')
  text = str(value)
  try:
    text.encode('utf-8')
  except UnicodeEncodeError:
    raise DataError(f"{where}: field '{name}' holds an unpaired surrogate (an invalid \\u "
                    'escape): fix the text') from None
  return text


def clean_label(value, where: str, name: str):
  """A present, scalar label (names stripped); an empty or null one is an error, not a class."""
  if isinstance(value, str):
    value = clean_text(value, where, name).strip()
  if value is None or value == '' or isinstance(value, dict | list):
    shown = 'empty' if value is None or value == '' else f'{value!r}'[:40]
    raise DataError(f"{where}: label field '{name}' is {shown}: every labelled example needs a "
                    'single label')
  return value


def file_format(path: str, given: str = '') -> str:
  fmt = given or FORMATS.get(os.path.splitext(path)[1].lower(), '')
  if fmt not in ('tsv', 'csv', 'jsonl'):
    raise DataError(f"cannot tell the format of '{path}': set data.format to tsv, csv or jsonl")
  return fmt


def read_rows(path: str, fmt: str) -> list[tuple[int, list | dict]]:
  """(line number, row) pairs; a row is a list of fields, or a dict for JSONL."""
  lines = _lines(path)
  if fmt == 'jsonl':
    rows = []
    for n, line in enumerate(lines, 1):
      if line.strip():
        try:
          row = json.loads(line)
        except (ValueError, RecursionError):
          raise DataError(f'{path}:{n}: not a JSON object (JSONL wants one per line)') from None
        if not isinstance(row, dict):
          raise DataError(f'{path}:{n}: not a JSON object (JSONL wants one per line)')
        rows.append((n, row))
    return rows
  # GLUE's TSVs hold unbalanced quotes, so TSV fields are split verbatim (no quoting).
  quoting = csv.QUOTE_NONE if fmt == 'tsv' else csv.QUOTE_MINIMAL
  # Lines go back with their \n, so a quoted CSV field spanning lines keeps its line break.
  reader = csv.reader((line + '\n' for line in lines), delimiter='\t' if fmt == 'tsv' else ',',
                      quoting=quoting)
  rows = []
  while True:  # reader.line_num, not a row count: a quoted CSV field may span lines
    start = reader.line_num + 1
    try:
      row = next(reader)
    except StopIteration:
      return rows
    except csv.Error as e:
      raise DataError(f'{path}:{start}: malformed {fmt.upper()} ({e})') from None
    if any(field.strip() for field in row):
      rows.append((start, row))


def read_classification(path: str, text_columns, label_column: str, header: bool = True,
                        fmt: str = '', defaulted: bool = False,
                        glue_task: str = '') -> list[TextExample]:
  """Examples of a TSV/CSV (columns by header name, or by 0-based index without a header) or a
  JSONL file (columns are keys). An empty `label_column` reads unlabelled texts.

  `defaulted`: the text columns are the task's usual names (GLUE's), not the user's; a file
  whose header lacks them but has exactly one column besides the label uses that one.
  `glue_task` (with `defaulted`): a file in the layout of that task's file in the GLUE
  download (glue_layouts: MRPC's `#1 String`, STS-B's `score`, CoLA's missing header ...) is
  read in that layout.
  """
  columns = split_list(text_columns)
  if len(columns) not in (1, 2):
    raise DataError(f'data.text_columns must name one or two columns, got {columns}')
  fmt = file_format(path, fmt)
  rows = read_rows(path, fmt)
  if defaulted and fmt == 'tsv' and header:
    layout = glue_layouts.headerless_layout(glue_task, rows[0][1])
    if layout is not None:
      log.info('%s: no header, the layout of GLUE\'s %s file: text column(s) %s, label '
               'column %s (0-based)', path, glue_task, ', '.join(layout.text_columns),
               layout.label_column)
      columns, label_column, header = list(layout.text_columns), layout.label_column, False
  names = None  # the column names a file states: its header, or the keys of its first record
  if fmt != 'jsonl' and header:
    names, rows = [c.strip() for c in rows[0][1]], rows[1:]
  elif fmt == 'jsonl' and rows and defaulted:
    names = list(rows[0][1])
  if names is not None and defaulted:
    layout = glue_layouts.header_layout(glue_task, names)
    if layout is not None and not all(c in names for c in [*columns, label_column]):
      log.info("%s: GLUE's %s layout: text column(s) %s, label column %r", path, glue_task,
               ', '.join(repr(c) for c in layout.text_columns), layout.label_column)
      columns, label_column = list(layout.text_columns), layout.label_column
  if names is not None:
    columns = _fit_columns(path, columns, label_column, names, defaulted)
  wanted = columns + ([label_column] if label_column != '' else [])
  if fmt != 'jsonl':
    try:
      index = [names.index(c) if header else int(c) for c in wanted]
    except ValueError:
      raise DataError(f'{path}: without a header, data.text_columns and data.label_column '
                      f'are 0-based column numbers, got {wanted}') from None
  if not rows:
    raise DataError(f"data file '{path}' has a header but no examples")
  examples = []
  for n, row in rows:
    where = f'{path}:{n}'
    if fmt == 'jsonl':
      missing = [c for c in wanted if c not in row]
      if missing:
        raise DataError(f"{where}: no field '{missing[0]}' (fields: {', '.join(row)}); set "
                        'data.text_columns / data.label_column')
      values = [row[c] for c in wanted]
    else:
      if max(index) >= len(row):
        raise DataError(f'{where}: {len(row)} column(s), but column {max(index)} is needed '
                        '(0-based); check the delimiter and data.text_columns')
      values = [row[i] for i in index]
    texts = tuple(clean_text(v, where, c) for v, c in zip(values, columns, strict=False))
    label = None
    if len(values) > len(columns):
      label = clean_label(values[len(columns)], where, label_column)
    examples.append(TextExample(texts, label, where))
  return examples


def _fit_columns(path: str, columns: list[str], label_column: str, names: list[str],
                 defaulted: bool) -> list[str]:
  """The text columns to read from a file with these column names (see read_classification)."""
  missing = [c for c in [*columns, label_column] if c and c not in names]
  if not missing:
    return columns
  others = [n for n in names if n != label_column]
  if defaulted and len(columns) == 1 and label_column in names and len(others) == 1:
    log.info('%s: no column %r; reading the text from its one other column, %r (set '
             'data.text_columns to choose)', path, columns[0], others[0])
    return others
  raise DataError(f"{path}: no column '{missing[0]}' (the file's columns: {', '.join(names)}); "
                  f'set --config.data.text_columns=A[,B] and --config.data.label_column=L')


# An IOB/IOB2/IOBES tag: O, or B-, I-, E-, S- and a type.
IOB_TAG = re.compile(r'^(O|[BIES]-\S+)$')


def find_tag_column(path: str, token_column: int = 0) -> int:
  """The column of a CoNLL file whose values all look like IOB tags (more kinds of tag wins,
  then the later column), for a file that does not say: `token TAG 0` files are common and
  their last column is no tag. The last column when none looks like tags."""
  columns: list[set[str]] = []
  for line in _lines(path):
    fields = line.split()
    if not fields or fields[0] == '-DOCSTART-':
      continue
    if not columns:
      columns = [set() for _ in fields]
    for values, field in zip(columns, fields, strict=False):
      values.add(field)
  width = len(columns)
  token = token_column % width if width else 0
  tagged = [(len(v), i) for i, v in enumerate(columns)
            if i != token and all(IOB_TAG.match(t) for t in v)]
  return max(tagged)[1] if tagged else width - 1


def check_iob_tags(path: str, sentences: list[TaggedSentence], column: int,
                   train: bool) -> None:
  """DataError when the tags read are not IOB tags, or (training data) are one value only."""
  seen = sorted({t for s in sentences for t in s.tags})
  shown = ', '.join(seen[:8]) + (', ...' if len(seen) > 8 else '')
  if train and len(seen) == 1:
    raise DataError(f'{path}: column {column} holds one value ({seen[0]!r}) on every line: '
                    'nothing to learn; set --config.data.tag_column to the column of the IOB '
                    'tags (0-based)')
  bad = [t for t in seen if not IOB_TAG.match(t)]
  if bad:
    raise DataError(f"{path}: column {column} is not IOB tags (values: {shown}); set "
                    '--config.data.tag_column to the column of the tags (O, B-PER, I-PER, ...)')


def read_conll(path: str, token_column: int = 0, tag_column: int = -1) -> list[TaggedSentence]:
  """Sentences of a CoNLL column file: whitespace-separated columns, a blank line between
  sentences, `-DOCSTART-` lines skipped. Every line must have as many columns as the first."""
  lines = _lines(path)
  sentences, words, tags, start, width = [], [], [], 0, None
  for n, line in enumerate([*lines, ''], 1):
    fields = line.split()
    if fields and fields[0] == '-DOCSTART-':
      continue
    if not fields:
      if words:
        sentences.append(TaggedSentence(words, tags, f'{path}:{start}'))
      words, tags = [], []
      continue
    width = width or len(fields)
    if len(fields) != width:
      raise DataError(f'{path}:{n}: {len(fields)} column(s) where earlier lines have {width}; '
                      'CoNLL lines are TOKEN ... TAG separated by whitespace')
    try:
      word, tag = fields[token_column], fields[tag_column]
    except IndexError:
      raise DataError(f'{path}:{n}: no column {token_column} / {tag_column} in {len(fields)} '
                      'columns; set data.token_column / data.tag_column') from None
    if not words:
      start = n
    words.append(word)
    tags.append(tag)
  if not sentences:
    raise DataError(f"data file '{path}' holds no sentences")
  return sentences
