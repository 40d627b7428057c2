"""Preparation: corpus -> tokenizer + tokenized shards + instances in `data.prepared_dir`, once.

  python launch.py --exp mlm_nsp_base --prepare_data    # or implicitly, before training

Steps: plan the input shards (`data.corpus.sources`), train the tokenizer on a bounded sample
of them (or take the given one), then run `shard_worker.process` on every shard not yet done, in
`data.prepare_workers` processes, and write the manifests. The folder is named by the hash of
everything that decides its bits (corpus files, tokenizer, eval split, shard size), and its
instances live in a subfolder named by the instance settings (seed, length, NSP, masks), so runs
and sweep arms on the same corpus share one tokenization. The worker count is not in either
hash: every worker count writes the same bits.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import multiprocessing
import os
import shutil
import tempfile
import time

from etils import epath

from encoder import storage
from encoder.data import cache
from encoder.data import tokenizer as tokenizer_lib
from encoder.data.corpus import sources
from encoder.data.pretrain import packed_rows, shard_worker
from encoder.errors import ConfigError, DataError

VERSION = 1
MANIFEST = 'manifest.json'
log = logging.getLogger(__name__)


def settings(config, workdir: str) -> dict:
  """Where the preparation of this config lives and what decides its bits (no I/O but stat)."""
  d = config.data
  packing = packing_layout(d)  # refused before the plan, which may build the embedded corpus
  cache_dir = d.cache_dir or os.path.join(workdir, 'cache')
  plan = sources.plan(d.corpus, int(d.prepare_shard_mb * 2**20), cache_dir,
                     d.tfds_data_dir or None)
  corpus = {'version': VERSION, 'corpus': d.corpus, 'shard_mb': d.prepare_shard_mb,
            'files': _fingerprint(plan), 'eval_fraction': d.eval_fraction,
            'max_eval_documents': d.max_eval_documents}
  source, identity = _tokenizer_identity(config, workdir)
  directory = d.prepared_dir or _default_dir(cache_dir, corpus, identity)
  if source == 'workdir' and not d.prepared_dir:
    # Resuming: the run's tokenizer is a copy of the one its preparation made (or was given),
    # which is keyed by how the config names it; that preparation is the run's.
    _, named = _tokenizer_identity(config, None)
    candidate = _default_dir(cache_dir, corpus, named)
    if _tokenizer_digest(os.path.join(candidate, 'tokenizer')) == identity['files']:
      directory = candidate
  inst = {'seed': int(config.train.seed), 'dupe_factor': int(d.dupe_factor),
          'max_seq_length': int(d.max_seq_length), 'short_seq_prob': float(d.short_seq_prob),
          'nsp': bool(d.nsp), 'static_masks': not d.dynamic_masking}
  if packing != 'none':  # only then: unpacked preparations keep the folder names they had
    inst['packing'] = packing
  mask, eval_mask = _mask_fields(config, d.mask_rate), _mask_fields(config, _eval_rate(d))
  key = {**inst, 'eval_mask': eval_mask, 'mask': mask if inst['static_masks'] else None}
  return {'dir': directory, 'instances_dir': os.path.join(directory, 'instances-' +
                                                           cache.digest(key)),
          'plan': plan, 'corpus': corpus, 'tokenizer': identity, 'tokenizer_source': source,
          'tokenizer_path': os.path.join(workdir, 'tokenizer') if source == 'workdir' else
          d.tokenizer,
          'instances': inst, 'mask': mask, 'eval_mask': eval_mask}


def packing_layout(d) -> str:
  """data.packing of a pretraining config, checked: none (BERT's pairs), documents or
  full_sentences (packed_rows)."""
  packing = str(d.packing)
  if packing == 'examples':
    raise ConfigError('data.packing=examples packs fine-tuning batches; pretraining rows pack '
                      'with data.packing=documents (or full_sentences)')
  if packing not in ('none', *packed_rows.LAYOUTS):
    raise ConfigError(f"data.packing='{packing}': use none, documents or full_sentences")
  if packing != 'none' and d.nsp:
    raise ConfigError(f'data.packing={packing} needs data.nsp=false: NSP reads sentence pairs, '
                      'packed rows have none')
  return packing


def is_prepared(s: dict) -> bool:
  return (epath.Path(s['instances_dir']) / MANIFEST).exists()


def read_manifest(s: dict) -> dict:
  return json.loads((epath.Path(s['instances_dir']) / MANIFEST).read_text())


def prepare(config, workdir: str, workers: int | None = None) -> dict:
  """Prepares (or finds prepared) the config's corpus; returns the summary `--prepare_data`
  prints: workers, documents, tokens, instances, shards, seconds_tokenizer, seconds_prepare,
  mb_per_s (raw text per second of seconds_prepare), prepared_dir, reused."""
  s = settings(config, workdir)
  d = config.data
  workers = int(workers or d.prepare_workers or os.cpu_count() or 1)
  if is_prepared(s):
    return summary(s, read_manifest(s), workers, 0.0, 0.0, reused=True)
  start = time.time()
  ensure_tokenizer(config, s)
  seconds_tokenizer = time.time() - start
  start = time.time()
  results = run_jobs(jobs(s), workers)
  seconds_prepare = time.time() - start
  manifest = write_manifests(s, results)
  return summary(s, manifest, workers, seconds_tokenizer, seconds_prepare, reused=False)


def jobs(s: dict) -> list[dict]:
  """One JSON-able job per shard: all `shard_worker.process` needs, for any engine."""
  n = len(s['plan'])
  eval_ = {'fraction': s['corpus']['eval_fraction'],
           'max_documents': int(s['corpus']['max_eval_documents'])}
  return [{'index': i, 'shard': shard, 'num_shards': n, 'dir': s['dir'],
           'instances_dir': s['instances_dir'], 'eval': eval_, 'instances': s['instances'],
           'mask': s['mask'], 'eval_mask': s['eval_mask']} for i, shard in enumerate(s['plan'])]


def run_jobs(todo: list[dict], workers: int) -> list[dict]:
  """process(job) for every job, in `workers` spawned processes (in this one for one worker or
  one job); results in job order, whatever order they finished in."""
  results: list[dict | None] = [None] * len(todo)
  if workers <= 1 or len(todo) <= 1:
    for job in todo:
      results[job['index']] = shard_worker.process(job)
      _progress(results)
    return results
  # spawn, not fork: the caller may hold JAX's threads, which a fork would copy mid-flight.
  context = multiprocessing.get_context('spawn')
  order = sorted(todo, key=lambda j: -_shard_size(j['shard']))  # biggest first: even finish
  with _worker_env(), context.Pool(min(workers, len(todo))) as pool:
    for job, counts in zip(order, pool.imap(shard_worker.process, order), strict=True):
      results[job['index']] = counts
      _progress(results)
    pool.close()
    pool.join()
  return results


def write_manifests(s: dict, results: list[dict]) -> dict:
  """The corpus manifest (settings, shard plan, token counts) and the instances manifest (the
  counts training indexes by); the latter, written last, marks the preparation finished."""
  totals = {k: sum(r[k] for r in results) for k in results[0] if k != 'seconds'}
  if totals['eval_documents'] == 0 or totals['train_documents'] == 0:
    raise DataError(f"the corpus has {totals['train_documents'] + totals['eval_documents']} "
                    'document(s); holding out an eval split needs at least 2: add documents '
                    '(separate them by a blank line in text files)')
  for split in shard_worker.SPLITS:
    if totals[f'{split}_instances'] == 0:
      raise DataError(f'the {split} split yields no instances: give the corpus more text')
  tok = shard_worker.worker_tokenizer(s['dir'])
  corpus = {'settings': s['corpus'], 'tokenizer': s['tokenizer'], 'shards': s['plan'],
            'vocab_size': tok.vocab_size,
            'token_dtype': shard_worker.token_dtype(tok.vocab_size).__name__,
            'counts': [{k: v for k, v in r.items() if 'instances' not in k and k != 'seconds'}
                       for r in results]}
  (epath.Path(s['dir']) / MANIFEST).write_text(json.dumps(corpus))
  manifest = {'settings': s['instances'], 'num_shards': len(results), 'totals': totals,
              'token_dtype': corpus['token_dtype'],
              'train_instances': [r['train_instances'] for r in results],
              'eval_instances': [r['eval_instances'] for r in results]}
  (epath.Path(s['instances_dir']) / MANIFEST).write_text(json.dumps(manifest))
  return manifest


def collect(s: dict) -> list[dict]:
  """Every shard's counts, read back from its markers (after an engine that returns nothing to
  the launcher, such as Beam on a cluster, has written them)."""
  out = []
  for i in range(len(s['plan'])):
    counts = json.loads((epath.Path(s['dir']) / 'tokens' / f'{i:05d}.json').read_text())
    counts.update(json.loads((epath.Path(s['instances_dir']) / f'{i:05d}.json').read_text()))
    out.append(counts)
  return out


def wait_for(s: dict, timeout_s: float, poll_s: float = 5.0) -> None:
  """Another process prepares: wait for its manifest, or stop with one line after timeout_s."""
  deadline = time.time() + timeout_s
  while not is_prepared(s):
    if time.time() > deadline:
      raise DataError(f"process 0 did not finish preparing the data in {s['instances_dir']} "
                      f'within data.prepare_timeout_s={timeout_s:g}s: prepare it first with '
                      '--prepare_data, or raise the timeout')
    time.sleep(poll_s)


def summary(s, manifest, workers, seconds_tokenizer, seconds_prepare, reused) -> dict:
  t = manifest['totals']
  return {'workers': workers, 'documents': t['train_documents'] + t['eval_documents'],
          'tokens': t['train_tokens'] + t['eval_tokens'],
          'instances': t['train_instances'] + t['eval_instances'],
          'shards': manifest['num_shards'], 'seconds_tokenizer': round(seconds_tokenizer, 2),
          'seconds_prepare': round(seconds_prepare, 2),
          'mb_per_s': round(t['bytes'] / 2**20 / seconds_prepare, 3) if seconds_prepare else None,
          'mb': round(t['bytes'] / 2**20, 2), 'prepared_dir': s['dir'],
          'instances_dir': s['instances_dir'], 'reused': reused}


def _progress(results) -> None:
  done = [r for r in results if r is not None]
  log.info('Prepared shard %d/%d (%.1f MB of text so far)', len(done), len(results),
           sum(r['bytes'] for r in done) / 2**20)


@contextlib.contextmanager
def _worker_env():
  """The environment workers start with (spawn copies it): WordPiece (tokenizers) on one
  core, as the pool provides the parallelism."""
  saved = dict(os.environ)
  os.environ['RAYON_NUM_THREADS'] = '1'
  try:
    yield
  finally:
    os.environ.clear()
    os.environ.update(saved)


def _shard_size(shard: dict) -> int:
  if shard['kind'] == 'text':
    return sum((storage.getsize(p) if b < 0 else b) - a for p, a, b in shard['pieces'])
  return shard['end'] - shard['start']


def _fingerprint(plan: list[dict]) -> str:
  """Identity of the input: the plan plus each text file's size and modification time (hashing
  16 GB of content on every start would cost minutes)."""
  files = sorted({p for shard in plan if shard['kind'] == 'text' for p, _, _ in shard['pieces']})
  stats = [(p, storage.version(p)) for p in files]
  return cache.digest({'plan': plan, 'files': stats})


def _default_dir(cache_dir: str, corpus: dict, tokenizer: dict) -> str:
  return os.path.join(cache_dir, 'prepared-' + cache.digest({**corpus, 'tokenizer': tokenizer}))


def _trained_identity(d) -> dict:
  return {'train': 'sentencepiece', 'vocab_size': int(d.vocab_size),
          'sample_sentences': int(d.tokenizer_sample_sentences),
          'character_coverage': float(d.character_coverage)}


def _tokenizer_identity(config, workdir: str | None) -> tuple[str, dict]:
  """('workdir' | 'given' | 'trained', identity): a resumed run keeps its own tokenizer."""
  d = config.data
  own = os.path.join(workdir, 'tokenizer') if workdir else ''
  if own and storage.isdir(own) and storage.listdir(own):
    return 'workdir', {'files': _tokenizer_digest(own)}
  if d.tokenizer:
    return 'given', {'files': _tokenizer_digest(d.tokenizer), 'lower_case': bool(d.lower_case)}
  return 'trained', _trained_identity(d)


def _tokenizer_digest(path: str) -> str | None:
  path = path if storage.is_remote(path) else os.path.expanduser(path)
  if storage.isdir(path):
    files = [storage.join(path, f) for f in storage.listdir(path)]
  elif storage.isfile(path):
    files = [path]
    sibling = storage.join(os.path.dirname(path), 'tokenizer_config.json')
    if path.endswith('.txt') and storage.exists(sibling):
      files.append(sibling)
  else:
    return None
  return cache.file_digest(sorted(f for f in files if storage.isfile(f)))


def ensure_tokenizer(config, s: dict) -> None:
  """DIR/tokenizer: trained on a bounded sample, or the given / the run's own, saved whole."""
  folder = epath.Path(s['dir']) / 'tokenizer'
  if folder.exists() and any(folder.iterdir()):
    return
  d = config.data
  if s['tokenizer_source'] == 'trained':
    # In a child process: SentencePiece's training arena (~0.7 GB for a million sentences)
    # then goes back to the system instead of staying in this process beside the workers.
    with multiprocessing.get_context('spawn').Pool(1) as pool:
      proto = pool.apply(_trained_model, (s['plan'], int(d.tokenizer_sample_sentences),
                                          int(d.vocab_size), float(d.character_coverage)))
      pool.close()
      pool.join()  # a clean exit: no semaphores left for the resource tracker to report
    tok = tokenizer_lib.SentencePieceTokenizer(proto)
  else:  # given, or the resumed run's own
    tok = tokenizer_lib.load_tokenizer(s['tokenizer_path'], bool(d.lower_case))
  local = tempfile.mkdtemp(prefix='encoder-tokenizer-')
  try:
    tok.save(local)
    tmp = epath.Path(s['dir']) / 'tokenizer.tmp'  # whole, then renamed: never half a tokenizer
    tmp.mkdir(parents=True, exist_ok=True)
    for name in os.listdir(local):
      with open(os.path.join(local, name), 'rb') as f:
        (tmp / name).write_bytes(f.read())
    if folder.exists():
      folder.rmtree()
    # A rename locally; on a bucket a recursive copy then delete (s3fs, unlike gcsfs, will
    # not rename a prefix), with no reader before the manifest names the tokenizer.
    storage.move(str(tmp), str(folder))
  finally:
    shutil.rmtree(local, ignore_errors=True)


