"""Sentence-pair instances exactly as google-research/bert create_pretraining_data.py builds them.

The tokenized corpus is kept flat: one int32 array of tokens, sentence boundaries into it and
document boundaries into the sentences. The sentences of a document are contiguous, so every
segment A or B is one contiguous token range and an instance is just five integers
(a_start, a_len, b_start, b_len, nsp_label); `materialize` builds the padded rows of a batch
with one vectorised gather.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time

import numpy as np
import tqdm

from encoder.errors import DataError

A_START, A_LEN, B_START, B_LEN, NSP = range(5)


@dataclasses.dataclass
class TokenizedCorpus:
  tokens: np.ndarray  # int32 [num_tokens]
  sent_bounds: np.ndarray  # int64 [num_sentences + 1], offsets into tokens
  doc_bounds: np.ndarray  # int64 [num_documents + 1], offsets into sentences

  @property
  def num_documents(self) -> int:
    return len(self.doc_bounds) - 1

  @property
  def num_sentences(self) -> int:
    return len(self.sent_bounds) - 1

  def arrays(self) -> dict[str, np.ndarray]:
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def tokenize_documents(documents: list[list[str]], tokenizer, chunk: int = 20_000,
                       progress: bool = True) -> TokenizedCorpus:
  """Encodes every sentence; drops sentences with no tokens and then empty documents.
  (`progress=False`: no bar, for shard workers, whose parent reports per shard.)"""
  sentences = [s for doc in documents for s in doc]
  doc_of = np.repeat(np.arange(len(documents)), [len(d) for d in documents])
  parts, lengths = [], []
  start = time.time()
  with tqdm.tqdm(total=len(sentences), desc='tokenizing', unit='sent', leave=False,
                 disable=not progress or len(sentences) <= chunk) as bar:
    for i in range(0, len(sentences), chunk):  # numpy per chunk keeps big corpora compact
      ids = tokenizer.encode_batch(sentences[i:i + chunk])
      lengths.append(np.fromiter(map(len, ids), np.int64, count=len(ids)))
      parts.append(np.fromiter((t for x in ids for t in x), np.int32, count=int(lengths[-1].sum())))
      bar.update(len(ids))
  tokens = np.concatenate(parts) if parts else np.zeros(0, np.int32)
  lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
  keep = lengths > 0
  sent_bounds = np.concatenate([[0], np.cumsum(lengths[keep])])
  per_doc = np.bincount(doc_of[keep], minlength=len(documents))
  doc_bounds = np.concatenate([[0], np.cumsum(per_doc[per_doc > 0])])
  logging.info('Tokenized %d sentences into %d tokens in %.1fs', len(sentences), len(tokens),
               time.time() - start)
  return TokenizedCorpus(tokens, sent_bounds, doc_bounds)


def create_instances(corpus: TokenizedCorpus, max_seq_length: int, short_seq_prob: float,
                     nsp: bool, dupe_factor: int, seed: int, progress: bool = True) -> np.ndarray:
  """int64 [N, 5] instances from `dupe_factor` passes over the corpus (each split afresh)."""
  if max_seq_length < 8:
    raise DataError(f'data.max_seq_length={max_seq_length} is too short: use at least 8')
  if corpus.num_documents == 0:
    raise DataError('the corpus has no tokens after tokenization: give it real text')
  rng = random.Random(seed)
  out: list[tuple[int, int, int, int, int]] = []
  start = time.time()
  make = _nsp_instances if nsp else _mlm_instances
  for _ in range(dupe_factor):
    for d in tqdm.trange(corpus.num_documents, desc='instances', leave=False,
                         disable=not progress or corpus.num_documents < 5000):
      make(corpus, d, max_seq_length, short_seq_prob, rng, out)
  logging.info('Created %d instances in %.1fs', len(out), time.time() - start)
  return np.array(out, np.int64).reshape(-1, 5)


def _nsp_instances(corpus, d, max_seq_length, short_seq_prob, rng, out) -> None:
  """create_instances_from_document of the original, on token ranges instead of token lists.

  One deliberate change: the original forces a random B whenever a chunk is a single sentence,
  which skews labels to ~57% NotNext; here the coin is always fair and an IsNext single-sentence
  chunk takes its B from the following sentences (or, at a document's end, splits the sentence).
  """
  sb, db = corpus.sent_bounds, corpus.doc_bounds
  first, last = int(db[d]), int(db[d + 1])  # sentence range of the document
  max_num_tokens = max_seq_length - 3
  target = max_num_tokens
  if rng.random() < short_seq_prob:
    target = rng.randint(2, max_num_tokens)
  chunk_start, i = first, first
  while i < last:
    current_length = int(sb[i + 1] - sb[chunk_start])
    if i == last - 1 or current_length >= target:
      n = i + 1 - chunk_start
      a_end = chunk_start + (rng.randint(1, n - 1) if n >= 2 else 1)  # first sentence not in A
      a_start, a_len = int(sb[chunk_start]), int(sb[a_end] - sb[chunk_start])
      label = int(rng.random() < 0.5)
      if label == 0 and n == 1:  # B must follow A, but the chunk is one sentence
        if i + 1 < last:  # borrow the following sentences
          b_start, j = int(sb[i + 1]), _extend(sb, i + 1, last, target - a_len)
          b_len, i = int(sb[j] - sb[i + 1]), j - 1
        elif a_len >= 2:  # last sentence of the document: split it
          cut = rng.randint(1, a_len - 1)
          a_len, b_start, b_len = cut, a_start + cut, a_len - cut
        else:
          label = 1
      elif label == 0:
        b_start, b_len = int(sb[a_end]), int(sb[i + 1] - sb[a_end])
      if label == 1:
        other = _other_document(d, corpus.num_documents, rng)
        j = rng.randint(int(db[other]), int(db[other + 1]) - 1)
        b_start = int(sb[j])
        b_len = int(sb[_extend(sb, j, int(db[other + 1]), target - a_len)] - b_start)
        i = a_end - 1  # put the unused sentences back
      a_start, a_len, b_start, b_len = _truncate_pair(a_start, a_len, b_start, b_len,
                                                      max_num_tokens, rng)
      out.append((a_start, a_len, b_start, b_len, label))
      chunk_start = i + 1
    i += 1


def _extend(sb, j: int, last: int, target: int) -> int:
  """End (exclusive) of whole sentences from j reaching `target` tokens (at least one)."""
  start = sb[j]
  while True:
    j += 1
    if j == last or sb[j] - start >= target:
      return j


def _other_document(d: int, num_documents: int, rng: random.Random) -> int:
  """A uniformly random document other than d (the original retried 10 times and could fail)."""
  if num_documents == 1:
    return d
  other = rng.randint(0, num_documents - 2)
  return other + 1 if other >= d else other


def _truncate_pair(a_start, a_len, b_start, b_len, max_num_tokens, rng):
  """truncate_seq_pair: trim one token at a time from the longer side, front or back at random."""
  while a_len + b_len > max_num_tokens:
    front = rng.random() < 0.5
    if a_len > b_len:
      a_start, a_len = a_start + front, a_len - 1
    else:
      b_start, b_len = b_start + front, b_len - 1
  return a_start, a_len, b_start, b_len


def _mlm_instances(corpus, d, max_seq_length, short_seq_prob, rng, out) -> None:
  """Full-length runs of whole sentences of one document ([CLS] X [SEP]); long sentences split."""
  sb, db = corpus.sent_bounds, corpus.doc_bounds
  budget = max_seq_length - 2
  bounds = sb[db[d]:db[d + 1] + 1]
  start, end = int(bounds[0]), int(bounds[-1])
  while start < end:
    k = np.searchsorted(bounds, start + budget, side='right') - 1
    stop = int(bounds[k]) if bounds[k] > start else min(start + budget, end)
    out.append((start, stop - start, 0, 0, 0))
    start = stop


def materialize(instances: np.ndarray, tokens: np.ndarray, max_seq_length: int, cls_id: int,
                sep_id: int, pad_id: int) -> dict[str, np.ndarray]:
  """Padded [CLS] A [SEP] B [SEP] rows (or [CLS] A [SEP] when b_len is 0) for a batch."""
  pos = np.arange(max_seq_length)[None, :]
  a_start, a_len = instances[:, A_START, None], instances[:, A_LEN, None]
  b_start, b_len = instances[:, B_START, None], instances[:, B_LEN, None]
  in_a = (pos >= 1) & (pos <= a_len)
  in_b = (pos >= a_len + 2) & (pos < a_len + 2 + b_len)
  idx = np.where(in_a, a_start + pos - 1, np.where(in_b, b_start + pos - a_len - 2, 0))
  ids = np.where(in_a | in_b, tokens[idx], pad_id)
  length = a_len + 2 + np.where(b_len > 0, b_len + 1, 0)
  is_sep = (pos == a_len + 1) | ((pos == length - 1) & (b_len > 0))
  ids = np.where(pos == 0, cls_id, np.where(is_sep, sep_id, ids))
  return {
    'input_ids': ids.astype(np.int32),
    'segment_ids': ((pos >= a_len + 2) & (pos < length)).astype(np.int32),
    'input_mask': (pos < length).astype(np.int32),
    'nsp_label': instances[:, NSP].astype(np.int32),
    'eligible': in_a | in_b,
  }
