"""The per-shard step of preparation: one input shard -> its token arrays and instances on disk.

`process(job)` is a pure function of its (JSON-able) job: the local process pool and the Beam
pipeline both call it, so the bits written do not depend on which engine ran it or how many
workers it had. Each shard draws from its own seeds ((seed, shard index)), holds out its own eval
documents and pairs NotNext segments within itself, so no shard waits for another.

Files, under the job's `dir` (tokens) and `instances_dir`:
  tokens/NNNNN.SPLIT.{tokens,sent_bounds,doc_bounds}.npy   flat tokens (uint16 or int32)
  tokens/NNNNN.json                                        counts; written last = shard done
  NNNNN.SPLIT.instances.npy                                int32 [N, 5]
  NNNNN.SPLIT.doc_starts.npy                               packed rows: document starts
  NNNNN.SPLIT.static_{masked_positions,masked_ids,shown,weights}.npy   fixed masks, if any
  NNNNN.json                                               counts; written last = shard done
A crash leaves a shard without its .json, and the next run redoes just that shard.
"""

from __future__ import annotations

import io
import json
import time

import numpy as np
from etils import epath
from ml_collections import config_dict

from encoder.data.corpus import sources
from encoder.data.pretrain import instances, masking, packed_rows
from encoder.data.tokenizer import SentencePieceTokenizer, Tokenizer, load_tokenizer

EVAL_SEED = 20190524  # the same held-out split and eval masks for every train.seed
SPLITS = ('train', 'eval')
_TOKEN_ARRAYS = ('tokens', 'sent_bounds', 'doc_bounds')
_TOKENIZERS: dict[str, Tokenizer] = {}  # one loaded tokenizer per worker process


def shard_seed(seed: int, index: int) -> int:
  """A 64-bit seed for shard `index` of a run seeded `seed` (independent streams per shard)."""
  a, b = np.random.SeedSequence([seed, index]).generate_state(2)
  return int(a) << 32 | int(b)


def token_dtype(vocab_size: int):
  return np.uint16 if vocab_size <= 1 << 16 else np.int32


def tokens_path(directory: str, index: int, split: str, name: str) -> epath.Path:
  return epath.Path(directory) / 'tokens' / f'{index:05d}.{split}.{name}.npy'


def instances_path(directory: str, index: int, split: str, name: str) -> epath.Path:
  return epath.Path(directory) / f'{index:05d}.{split}.{name}.npy'


def process(job: dict) -> dict:
  """Prepares shard job['index'] unless done; returns its counts (see `_tokens`/`_instances`)."""
  start = time.time()
  counts = _tokens(job)
  counts.update(_instances(job))
  counts['seconds'] = time.time() - start
  return counts


def _tokens(job: dict) -> dict:
  marker = epath.Path(job['dir']) / 'tokens' / f"{job['index']:05d}.json"
  if marker.exists():
    return json.loads(marker.read_text())
  tokenizer = worker_tokenizer(job['dir'])
  split_docs, raw_bytes = split_shard(job)
  counts = {'bytes': raw_bytes}
  dtype = token_dtype(tokenizer.vocab_size)
  for split in SPLITS:
    corpus = instances.tokenize_documents(split_docs.pop(split), tokenizer, progress=False)
    if len(corpus.tokens) >= 1 << 31:
      raise ValueError('a shard holds over 2**31 tokens: lower data.prepare_shard_mb')
    arrays = {'tokens': corpus.tokens.astype(dtype), 'sent_bounds': corpus.sent_bounds,
              'doc_bounds': corpus.doc_bounds}
    for name in _TOKEN_ARRAYS:
      save(tokens_path(job['dir'], job['index'], split, name), arrays[name])
    counts.update({f'{split}_documents': corpus.num_documents,
                   f'{split}_sentences': corpus.num_sentences,
                   f'{split}_tokens': int(len(corpus.tokens))})
  marker.write_text(json.dumps(counts))
  return counts


def split_shard(job: dict) -> tuple[dict[str, list], int]:
  """The shard's documents as {'train': [...], 'eval': [...]} (each a list of sentences), and
  its raw text size in bytes. Reads only job['shard'], job['index'], job['num_shards'] and
  job['eval']."""
  docs, raw_bytes = [], 0
  for doc in sources.read(job['shard']):
    docs.append(doc)
    raw_bytes += sum(len(s) for s in doc) + len(doc) + 1  # characters, newlines, blank line
  eval_ids = held_out(len(docs), job)
  return {'train': [x for i, x in enumerate(docs) if i not in eval_ids],
          'eval': [x for i, x in enumerate(docs) if i in eval_ids]}, raw_bytes