def _trained_model(plan: list[dict], limit: int, vocab_size: int, coverage: float) -> bytes:
  sample = sample_sentences(plan, limit)
  return tokenizer_lib.train_sentencepiece_sample(sample, vocab_size, coverage).proto


def sample_sentences(plan: list[dict], limit: int) -> list[str]:
  """Up to `limit` sentences for the tokenizer: the first ceil(limit / shards) of every shard.

  Spread over all shards (every part of the corpus), read as prefixes (each shard is streamed and
  left early), so its time and memory are bounded by `limit`, not by the corpus. It may include
  held-out documents, as BERT's vocabulary saw all of its corpus; the model never does.
  """
  quota = max(1, math.ceil(limit / len(plan)))
  out: list[str] = []
  documents, exhausted = 0, True
  for shard in plan:
    taken = 0
    for doc in sources.read(shard):
      documents += 1
      doc = doc[:quota - taken]
      out.extend(doc)
      taken += len(doc)
      if taken >= quota:
        exhausted = False
        break
  if exhausted and documents < 2:
    raise DataError(f'the corpus has {documents} document(s); holding out an eval split needs at '
                    'least 2: add documents (separate them by a blank line in text files)')
  return out[:limit]


def _eval_rate(d) -> float:
  return d.eval_mask_rate


def _mask_fields(config, rate: float) -> dict:
  """The data fields fixed masks follow (a plain dict: it travels to workers and Beam)."""
  d = config.data
  same = rate == d.mask_rate
  return {'mask_rate': float(rate),
          'max_predictions_per_seq': d.max_predictions_per_seq if same else None,
          'mask_token_prob': float(d.mask_token_prob),
          'random_token_prob': float(d.random_token_prob),
          'whole_word_masking': bool(d.whole_word_masking),
          'max_seq_length': int(d.max_seq_length)}
