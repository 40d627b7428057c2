"""Encoded contrastive data: each role's texts padded on their own, seeded resumable batches.

A contrastive example is several texts (anchor, positive, hard negatives), each encoded alone
as [CLS] text [SEP]: arrays `<role>_ids` / `<role>_mask` for role anchor and positive
([examples, max_len]) and negative ([examples, k, max_len]; absent negatives have an all-zero
mask and weigh nothing), `score` (scored pairs), `weight` (0: a filler row) and `group` (the
anchor's id: two examples of one anchor, a query with two relevant documents, are not each
other's negatives).

Batches come from the pretraining loader's `Sampler`/`BatchIterator` (exact resume, host
shards) in uniformly random order: grouping by length, as the classification data does,
would fill a batch with texts of one length, whose in-batch negatives are then easier to tell
apart by length alone. Each role is cut to the bucket (`data.length_buckets`) of its longest
text in the global batch, so short queries are not padded to a document's length.
"""

from __future__ import annotations

import math

import numpy as np

from encoder.data.finetune import finetuning_data
from encoder.data.finetune import length_buckets as buckets_lib
from encoder.data.finetune.text_pairs import TextPair
from encoder.data.loader import BatchIterator, Sampler, restore_step
from encoder.data.tokenizer import Tokenizer

Arrays = dict[str, np.ndarray]
ROLES = ('anchor', 'positive', 'negative')


def encode(tokenizer: Tokenizer, examples: list[TextPair], max_len: int,
           num_negatives: int) -> Arrays:
  """The examples' arrays (see the module docstring); negatives past `num_negatives` dropped."""
  n = len(examples)
  arrays = {'anchor': _encode(tokenizer, [e.anchor for e in examples], max_len),
            'positive': _encode(tokenizer, [e.positive for e in examples], max_len)}
  negatives = np.zeros((n, num_negatives, 2, max_len), np.int32)
  flat = [(i, j, t) for i, e in enumerate(examples) for j, t in enumerate(e.negatives)
          if j < num_negatives]
  if flat:
    ids, mask = _encode(tokenizer, [t for *_, t in flat], max_len)
    rows, slots = np.asarray([i for i, *_ in flat]), np.asarray([j for _, j, _ in flat])
    negatives[rows, slots, 0], negatives[rows, slots, 1] = ids, mask
  out = {'anchor_ids': arrays['anchor'][0], 'anchor_mask': arrays['anchor'][1],
         'positive_ids': arrays['positive'][0], 'positive_mask': arrays['positive'][1],
         'negative_ids': negatives[:, :, 0], 'negative_mask': negatives[:, :, 1]}
  _, group = np.unique([e.anchor for e in examples], return_inverse=True)
  out['group'] = group.astype(np.int32).reshape(n)
  out['score'] = np.asarray([e.score or 0.0 for e in examples], np.float32)
  out['weight'] = np.ones(n, np.float32)
  return out


def _encode(tokenizer: Tokenizer, texts: list[str], max_len: int) -> tuple[np.ndarray, ...]:
  """(ids, mask) of [CLS] text [SEP] each, as the classification data encodes one text."""
  arrays = finetuning_data.encode_texts(tokenizer, [(t,) for t in texts], max_len)
  return arrays['input_ids'], arrays['input_mask']


def role_lengths(arrays: Arrays) -> dict[str, np.ndarray]:
  """Each example's longest text per role (tokens): what `cut` buckets a batch by."""
  return {role: arrays[f'{role}_mask'].reshape(len(arrays['weight']), -1, arrays[
      f'{role}_mask'].shape[-1]).sum(-1).max(-1, initial=0) for role in ROLES
          if f'{role}_mask' in arrays}


def cut(arrays: Arrays, rows: np.ndarray, buckets: tuple[int, ...] | None,
        longest: dict[str, int]) -> Arrays:
  """The rows' arrays with each role cut to the bucket of `longest[role]` (its longest text
  in the global batch, so every host cuts alike)."""
  out = {k: v[rows] for k, v in arrays.items()}
  if buckets is None:
    return out
  for role, tokens in longest.items():
    length = buckets_lib.bucket_of(buckets, max(int(tokens), 1))
    for field in ('ids', 'mask'):
      out[f'{role}_{field}'] = out[f'{role}_{field}'][..., :length]
  return out


class ContrastiveData:
  """`.tokenizer`, `.train_iterator(state)`, `.eval_batches(n)`, `.collate_predictions`,
  `.stats`, `.eval_sets`, `.num_train_examples`, `.steps_per_epoch` (None: examples / batch)."""

  def __init__(self, config, tokenizer: Tokenizer, train: Arrays, eval_sets: list,
               process_index: int = 0, process_count: int = 1, info: dict | None = None):
    self.tokenizer, self.eval_sets, self.info = tokenizer, eval_sets, info or {}
    self.global_batch = int(config.train.batch_size)
    self.process_index, self.process_count = process_index, process_count
    self.prefetch = int(config.data.prefetch)
    self._train, self._lengths = train, role_lengths(train)
    self.num_train_examples = len(train['weight'])
    self.steps_per_epoch = None
    self.max_seq_length = train['anchor_ids'].shape[1]
    self.buckets = buckets_lib.parse_buckets(config.data.length_buckets, self.max_seq_length)
    self._sampler = Sampler(self.num_train_examples, self.global_batch,
                            int(config.train.seed))
    self.stats = {'train': {'examples': self.num_train_examples}}
    for s in eval_sets:
      self.stats[s.name] = {'examples': len(s.examples)}

  def _per_host(self, rows: np.ndarray) -> np.ndarray:
    per_host = len(rows) // self.process_count
    return rows[self.process_index * per_host:(self.process_index + 1) * per_host]

  def train_iterator(self, state: dict | None = None) -> BatchIterator:
    return BatchIterator(self.train_batch, restore_step(state), self.prefetch)

  def train_batch(self, step: int) -> Arrays:
    rows = self._sampler.indices(step)  # the global batch: its lengths set every host's cut
    return cut(self._train, self._per_host(rows), self.buckets, longest_in(self._lengths, rows))

  def eval_batches(self, num_batches: int = 0) -> list[Arrays]:
    """Every eval example once, in order, as this host's share of global batches; the last
    batch is filled with copies of the first example weighing 0."""
    merged = {k: np.concatenate([s.arrays[k] for s in self.eval_sets])
              for k in self.eval_sets[0].arrays}
    lengths, n = role_lengths(merged), len(merged['weight'])
    if num_batches > 0:
      n = min(n, num_batches * self.global_batch)
    total = max(math.ceil(n / self.global_batch), 1) * self.global_batch
    rows = np.concatenate([np.arange(n), np.zeros(total - n, np.int64)])
    real = (np.arange(total) < n).astype(np.float32)
    batches = []
    for start in range(0, total, self.global_batch):
      global_rows = rows[start:start + self.global_batch]
      batch = cut(merged, self._per_host(global_rows), self.buckets,
                  longest_in(lengths, global_rows))
      batch['weight'] = batch['weight'] * self._per_host(real[start:start + self.global_batch])
      batches.append(batch)
    return batches

  def collate_predictions(self, per_batch: list[Arrays]) -> Arrays:
    return {k: np.concatenate([b[k] for b in per_batch]) for k in per_batch[0]}


def longest_in(lengths: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, int]:
  """Each role's longest text among `rows` (of `role_lengths`)."""
  return {role: int(v[rows].max(initial=0)) for role, v in lengths.items()}
