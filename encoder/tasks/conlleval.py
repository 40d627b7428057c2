"""Entity-level precision, recall and F1 exactly as the CoNLL shared task's conlleval.perl.

A chunk starts and ends by conlleval's rules (startOfChunk/endOfChunk), which read IOB2 and
IOB1 alike and turn malformed input into chunks rather than errors: an I-X without a B-X
before it starts a chunk, and a type switch (B-X I-Y) ends one chunk and starts another.
`mode='strict'` instead counts only well-formed IOB2 chunks (B-X I-X*), as seqeval's strict
IOB2 mode: a stray I-X is no entity.
"""

from __future__ import annotations

from collections.abc import Sequence


def _split(tag: str) -> tuple[str, str]:
  if tag in ('O', '') or '-' not in tag:
    return 'O', ''
  prefix, _, kind = tag.partition('-')
  return prefix, kind


def _ends(prev_prefix: str, prev_type: str, prefix: str, kind: str) -> bool:
  """conlleval's endOfChunk: does a chunk end between the previous token and this one?"""
  if prev_prefix in ('B', 'I') and (prefix in ('B', 'O') or prev_type != kind):
    return True
  return prev_prefix != 'O' and prev_prefix not in ('B', 'I') and prefix in ('B', 'O')


def _starts(prev_prefix: str, prev_type: str, prefix: str, kind: str) -> bool:
  """conlleval's startOfChunk: does a chunk start at this token?"""
  if prefix == 'B':
    return True
  if prefix == 'I' and (prev_prefix == 'O' or prev_type != kind):
    return True
  return prefix not in ('O', 'B', 'I') and prefix != prev_prefix


def chunks(tags: Sequence[str], mode: str = 'conlleval') -> list[tuple[str, int, int]]:
  """(type, start, end exclusive) of each entity in one sentence's tags."""
  if mode == 'strict':
    return _strict_chunks(tags)
  if mode != 'conlleval':
    raise ValueError(f"mode must be 'conlleval' or 'strict', got {mode!r}")
  found, start, prev_prefix, prev_type = [], None, 'O', ''
  for i, tag in enumerate([*tags, 'O']):
    prefix, kind = _split(tag)
    if start is not None and _ends(prev_prefix, prev_type, prefix, kind):
      found.append((prev_type, start, i))
      start = None
    if _starts(prev_prefix, prev_type, prefix, kind):
      start = i
    prev_prefix, prev_type = prefix, kind
  return found


def _strict_chunks(tags: Sequence[str]) -> list[tuple[str, int, int]]:
  found, start, kind = [], None, ''
  for i, tag in enumerate([*tags, 'O']):
    prefix, this = _split(tag)
    if start is not None and not (prefix == 'I' and this == kind):
      found.append((kind, start, i))
      start = None
    if prefix == 'B':
      start, kind = i, this
  return found


def to_iob2(tags: Sequence[str]) -> list[str]:
  """The same entities (by conlleval's reading) spelled in IOB2: every chunk opens with B-."""
  out = ['O'] * len(tags)
  for kind, start, end in chunks(tags):
    out[start:end] = [f'B-{kind}'] + [f'I-{kind}'] * (end - start - 1)
  return out


def _prf(correct: int, guessed: int, gold: int) -> dict:
  precision = correct / guessed if guessed else 0.0
  recall = correct / gold if gold else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return {'precision': precision, 'recall': recall, 'f1': f1, 'support': gold}


def entity_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]],
                  mode: str = 'conlleval') -> dict:
  """Micro `precision`, `recall`, `f1` over all sentences, plus `per_type` {type: scores}."""
  correct, guessed, expected = {}, {}, {}
  for gold_tags, pred_tags in zip(gold, pred, strict=True):
    if len(gold_tags) != len(pred_tags):
      raise ValueError(f'a sentence has {len(gold_tags)} gold tags but {len(pred_tags)} predicted')
    gold_set, pred_set = set(chunks(gold_tags, mode)), set(chunks(pred_tags, mode))
    for table, items in ((expected, gold_set), (guessed, pred_set), (correct, gold_set & pred_set)):
      for kind, _, _ in items:
        table[kind] = table.get(kind, 0) + 1
  total = _prf(sum(correct.values()), sum(guessed.values()), sum(expected.values()))
  total['per_type'] = {k: _prf(correct.get(k, 0), guessed.get(k, 0), expected.get(k, 0))
                       for k in sorted(set(expected) | set(guessed))}
  return total
