"""Pretraining rows packed from documents (`data.packing=documents` or `full_sentences`).

BERT's sentence pairs leave a row part empty whenever a pair is short, and NSP needs them; MLM
alone does not. A packed row is filled to `max_seq_length` with consecutive tokens of the
shard's documents, in corpus order: a document that does not fit is split, its rest opens the
next row. Since the documents of a shard lie contiguous in its flat token array, a row is again
one token range, stored in the instances' A columns (a_start, a_len; B is empty, NSP 0), and
where documents start inside it follows from the shard's document starts (`doc_starts`, saved
beside the instances).

Two layouts of the same ranges:
  documents       [CLS] piece [SEP] [CLS] piece [SEP] ...: every piece (the part of one document
                  in the row) is its own example: `input_segmentation` 1, 2, ... keeps attention
                  inside it, `input_positions` restart at its [CLS]. The default: each token sees
                  only its own document, as when unpacked, while no compute goes to padding
                  (ModernBERT's unpadded packing).
  full_sentences  [CLS] piece [SEP] piece [SEP] ...: RoBERTa's FULL-SENTENCES, one example per
                  row, attention crossing document boundaries (a [SEP] marks them); positions
                  0..L-1. Cheaper on every attention path (no block mask) but a token may attend
                  to an unrelated document.
The rows are a pure function of (tokens, document starts, length, layout, seed), so every worker
count and Beam write the same bits. `data.dupe_factor` passes start each pass with a shorter
first row (seeded), so the passes cut their rows at different places.
"""

from __future__ import annotations

import random

import numpy as np

from encoder.data.pretrain.instances import A_LEN, A_START, TokenizedCorpus

LAYOUTS = ('documents', 'full_sentences')
# The shortest piece a row opens for the next document when the row is nearly full: a 1-3 token
# fragment cut off a document teaches MLM nothing and costs its [CLS]/[SEP]; a document's own
# shorter remainder is always placed.
MIN_PIECE = 8


def doc_starts(corpus: TokenizedCorpus) -> np.ndarray:
  """int64 [num_documents + 1]: token offset of each document's start, then the end."""
  return np.asarray(corpus.sent_bounds[corpus.doc_bounds], np.int64)


def _overhead(layout: str) -> tuple[int, int]:
  """(special tokens per row, special tokens per piece) of a layout."""
  return (0, 2) if layout == 'documents' else (1, 1)


