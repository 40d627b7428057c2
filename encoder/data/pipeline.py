"""The trainer's one entry point: config -> tokenizer, train iterator, eval batches, stats.

  data = build_pretraining_data(config, workdir, process_index, process_count)
  it = data.train_iterator(state=None); batch = next(it); it.state()
  data.eval_batches(n)

Slow steps (corpus, tokenizer, tokenization, instances) are cached under data.cache_dir (default
WORKDIR/cache), keyed by a hash of everything that made them, so a restart redoes none of them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import numpy as np

from encoder import storage
from encoder.data import cache, corpora, masking, pretraining
from encoder.data.loader import BatchIterator, Sampler, restore_step
from encoder.data.tokenizer import Tokenizer, get_tokenizer
from encoder.errors import ConfigError, DataError

EVAL_SEED = 20190524  # eval split and eval masks are fixed, so runs with any seed compare
_MASK_TAG, _STATIC_TAG = 0x4D41534B, 0x53544154


@dataclasses.dataclass
class Split:
  """One split's token array, instances and (static mask) overlays."""
  tokens: np.ndarray
  instances: np.ndarray
  static: dict[str, np.ndarray] | None  # masked_positions/masked_ids/shown/weights [N, max_pred]


class PretrainingData:
  """Everything the pretraining task needs from the data side, for one host."""

  def __init__(self, config, tokenizer: Tokenizer, train: Split, eval_split: Split,
               stats: dict[str, int], process_index: int, process_count: int):
    d = config.data
    self.tokenizer, self.stats = tokenizer, stats
    self.max_seq_length = int(d.max_seq_length)
    self.mask_config = mask_config(config, tokenizer)
    self.seed, self.global_batch = int(config.train.seed), int(config.train.batch_size)
    self.process_index, self.process_count = process_index, process_count
    self.batch_size = self.global_batch // process_count
    self.prefetch = int(d.prefetch)
    self._train, self._eval = train, eval_split
    self.num_train_examples = len(train.instances)
    self._sampler = Sampler(self.num_train_examples, self.global_batch, self.seed)

  def train_iterator(self, state: dict[str, Any] | None = None) -> BatchIterator:
    """Endless host batches from `state` (None: the start); `it.state()` is the resume point."""
    return BatchIterator(self.train_batch, restore_step(state), self.prefetch)

  def train_batch(self, step: int) -> dict[str, np.ndarray]:
    """This host's share of global batch `step`: a pure function of (seed, step, host)."""
    idx = self._sampler.indices(step, self.process_index, self.process_count)
    # Masks drawn for the global batch (the trailing 0 keeps one-process runs as they were).
    rng = masking.RowSlice(np.random.default_rng([self.seed, _MASK_TAG, step, 0]),
                           self.process_index * self.batch_size, self.global_batch)
    return self._assemble(self._train, idx, rng)

  def eval_batches(self, num_batches: int) -> list[dict[str, np.ndarray]]:
    """The first `num_batches` eval host batches (cycling over the held-out instances)."""
    n = len(self._eval.instances)
    out = []
    for i in range(num_batches):
      first = i * self.global_batch + self.process_index * self.batch_size
      idx = np.arange(first, first + self.batch_size) % n
      out.append(self._assemble(self._eval, idx, None))
    return out

  def _assemble(self, split: Split, idx: np.ndarray, rng) -> dict[str, np.ndarray]:
    tok = self.tokenizer
    batch = pretraining.materialize(split.instances[idx], split.tokens, self.max_seq_length,
                                    tok.cls_id, tok.sep_id, tok.pad_id)
    eligible = batch.pop('eligible')
    if split.static is None:
      batch.update(masking.apply(batch['input_ids'], eligible, rng, self.mask_config))
    else:
      batch.update(overlay(batch['input_ids'], {k: v[idx] for k, v in split.static.items()}))
    return batch


