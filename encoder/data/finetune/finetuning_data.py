"""Encoded fine-tuning data: padded arrays, seeded resumable batches, whole eval sets.

The same object serves classification, tagging and QA: the task encodes its examples into named
arrays (leading dimension = examples; 2-D arrays are per token, padded to max_seq_length) and
this class batches them with the pretraining loader's `Sampler`/`BatchIterator`, so order, host
sharding and exact resumption work the same. With `data.length_buckets` (see `buckets`), each
batch is cut to the shortest bucket that holds its longest example, train batches are grouped by
length, and eval examples are batched in length order.

With `data.packing=examples` (see `packing`) several examples share each row instead: every
step is `packing.rows_per_step` rows of max_seq_length tokens, and `steps_per_epoch` tells the
run's length (None unpacked: there it is examples / batch size).

Eval batches cover every eval example exactly once; the last batch is filled with copies of one
row (packed: empty rows) whose weights are zero, so they count in no metric.
`collate_predictions` puts the per-batch predictions back into eval-set order at full length,
whatever the batching was.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from typing import Any

import numpy as np

from encoder.data.finetune import length_buckets as buckets_lib
from encoder.data.finetune import packing as packing_lib
from encoder.data.loader import BatchIterator, Sampler, restore_step
from encoder.data.tokenizer import Tokenizer, get_tokenizer

log = logging.getLogger('encoder')
Arrays = dict[str, np.ndarray]


@dataclasses.dataclass
class EvalSet:
  """One eval set: its name (metrics of sets after the first get `_<name>`), examples, arrays."""
  name: str
  examples: list
  arrays: Arrays
  extra: Any = None  # per-example host data the task needs to decode (e.g. word positions)


class FinetuningData:
  """`.tokenizer`, `.train_iterator(state)`, `.eval_batches(n)`, `.stats`, `.eval_sets`, and
  `.steps_per_epoch`: packed, epoch 0's steps (each epoch packs its own order, so later ones may
  take a step more or less); None unpacked."""

  def __init__(self, config, tokenizer: Tokenizer, train: Arrays, eval_sets: list[EvalSet],
               weight_keys: tuple[str, ...], process_index: int = 0, process_count: int = 1,
               info: dict | None = None, token_predictions: dict[str, float] | None = None):
    d = config.data
    self.tokenizer, self.eval_sets, self.info = tokenizer, eval_sets, info or {}
    self.seed, self.global_batch = int(config.train.seed), int(config.train.batch_size)
    self.process_index, self.process_count = process_index, process_count
    self.prefetch = int(d.prefetch)
    self._train, self._weight_keys = train, weight_keys
    # The per-token prediction fields, each with what the model predicts at padding: past a
    # batch's bucket they are filled with it.
    self._token_predictions = token_predictions or {}
    self.num_train_examples = len(next(iter(train.values())))
    self.max_seq_length = train['input_ids'].shape[1]
    self.buckets = buckets_lib.parse_buckets(d.length_buckets,
                                             self.max_seq_length)
    self._packed, self.steps_per_epoch = None, None
    self._eval_packed = None  # the packed eval plan `collate_predictions` reads back
    if packing_lib.packing_mode(config) == 'examples':
      if self.buckets is not None:  # rows are max_seq_length long: there is nothing to cut
        log.info("data.length_buckets='%s' is ignored with data.packing=examples",
                 d.length_buckets)
        self.buckets = None
      self._packed = packing_lib.PackedSampler(
          train, packing_lib.rows_per_step(config, train['input_mask'].sum(1),
                                           self.max_seq_length), self.seed, self.global_batch)
      self.steps_per_epoch = self._packed.plan(0).num_steps
      log.info('%s', self._packed.describe(self.global_batch))
    elif self.buckets is None:
      self._sampler = Sampler(self.num_train_examples, self.global_batch, self.seed)
    else:
      self._sampler = buckets_lib.LengthGroupedSampler(
          train['input_mask'].sum(1), self.global_batch, self.seed,
          d.bucket_window, self.buckets)
    self._eval_order = None  # eval example i is row _eval_order[i] of the gathered predictions
    self.stats = {'train': {'examples': self.num_train_examples}}
    for s in eval_sets:
      self.stats[s.name] = {'examples': len(s.examples)}

  def train_iterator(self, state: dict[str, Any] | None = None) -> BatchIterator:
    return BatchIterator(self.train_batch, restore_step(state), self.prefetch)

  def train_batch(self, step: int) -> Arrays:
    if self._packed is not None:
      return self._packed.batch(step, self.process_index, self.process_count)
    if self.buckets is None:
      idx = self._sampler.indices(step, self.process_index, self.process_count)
      return {k: v[idx] for k, v in self._train.items()}
    idx, length = self._sampler.indices(step, self.process_index, self.process_count)
    return buckets_lib.trim(self._train, idx, length)

  def eval_batches(self, num_batches: int = 0) -> list[Arrays]:
    """All eval sets as this host's share of global batches (`num_batches` > 0: only the first
    ones' worth of examples, for a quick look; predictions then cover only those examples).
    With buckets the examples go in length order, each batch cut to its bucket."""
    merged = {k: np.concatenate([s.arrays[k] for s in self.eval_sets])
              for k in self.eval_sets[0].arrays}
    if self._packed is not None:  # num_batches counts packed steps
      self._eval_packed = packing_lib.PackedEval(merged, self._packed.rows, num_batches)
      return self._eval_packed.batches(self.process_index, self.process_count)
    n = len(next(iter(merged.values())))
    if num_batches > 0:
      n = min(n, num_batches * self.global_batch)
    lengths = merged['input_mask'].sum(1)
    order = np.arange(n)
    if self.buckets is not None:
      order = np.argsort(lengths[:n], kind='stable')
    self._eval_order = np.argsort(order, kind='stable')
    total = max(math.ceil(n / self.global_batch), 1) * self.global_batch
    rows = np.concatenate([order, np.full(total - n, order[0] if n else 0)])
    real = np.arange(total) < n  # filler rows (to a whole batch) weigh nothing
    per_host = self.global_batch // self.process_count
    batches = []
    for start in range(0, total, self.global_batch):
      length = self.max_seq_length
      if self.buckets is not None:  # from the global batch, so every host pads it alike
        longest = lengths[rows[start:start + self.global_batch]].max()
        length = buckets_lib.bucket_of(self.buckets, int(longest))
      mine = slice(start + self.process_index * per_host,
                   start + (self.process_index + 1) * per_host)
      batch = buckets_lib.trim(merged, rows[mine], length)
      for k in self._weight_keys:
        batch[k] = batch[k] * real[mine].reshape((-1,) + (1,) * (batch[k].ndim - 1))
      batches.append(batch)
    return batches

  def collate_predictions(self, per_batch: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Gathered predictions of `eval_batches` (one dict per global batch) -> one array per
    field in eval-set order, per-token fields padded back to max_seq_length."""
    if self._packed is not None:
      return self._eval_packed.collate(per_batch, self._token_predictions)
    fields = {}
    for k in per_batch[0]:
      parts = [batch[k] for batch in per_batch]
      if k in self._token_predictions:
        parts = [np.pad(v, [(0, 0), (0, self.max_seq_length - v.shape[1])]
                        + [(0, 0)] * (v.ndim - 2), constant_values=self._token_predictions[k])
                 for v in parts]
      fields[k] = np.concatenate(parts)[self._eval_order]
    return fields