def held_out(n: int, job: dict) -> set[int]:
  """The shard's eval documents: round(fraction * n), at least 1, at most the shard's share of
  data.max_eval_documents and n - 1 (a shard always keeps a training document)."""
  e = job['eval']
  cap = e['max_documents'] // job['num_shards'] + (job['index'] < e['max_documents']
                                                   % job['num_shards'])
  k = min(max(1, round(e['fraction'] * n)), cap, n - 1)
  if k <= 0:
    return set()
  return set(np.random.default_rng([EVAL_SEED, job['index']]).permutation(n)[:k].tolist())


def _instances(job: dict) -> dict:
  marker = epath.Path(job['instances_dir']) / f"{job['index']:05d}.json"
  if marker.exists():
    return json.loads(marker.read_text())
  s = job['instances']
  counts = {}
  for split in SPLITS:
    arrays = {name: load(tokens_path(job['dir'], job['index'], split, name))
              for name in _TOKEN_ARRAYS}
    corpus = instances.TokenizedCorpus(**arrays)
    train = split == 'train'
    seed = shard_seed(s['seed'] if train else EVAL_SEED, job['index'])
    passes = s['dupe_factor'] if train else 1
    packing = s.get('packing', 'none')  # absent from preparations made before packing
    inst = np.zeros((0, 5), np.int64)
    if corpus.num_documents and packing == 'none':
      inst = instances.create_instances(corpus, s['max_seq_length'], s['short_seq_prob'],
                                          s['nsp'], passes, seed, progress=False)
    elif corpus.num_documents:
      inst = packed_rows.create_rows(corpus, s['max_seq_length'], packing, passes, seed)
      save(instances_path(job['instances_dir'], job['index'], split, 'doc_starts'),
           packed_rows.doc_starts(corpus))
    save(instances_path(job['instances_dir'], job['index'], split, 'instances'),
         inst.astype(np.int32))
    if s['static_masks'] or not train:
      config = config_dict.ConfigDict({'data': job['mask' if train else 'eval_mask']})
      tok = worker_tokenizer(job['dir'])
      masks = masking.static_masks(
          inst, config, tok, seed,
          row_builder(corpus.tokens, corpus, s['max_seq_length'], packing, tok))
      for name, value in masks.items():
        save(instances_path(job['instances_dir'], job['index'], split, f'static_{name}'), value)
    counts[f'{split}_instances'] = int(len(inst))
  marker.write_text(json.dumps(counts))
  return counts


def row_builder(tokens: np.ndarray, corpus: instances.TokenizedCorpus, max_seq_length: int,
                packing: str, tok: Tokenizer):
  """instances -> their padded rows (the fields `materialize` gives), for the shard's static
  masks: BERT's pairs, or packed rows with their document boundaries."""
  if packing == 'none':
    return lambda inst: instances.materialize(inst, tokens, max_seq_length, tok.cls_id,
                                              tok.sep_id, tok.pad_id)
  starts = packed_rows.doc_starts(corpus)
  return lambda inst: packed_rows.materialize_packed(
      inst, tokens, packed_rows.piece_starts(inst, starts, max_seq_length), max_seq_length,
      packing, tok.cls_id, tok.sep_id, tok.pad_id)


def save(path: epath.Path, array: np.ndarray) -> None:
  """One .npy through epath (local disk or a bucket); the shard's marker, written after all of
  its arrays, is what makes them count."""
  path.parent.mkdir(parents=True, exist_ok=True)
  buffer = io.BytesIO()
  np.save(buffer, np.ascontiguousarray(array))
  path.write_bytes(buffer.getvalue())


def load(path: epath.Path) -> np.ndarray:
  return np.load(io.BytesIO(path.read_bytes()))


def worker_tokenizer(directory: str) -> Tokenizer:
  """The preparation's tokenizer (DIR/tokenizer), loaded once per process, one thread: the pool
  or the Beam runner provides the parallelism, so workers must not compete for cores."""
  if directory not in _TOKENIZERS:
    folder = epath.Path(directory) / 'tokenizer'
    model = folder / 'tokenizer.model'
    if model.exists():
      tok = SentencePieceTokenizer(model.read_bytes())
      tok.sp._num_threads = 1  # noqa: SLF001 - sentencepiece's per-call default
    else:
      tok = load_tokenizer(str(folder))  # WordPiece: vocab.txt on local disk
    _TOKENIZERS[directory] = tok
  return _TOKENIZERS[directory]