def mask_config(config, tokenizer: Tokenizer) -> masking.MaskConfig:
  d = config.data
  max_pred = d.max_predictions_per_seq
  if max_pred is None:
    max_pred = int(round(d.max_seq_length * d.mask_rate))
  if not 0 < d.mask_rate < 1 or max_pred < 1:
    raise ConfigError(f'data.mask_rate={d.mask_rate} and data.max_predictions_per_seq={max_pred}'
                      ' must give at least one prediction: use 0 < mask_rate < 1')
  if d.mask_token_prob < 0 or d.random_token_prob < 0 or \
     d.mask_token_prob + d.random_token_prob > 1:
    raise ConfigError('data.mask_token_prob + data.random_token_prob must lie in [0, 1]')
  specials = tokenizer.special_ids
  return masking.MaskConfig(
    mask_rate=float(d.mask_rate), max_predictions=int(max_pred),
    mask_token_prob=float(d.mask_token_prob), random_token_prob=float(d.random_token_prob),
    whole_word=bool(d.whole_word_masking), mask_id=tokenizer.mask_id,
    random_ids=np.setdiff1d(np.arange(tokenizer.vocab_size), specials).astype(np.int32),
    word_starts=tokenizer.word_starts)


def static_masks(split_tokens, instances, config, tokenizer, seed) -> dict[str, np.ndarray]:
  """Masks fixed once per instance (dupe_factor copies differ), from `seed`, in chunks."""
  cfg = mask_config(config, tokenizer)
  rng = np.random.default_rng([seed, _STATIC_TAG])
  parts = []
  for i in range(0, len(instances), 4096):
    batch = pretraining.materialize(instances[i:i + 4096], split_tokens,
                                    int(config.data.max_seq_length), tokenizer.cls_id,
                                    tokenizer.sep_id, tokenizer.pad_id)
    m = masking.apply(batch['input_ids'], batch['eligible'], rng, cfg)
    shown = np.take_along_axis(m['input_ids'], m['masked_positions'], axis=1)
    parts.append({'masked_positions': m['masked_positions'], 'masked_ids': m['masked_ids'],
                  'shown': np.where(m['masked_weights'] > 0, shown, 0),
                  'weights': m['masked_weights'] > 0})
  return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {}


