"""SQuAD examples -> fixed-length windows `[CLS] question [SEP] context window [SEP]`, as BERT's
run_squad: contexts longer than a window are covered by windows `doc_stride` tokens apart.

Every context token keeps the character span it came from in the original context (the
tokenizer's offsets, stripped of whitespace), so a predicted token span is quoted from the
original text exactly: accents, CJK, emoji and runs of spaces survive any normalisation the
tokenizer does. Training labels are the answer's first and last token inside the window, or
[CLS] (position 0) when the window does not hold the whole answer, or the question has none.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from encoder.data.finetune.squad_examples import QAExample, answer_span
from encoder.data.tokenizer import (
  JsonTokenizer,
  SentencePieceTokenizer,
  Tokenizer,
  WordPieceTokenizer,
)
from encoder.errors import ConfigError, DataError

log = logging.getLogger('encoder')


def token_spans(tokenizer: Tokenizer, texts: list[str]) -> list[tuple[list[int], np.ndarray]]:
  """(ids, [n, 2] character spans) of each text, with the ids `tokenizer.encode` gives."""
  texts = [_without_surrogates(t) for t in texts]
  if isinstance(tokenizer, WordPieceTokenizer | JsonTokenizer):
    encodings = tokenizer.tok.encode_batch(list(texts), add_special_tokens=False)
    raw = [(e.ids, e.offsets) for e in encodings]
  elif isinstance(tokenizer, SentencePieceTokenizer):
    raw = []
    for text, proto in zip(texts, _sp_protos(tokenizer.sp, list(texts)), strict=True):
      chars = _byte_to_char(text)
      raw.append(([p.id for p in proto.pieces],
                  [(chars[p.begin], chars[p.end]) for p in proto.pieces]))
  else:
    raise DataError(f'{type(tokenizer).__name__} gives no character offsets: question '
                    'answering needs a SentencePiece, WordPiece or tokenizer.json tokenizer')
  return [(list(ids), _strip(text, offsets)) for text, (ids, offsets) in
          zip(texts, raw, strict=True)]


def _without_surrogates(text: str) -> str:
  """Lone surrogates (from bad JSON escapes) -> U+FFFD one for one, so offsets stay valid."""
  try:
    text.encode('utf-8')
    return text
  except UnicodeEncodeError:
    return ''.join('\ufffd' if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def _sp_protos(sp, texts: list[str]) -> list:
  """SentencePiece's pieces with their byte offsets (the API changed within 0.2.x)."""
  try:
    return sp.encode(texts, return_type='proto')
  except TypeError:
    return sp.encode(texts, out_type='immutable_proto')


def _byte_to_char(text: str) -> np.ndarray:
  """Character index of every UTF-8 byte offset (and of the end)."""
  sizes = np.array([len(c.encode('utf-8')) for c in text], np.int64)
  out = np.repeat(np.arange(len(text)), sizes)
  return np.append(out, len(text))


def trim_span(text: str, start: int, end: int) -> tuple[int, int]:
  """The span without whitespace at its ends; a whitespace-only span becomes empty at its end."""
  while start < end and text[start].isspace():
    start += 1
  while end > start and text[end - 1].isspace():
    end -= 1
  return start, end


def _strip(text: str, offsets) -> np.ndarray:
  """Token spans without surrounding whitespace."""
  return np.array([trim_span(text, b, e) for b, e in offsets], np.int64).reshape(-1, 2)


@dataclasses.dataclass
class Window:
  """One feature row: context tokens [doc_start, doc_start + doc_length) of example `example`,
  placed from row position `offset` on (after [CLS] question [SEP])."""
  example: int
  doc_start: int
  doc_length: int
  offset: int


@dataclasses.dataclass
class Features:
  arrays: dict[str, np.ndarray]  # model inputs, start/end_positions, weight: a row per window
  windows: list[Window]
  spans: list[np.ndarray]  # per example: [context tokens, 2] character spans
  best_window: list[np.ndarray]  # per example and context token: the row with most context
  stats: dict


def doc_windows(num_tokens: int, max_tokens: int, stride: int) -> list[tuple[int, int]]:
  """(start, length) of run_squad's sliding windows: `stride` apart, the last reaching the end."""
  windows, start = [], 0
  while True:
    length = min(num_tokens - start, max_tokens)
    windows.append((start, length))
    if start + length >= num_tokens:
      return windows
    start += min(length, stride)


def max_context_rows(windows: list[tuple[int, int]], rows: list[int], num_tokens: int
                     ) -> np.ndarray:
  """Per token, the row whose window gives it the most context on its shorter side (+ 0.01 x the
  window length; the first window wins ties): run_squad's `_check_is_max_context`."""
  best = np.full(num_tokens, -1, np.int64)
  score = np.full(num_tokens, -np.inf)
  for (start, length), row in zip(windows, rows, strict=True):
    j = np.arange(start, start + length)
    s = np.minimum(j - start, start + length - 1 - j) + 0.01 * length
    better = s > score[j]
    best[j[better]], score[j[better]] = row, s[better]
  return best


def check_lengths(max_seq_length: int, max_query_length: int, doc_stride: int) -> None:
  if max_query_length < 1 or max_seq_length - max_query_length - 3 < 1:
    raise ConfigError(f'data.max_query_length={max_query_length} leaves no room for the context '
                      f'in data.max_seq_length={max_seq_length} (needs query + 3 < max_seq_length)')
  if doc_stride < 1:
    raise ConfigError(f'data.doc_stride={doc_stride} must be positive')