def create_rows(corpus: TokenizedCorpus, max_seq_length: int, layout: str, passes: int,
                seed: int) -> np.ndarray:
  """int64 [N, 5] rows (a_start, a_len, 0, 0, 0) from `passes` passes over the corpus."""
  if layout not in LAYOUTS:
    raise ValueError(f'unknown packed layout {layout!r}: {LAYOUTS}')
  starts = doc_starts(corpus)
  rng = random.Random(seed)
  out = []
  for p in range(passes):
    first_budget = max_seq_length if p == 0 else rng.randint(max_seq_length // 2, max_seq_length)
    out.extend(_pack(starts, max_seq_length, layout, first_budget))
  rows = np.zeros((len(out), 5), np.int64)
  if out:
    rows[:, [A_START, A_LEN]] = np.asarray(out, np.int64)
  return rows


def _pack(starts: np.ndarray, length: int, layout: str, first_budget: int) -> list[tuple]:
  """Greedy fill of rows of `length` tokens (the first one `first_budget`) over all tokens."""
  per_row, per_piece = _overhead(layout)
  end, doc, pos = int(starts[-1]), 0, int(starts[0])
  rows, budget = [], first_budget
  while pos < end:
    row_start, used = pos, per_row
    while pos < end:
      doc_end = int(starts[doc + 1])
      room = budget - used - per_piece
      if room < 1 or (room < min(MIN_PIECE, doc_end - pos) and pos > row_start):
        break
      take = min(room, doc_end - pos)
      used, pos = used + take + per_piece, pos + take
      if pos == doc_end:  # (tokenize_documents leaves no empty document to skip)
        doc += 1
    rows.append((row_start, pos - row_start))
    budget = length
  return rows


def piece_starts(rows: np.ndarray, starts: np.ndarray, max_seq_length: int) -> np.ndarray:
  """Bool [N, max_seq_length]: content offset j of row r begins a new document (j > 0).

  Computed from absolute token offsets, before the reader rebases rows onto a compact array."""
  out = np.zeros((len(rows), max_seq_length), bool)
  a, n = rows[:, A_START], rows[:, A_LEN]
  lo = np.searchsorted(starts, a, side='right')  # the first start after each row's first token
  count = np.searchsorted(starts, a + n, side='left') - lo  # starts inside each row
  row = np.repeat(np.arange(len(rows)), count)
  k = np.arange(len(row)) - np.repeat(np.cumsum(count) - count, count) + lo[row]
  out[row, starts[k] - a[row]] = True
  return out


def materialize_packed(rows: np.ndarray, tokens: np.ndarray, breaks: np.ndarray,
                       max_seq_length: int, layout: str, cls_id: int, sep_id: int,
                       pad_id: int) -> dict[str, np.ndarray]:
  """The padded rows of a batch in `layout`, from rows rebased onto `tokens` and their
  `piece_starts`; the same fields as `instances.materialize`, plus, for `documents`,
  `input_segmentation` and `input_positions`."""
  b, length = len(rows), max_seq_length
  content = np.arange(length)[None, :]
  n = rows[:, A_LEN, None]
  real = content < n  # content offsets in use
  new_piece = breaks | (content == 0)
  piece = np.cumsum(new_piece & real, axis=1)  # 1-based piece of each content offset
  per_row, per_piece = _overhead(layout)
  # Output position of content offset j in piece p: j plus the specials before it: p [CLS]s and
  # p - 1 closing [SEP]s (documents), or the row's [CLS] and p - 1 [SEP]s (full_sentences).
  out_pos = content + per_row + (2 * piece - 1 if layout == 'documents' else piece - 1)
  ids = np.full((b, length), pad_id, np.int64)
  segmentation = np.zeros((b, length), np.int64)
  eligible = np.zeros((b, length), bool)
  r_idx = np.broadcast_to(np.arange(b)[:, None], (b, length))
  src = np.where(real, rows[:, A_START, None] + content, 0)
  ids[r_idx[real], out_pos[real]] = tokens[src[real]]
  eligible[r_idx[real], out_pos[real]] = True
  segmentation[r_idx[real], out_pos[real]] = piece[real]
  pieces = piece[:, -1]
  total = n[:, 0] + per_row + per_piece * pieces
  # Specials: the slot before each piece's first token is its [CLS] (documents) or the row's
  # [CLS] / the previous piece's [SEP] (full_sentences); the slot after its last is its [SEP].
  first = new_piece & real
  last = real & np.concatenate([new_piece[:, 1:] | ~real[:, 1:], np.ones((b, 1), bool)], 1)
  ids[r_idx[first], out_pos[first] - 1] = cls_id if layout == 'documents' else sep_id
  ids[r_idx[last], out_pos[last] + 1] = sep_id
  if layout == 'full_sentences':
    ids[np.flatnonzero(n[:, 0] > 0), 0] = cls_id
  if layout == 'documents':
    segmentation[r_idx[first], out_pos[first] - 1] = piece[first]
    segmentation[r_idx[last], out_pos[last] + 1] = piece[last]
  mask = content < total[:, None]
  batch = {
    'input_ids': ids.astype(np.int32),
    'segment_ids': np.zeros((b, length), np.int32),
    'input_mask': mask.astype(np.int32),
    'nsp_label': np.zeros(b, np.int32),
    'eligible': eligible,
  }
  if layout == 'documents':
    batch['input_segmentation'] = segmentation.astype(np.int32)
    batch['input_positions'] = _restarting_positions(segmentation).astype(np.int32)
  return batch


def _restarting_positions(segmentation: np.ndarray) -> np.ndarray:
  """0, 1, ... within each run of one example id (padding: 0, 1, ... too, unused)."""
  b, length = segmentation.shape
  index = np.broadcast_to(np.arange(length), (b, length))
  change = np.ones((b, length), bool)
  change[:, 1:] = segmentation[:, 1:] != segmentation[:, :-1]
  run_start = np.maximum.accumulate(np.where(change, index, 0), axis=1)
  return index - run_start
