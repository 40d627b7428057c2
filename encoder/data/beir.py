"""A BEIR folder: `corpus.jsonl` ({"_id", "title", "text"}), `queries.jsonl` ({"_id",
"text"}) and `qrels/<split>.tsv` (query-id, corpus-id, score, with a header), the layout BEIR
and MTEB read. A document is embedded as `title + " " + text` (BEIR's convention; the title
alone or the text alone when the other is empty)."""

from __future__ import annotations

import csv
import json
import os
from typing import NamedTuple

from encoder import storage
from encoder.errors import DataError


class Beir(NamedTuple):
  doc_ids: list[str]
  documents: list[str]
  queries: dict[str, str]  # only the queries the split judges
  qrels: dict[str, dict[str, int]]


def read(directory: str, split: str) -> Beir:
  qrels_path = os.path.join(directory, 'qrels', f'{split}.tsv')
  for path in (os.path.join(directory, 'corpus.jsonl'),
               os.path.join(directory, 'queries.jsonl'), qrels_path):
    if not storage.isfile(path):
      raise DataError(f"'{path}' is missing: a BEIR folder holds corpus.jsonl, queries.jsonl "
                      f'and qrels/{split}.tsv')
  qrels: dict[str, dict[str, int]] = {}
  rows = csv.reader(storage.read_text(qrels_path).splitlines(), delimiter='\t')
  for i, row in enumerate(rows):
    if i == 0 and not row[-1].lstrip('-').isdigit():
      continue  # the header
    if len(row) < 3:
      raise DataError(f"'{qrels_path}' line {i + 1}: expected query-id, corpus-id, score")
    qrels.setdefault(row[0], {})[row[1]] = int(row[2])
  doc_ids, documents = [], []
  for record in _jsonl(os.path.join(directory, 'corpus.jsonl')):
    doc_ids.append(str(record['_id']))
    documents.append(document_text(record))
  queries = {str(r['_id']): r['text'] for r in _jsonl(os.path.join(directory, 'queries.jsonl'))
             if str(r['_id']) in qrels}
  missing = sorted(set(qrels) - set(queries))
  if missing:
    raise DataError(f"{len(missing)} judged queries are not in queries.jsonl (first: "
                    f"'{missing[0]}')")
  return Beir(doc_ids, documents, queries, qrels)


def document_text(record: dict) -> str:
  """`title + " " + text`, either alone when the other is empty (BEIR's convention)."""
  return ' '.join(p for p in (record.get('title') or '', record.get('text') or '') if p).strip()


def _jsonl(path: str) -> list[dict]:
  records = []
  for number, line in enumerate(storage.read_text(path).splitlines(), 1):
    if line.strip():
      try:
        records.append(json.loads(line))
      except json.JSONDecodeError as e:
        raise DataError(f"'{path}' line {number}: not JSON ({e.msg})") from None
  return records