def build_features(tokenizer: Tokenizer, examples: list[QAExample], max_seq_length: int,
                   doc_stride: int, max_query_length: int, labels: bool = False,
                   mismatch: str = 'error') -> Features:
  """Windows of every example, with start/end positions when `labels` (else all 0).

  Questions are cut to `max_query_length` tokens (counted in the stats and logged). With
  labels, a question whose answer text is not at its answer_start follows `mismatch` (see
  `answer_span`); a question dropped that way has no rows.
  """
  check_lengths(max_seq_length, max_query_length, doc_stride)
  contexts = list(dict.fromkeys(e.context for e in examples))
  tokenized = dict(zip(contexts, token_spans(tokenizer, contexts), strict=True))
  questions = tokenizer.encode_batch([e.question for e in examples]) if examples else []
  ids, offsets, starts, ends = [], [], [], []
  windows, spans, best_rows = [], [], []
  stats = {'examples': len(examples), 'windows': 0, 'questions_truncated': 0,
           'answers_moved': 0, 'answers_skipped': 0, 'answers_inexact': 0,
           'answers_in_no_window': 0}
  for index, (example, question) in enumerate(zip(examples, questions, strict=True)):
    doc_ids, doc_spans = tokenized[example.context]
    spans.append(doc_spans)
    if len(question) > max_query_length:
      stats['questions_truncated'] += 1
      question = question[:max_query_length]
    target = None
    if labels and example.answers:
      target = _answer_tokens(example, doc_spans, mismatch, stats)
      if target is None:
        best_rows.append(np.zeros(len(doc_ids), np.int64))
        continue
    offset = len(question) + 2
    spans_here = doc_windows(len(doc_ids), max_seq_length - len(question) - 3, doc_stride)
    rows = list(range(len(windows), len(windows) + len(spans_here)))
    best_rows.append(max_context_rows(spans_here, rows, len(doc_ids)))
    inside = False
    for start, length in spans_here:
      windows.append(Window(index, start, length, offset))
      ids.append([tokenizer.cls_id, *question, tokenizer.sep_id,
                  *doc_ids[start:start + length], tokenizer.sep_id])
      offsets.append(offset)
      s = e = 0
      if target is not None and start <= target[0] and target[1] < start + length:
        s, e, inside = target[0] - start + offset, target[1] - start + offset, True
      starts.append(s)
      ends.append(e)
    if target is not None and not inside:
      stats['answers_in_no_window'] += 1
  stats['windows'] = len(windows)
  for key, what in (('questions_truncated', f'questions cut to data.max_query_length='
                     f'{max_query_length} tokens'),
                    ('answers_moved', 'answers whose text was not at answer_start, moved to its '
                     'nearest occurrence (data.answer_start_mismatch=nearest)'),
                    ('answers_skipped', 'questions dropped: answer text not at answer_start '
                     '(data.answer_start_mismatch=skip) or covered by no token'),
                    ('answers_inexact', 'answers not on token boundaries (their labels cover '
                     'the whole tokens)'),
                    ('answers_in_no_window', 'answers longer than a window (labelled [CLS])')):
    if stats[key]:
      log.warning('%d of %d %s', stats[key], len(examples), what)
  return Features(_pad(ids, offsets, starts, ends, max_seq_length, tokenizer.pad_id),
                  windows, spans, best_rows, stats)


def _answer_tokens(example: QAExample, doc_spans: np.ndarray, mismatch: str, stats: dict
                   ) -> tuple[int, int] | None:
  """First and last context token overlapping the (checked) answer span; None: drop it."""
  span = answer_span(example, mismatch)
  if span is not None:
    stats['answers_moved'] += span[0] != example.answers[0][1]
    overlap = np.flatnonzero((doc_spans[:, 0] < span[1]) & (doc_spans[:, 1] > span[0]))
    if len(overlap):
      first, last = int(overlap[0]), int(overlap[-1])
      if (doc_spans[first, 0], doc_spans[last, 1]) != trim_span(example.context, *span):
        stats['answers_inexact'] += 1
      return first, last
    log.warning('%s: no token covers the answer %r (dropped)', example.where,
                example.answers[0][0])
  stats['answers_skipped'] += 1
  return None


def _pad(ids: list[list[int]], offsets: list[int], starts: list[int], ends: list[int],
         max_len: int, pad_id: int) -> dict[str, np.ndarray]:
  """Rows padded to max_len; segment 1 is the context window and its closing [SEP]."""
  n = len(ids)
  out = {'input_ids': np.full((n, max_len), pad_id, np.int32),
         'segment_ids': np.zeros((n, max_len), np.int32),
         'input_mask': np.zeros((n, max_len), np.int32),
         'start_positions': np.asarray(starts, np.int32).reshape(n),
         'end_positions': np.asarray(ends, np.int32).reshape(n),
         'weight': np.ones(n, np.float32)}
  for i, (row, offset) in enumerate(zip(ids, offsets, strict=True)):
    out['input_ids'][i, :len(row)] = row
    out['input_mask'][i, :len(row)] = 1
    out['segment_ids'][i, offset:len(row)] = 1
  return out
