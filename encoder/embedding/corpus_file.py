"""A corpus to embed: a JSONL file, one document a line. BEIR's layout ({"_id", "title",
"text"}; a document is `title + " " + text`, as BEIR and encoder.data.beir join them) or lines
with a "text" alone, whose id is then the line's number in the file (from 1, as an editor
counts). Blank lines are skipped.

Read twice, streaming, so a corpus of any size needs no memory: `scan` checks every line and
counts the documents before anything is computed (a bad line 9 million is a one-line error at
once, not hours later), and `shards` gives them `size` at a time, parsing only the shards
asked for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from encoder import storage
from encoder.data.beir import document_text
from encoder.errors import DataError


class CorpusFile:
  """A JSONL corpus at `path` (local or a bucket URL)."""

  def __init__(self, path: str):
    self.path = path
    if not storage.isfile(path):
      raise DataError(f"'{path}' does not exist: --corpus takes a JSONL file of documents "
                      '({"_id", "title", "text"} or {"text"} a line)')

  def _lines(self) -> Iterator[tuple[int, str]]:
    """(line number from 1, line) of the non-blank lines."""
    with storage.open(self.path, encoding='utf-8') as f:
      for number, line in enumerate(f, 1):
        if line.strip():
          yield number, line

  def _document(self, number: int, line: str) -> tuple[str, str]:
    """(id, text) of one line, or a one-line DataError naming it."""
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise DataError(f"'{self.path}' line {number}: not JSON ({e.msg})") from None
    if not isinstance(record, dict):
      raise DataError(f"'{self.path}' line {number}: a {type(record).__name__}, not a JSON "
                      'object with a "text"')
    fields = {k: record.get(k) for k in ('text', 'title')}
    if not isinstance(fields['text'], str) or not isinstance(fields['title'] or '', str):
      raise DataError(f"'{self.path}' line {number}: a document needs a \"text\" string (and "
                      'an optional "title" string)')
    doc_id = record.get('_id', number)
    if not isinstance(doc_id, str | int):
      raise DataError(f"'{self.path}' line {number}: \"_id\" must be a string or a number")
    return str(doc_id), document_text(fields)

  def scan(self) -> int:
    """The number of documents, every line checked (the first bad one is a DataError)."""
    count = 0
    for number, line in self._lines():
      self._document(number, line)
      count += 1
    if not count:
      raise DataError(f"'{self.path}' holds no documents")
    return count

  def shards(self, size: int, skip=frozenset()) -> Iterator[tuple[int, list[str], list[str]]]:
    """(shard index, ids, texts) of consecutive runs of `size` documents in file order; the
    shards in `skip` are passed over without being parsed."""
    index, ids, texts = 0, [], []
    for position, (number, line) in enumerate(self._lines()):
      if position // size != index:
        if index not in skip:
          yield index, ids, texts
        index, ids, texts = position // size, [], []
      if index not in skip:
        doc_id, text = self._document(number, line)
        ids.append(doc_id)
        texts.append(text)
    if ids and index not in skip:
      yield index, ids, texts