def finetuning_tokenizer(config, workdir: str, texts: list[str]) -> Tokenizer:
  """The run's tokenizer: the workdir's on resume, `data.tokenizer` (set by init_from), or a
  SentencePiece model trained on the training texts (fine-tuning from scratch: smoke runs)."""
  cache_dir = config.data.cache_dir or os.path.join(workdir, 'cache')
  return get_tokenizer(config, workdir, [[t] for t in texts if t.strip()], cache_dir)


def truncate_pair(a: list[int], b: list[int], budget: int) -> None:
  """BERT's `_truncate_seq_pair`, in place: pop from the end of the longer (B on ties)."""
  while len(a) + len(b) > budget:
    (a if len(a) > len(b) else b).pop()


def encode_texts(tokenizer: Tokenizer, texts: list[tuple[str, ...]], max_len: int) -> Arrays:
  """[CLS] A [SEP] (B [SEP]) per example, pairs truncated longest-first, padded to max_len."""
  a_ids = tokenizer.encode_batch([t[0] for t in texts])
  pairs = any(len(t) > 1 for t in texts)
  b_ids = tokenizer.encode_batch([t[1] for t in texts]) if pairs else [[] for _ in texts]
  ids = np.full((len(texts), max_len), tokenizer.pad_id, np.int32)
  segments, mask = np.zeros_like(ids), np.zeros_like(ids)
  for i, (a, b) in enumerate(zip(a_ids, b_ids, strict=True)):
    a, b = list(a), list(b)
    truncate_pair(a, b, max_len - (3 if pairs else 2))
    row = [tokenizer.cls_id, *a, tokenizer.sep_id] + ([*b, tokenizer.sep_id] if pairs else [])
    ids[i, :len(row)], mask[i, :len(row)] = row, 1
    segments[i, len(a) + 2:len(row)] = 1
  return {'input_ids': ids, 'segment_ids': segments, 'input_mask': mask}


def encode_words(tokenizer: Tokenizer, sentences: list[list[str]], max_len: int
                 ) -> tuple[Arrays, list[np.ndarray]]:
  """Sub-tokens of each word, [CLS] ... [SEP], and each kept word's first sub-token position.

  Words are tokenized one by one so the word -> sub-token alignment is exact; a word with no
  sub-token becomes [UNK]. Words past max_len - 2 sub-tokens are dropped (and have no position).
  """
  flat = [w for words in sentences for w in words]
  pieces = tokenizer.encode_batch(flat) if flat else []
  ids = np.full((len(sentences), max_len), tokenizer.pad_id, np.int32)
  mask = np.zeros_like(ids)
  positions, k = [], 0
  for i, words in enumerate(sentences):
    row, starts = [tokenizer.cls_id], []
    for _ in words:
      sub = list(pieces[k]) or [tokenizer.unk_id]
      k += 1
      if len(row) + len(sub) > max_len - 1:
        k += len(words) - len(starts) - 1
        break
      starts.append(len(row))
      row.extend(sub)
    row.append(tokenizer.sep_id)
    ids[i, :len(row)], mask[i, :len(row)] = row, 1
    positions.append(np.asarray(starts, np.int32))
  return {'input_ids': ids, 'segment_ids': np.zeros_like(ids), 'input_mask': mask}, positions