def overlay(input_ids: np.ndarray, static: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Applies stored masks to freshly materialised rows."""
  weights = static['weights']
  pos = static['masked_positions']
  out = input_ids.copy()
  rows = np.broadcast_to(np.arange(len(out))[:, None], pos.shape)
  out[rows[weights], pos[weights]] = static['shown'][weights]
  return {'input_ids': out, 'masked_positions': pos.astype(np.int32),
          'masked_ids': static['masked_ids'].astype(np.int32),
          'masked_weights': weights.astype(np.float32)}


def split_documents(docs: list[list[str]], eval_fraction: float, max_eval: int
                    ) -> tuple[list[list[str]], list[list[str]]]:
  """Holds out whole documents, chosen by a fixed seed: at least one, at most max_eval."""
  if len(docs) < 2:
    raise DataError(f'the corpus has {len(docs)} document(s); holding out an eval split needs at '
                    'least 2: add documents (separate them by a blank line in text files)')
  n_eval = min(max(1, round(eval_fraction * len(docs))), max(1, int(max_eval)), len(docs) - 1)
  chosen = set(np.random.default_rng(EVAL_SEED).permutation(len(docs))[:n_eval].tolist())
  train = [doc for i, doc in enumerate(docs) if i not in chosen]
  return train, [doc for i, doc in enumerate(docs) if i in chosen]


def build_pretraining_data(config, workdir: str, process_index: int = 0,
                           process_count: int = 1) -> PretrainingData:
  """Loads or builds (and caches) everything; see the module docstring for the interface."""
  d, t = config.data, config.train
  if t.batch_size < 1 or d.dupe_factor < 1:
    raise ConfigError(f'train.batch_size={t.batch_size} and data.dupe_factor={d.dupe_factor} '
                      'must be at least 1')
  if t.batch_size % process_count:
    raise ConfigError(f'train.batch_size={t.batch_size} does not divide among {process_count} '
                      'hosts: make it a multiple of the host count')
  if not 0 <= process_index < process_count:
    raise ConfigError(f'process_index={process_index} is outside 0..{process_count - 1}')
  cache_dir = d.cache_dir or os.path.join(workdir, 'cache')
  documents = corpora.load_documents(d.corpus, cache_dir, d.get('tfds_data_dir') or None)
  train_docs, eval_docs = split_documents(documents, d.eval_fraction, d.max_eval_documents)
  tokenizer = get_tokenizer(config, workdir, train_docs, cache_dir)
  tok_dir = os.path.join(workdir, 'tokenizer')
  tok_key = cache.file_digest([os.path.join(tok_dir, f) for f in storage.listdir(tok_dir)])
  corpus_key = {'corpus': d.corpus, 'documents': cache.digest(documents), 'tokenizer': tok_key,
                'eval_fraction': d.eval_fraction, 'max_eval_documents': d.max_eval_documents}
  splits, stats = {}, {'vocab_size': tokenizer.vocab_size}
  eval_config = _eval_config(config)
  for name, docs, seed, dupe, static in (
      ('train', train_docs, int(t.seed), int(d.dupe_factor), not d.dynamic_masking),
      ('eval', eval_docs, EVAL_SEED, 1, True)):
    tokens = _cached(cache_dir, 'tokens', {**corpus_key, 'split': name},
                     lambda docs=docs: pretraining.tokenize_documents(docs, tokenizer).arrays())
    corpus = pretraining.TokenizedCorpus(**tokens)
    inst_key = {**corpus_key, 'split': name, 'seed': seed, 'dupe_factor': dupe,
                'max_seq_length': d.max_seq_length, 'short_seq_prob': d.short_seq_prob,
                'nsp': d.nsp, 'version': 1}
    split_config = eval_config if name == 'eval' else config
    if static:
      inst_key.update({k: split_config.data[k] for k in (
          'mask_rate', 'max_predictions_per_seq', 'mask_token_prob', 'random_token_prob',
          'whole_word_masking')})

    def make(corpus=corpus, seed=seed, dupe=dupe, static=static, split_config=split_config):
      inst = pretraining.create_instances(corpus, int(d.max_seq_length), float(d.short_seq_prob),
                                          bool(d.nsp), dupe, seed)
      out = {'instances': inst}
      if static:
        masks = static_masks(corpus.tokens, inst, split_config, tokenizer, seed)
        out.update({f'static_{k}': v for k, v in masks.items()})
      return out
    arrays = _cached(cache_dir, 'instances', inst_key, make)
    if len(arrays['instances']) == 0:
      raise DataError(f'the {name} split yields no instances: give the corpus more text')
    masks = {k[len('static_'):]: v for k, v in arrays.items() if k.startswith('static_')}
    splits[name] = Split(corpus.tokens, arrays['instances'], masks if static else None)
    stats.update({f'{name}_documents': corpus.num_documents,
                  f'{name}_sentences': corpus.num_sentences,
                  f'{name}_tokens': int(len(corpus.tokens)),
                  f'{name}_instances': int(len(arrays['instances']))})
  logging.info('Pretraining data: %s', stats)
  return PretrainingData(config, tokenizer, splits['train'], splits['eval'], stats,
                         process_index, process_count)


def _eval_config(config):
  """The config the eval masks follow: `data.eval_mask_rate` when set, so runs trained at
  different masking rates are scored on the same task."""
  rate = config.data.get('eval_mask_rate')
  if rate is None or rate == config.data.mask_rate:
    return config
  import copy
  eval_config = copy.deepcopy(config)
  eval_config.data.mask_rate = rate
  eval_config.data.max_predictions_per_seq = None
  return eval_config


def _cached(cache_dir: str, kind: str, key: dict, make) -> dict[str, np.ndarray]:
  """Arrays from cache_dir/KIND-HASH.npz, or made by make() and saved there atomically."""
  path = os.path.join(cache_dir, f'{kind}-{cache.digest(key)}.npz')
  arrays = cache.read_arrays(path)
  if arrays is None:
    arrays = make()
    cache.write_arrays(path, arrays)
  return arrays
