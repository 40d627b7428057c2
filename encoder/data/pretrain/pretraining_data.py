"""The trainer's one entry point: config -> tokenizer, train iterator, eval batches, stats.

  data = build_pretraining_data(config, workdir, process_index, process_count)
  it = data.train_iterator(state=None); batch = next(it); it.state()
  data.eval_batches(n)

The corpus is prepared once (`preparation`: tokenizer, tokenized shards, instances in
data.prepared_dir, keyed by a hash of everything that made them), and batches read the prepared
shards by index (`prepared_reader`), so a host holds no corpus in memory and a restart redoes
nothing.
"""

from __future__ import annotations

import logging
import os
import shutil
from typing import Any

import numpy as np
from etils import epath

from encoder import configs, storage
from encoder.data.loader import BatchIterator, restore_step
from encoder.data.permutation import PermutationSampler
from encoder.data.pretrain import mask_schedule, masking, nsp_schedule, packed_rows, preparation
from encoder.data.pretrain.instances import materialize
from encoder.data.pretrain.prepared_reader import PreparedSplit
from encoder.data.tokenizer import Tokenizer, load_tokenizer
from encoder.errors import ConfigError

_MASK_TAG = 0x4D41534B
# Batches made at once when the prepared corpus is in a bucket: with ~0.1-0.3 s to read one
# (two rounds of requests) against steps of tens of ms, 8 keep the step fed; the iterator
# keeps fewer in flight when fewer suffice.
BUCKET_BATCH_WORKERS = 8


class PretrainingData:
  """Everything the pretraining task needs from the data side, for one host."""

  def __init__(self, config, tokenizer: Tokenizer, train: PreparedSplit, eval_split: PreparedSplit,
               stats: dict[str, int], process_index: int, process_count: int):
    d = config.data
    self.tokenizer, self.stats = tokenizer, stats
    self.max_seq_length = int(d.max_seq_length)
    self.packing = preparation.packing_layout(d)
    self.mask_config = masking.mask_config(config, tokenizer)
    self.seed, self.global_batch = int(config.train.seed), int(config.train.batch_size)
    self.process_index, self.process_count = process_index, process_count
    self.batch_size = self.global_batch // process_count
    self.prefetch = int(d.prefetch)
    self.batch_workers = BUCKET_BATCH_WORKERS if storage.is_remote(train.directory) else 1
    self._train, self._eval = train, eval_split
    self.num_train_examples = len(train)
    self._sampler = PermutationSampler(self.num_train_examples, self.global_batch, self.seed)
    # A scheduled NSP weight goes out with each train batch, a function of its step like the
    # masks, so resuming gives the same weights; a constant one stays a static model field.
    self._train_config = config.train
    self._nsp_scheduled = bool(d.nsp) and nsp_schedule.is_scheduled(config.train)
    self._data_config = d  # the mask rate of each step (mask_schedule), a function of the step

  def train_iterator(self, state: dict[str, Any] | None = None) -> BatchIterator:
    """Endless host batches from `state` (None: the start); `it.state()` is the resume point.

    From a bucket, several batches are read at once (their requests overlap on the wire; see
    BatchIterator for how many), since each waits two round trips; local reads take
    microseconds, and one thread ahead keeps up."""
    return BatchIterator(self.train_batch, restore_step(state), self.prefetch,
                         workers=self.batch_workers)

  def train_batch(self, step: int) -> dict[str, np.ndarray]:
    """This host's share of global batch `step`: a pure function of (seed, step, host)."""
    idx = self._sampler.indices(step, self.process_index, self.process_count)
    # Masks drawn for the global batch (the trailing 0 keeps one-process runs as they were).
    rng = masking.RowSlice(np.random.default_rng([self.seed, _MASK_TAG, step, 0]),
                           self.process_index * self.batch_size, self.global_batch)
    rate = mask_schedule.rate_at(self._data_config, self._train_config.num_steps, step)
    batch = self._assemble(self._train, idx, rng, masking.at_rate(self.mask_config, rate))
    if self._nsp_scheduled:
      batch['nsp_weight'] = np.full(len(idx), nsp_schedule.nsp_weight_at(self._train_config, step),
                                    np.float32)
    return batch

  def eval_batches(self, num_batches: int) -> list[dict[str, np.ndarray]]:
    """`num_batches` eval host batches: every held-out instance, cycling, when they fit; else
    instances spread evenly over the held-out set. Held-out instances come shard by shard (a
    shard's documents, then the next's), so the first ones would be one shard's: a corpus of
    Wikipedia and books whose first shard holds books would be judged on one book."""
    n = len(self._eval)
    wanted = num_batches * self.global_batch
    out = []
    for i in range(num_batches):
      first = i * self.global_batch + self.process_index * self.batch_size
      idx = np.arange(first, first + self.batch_size)
      idx = idx % n if wanted >= n else idx * n // wanted
      out.append(self._assemble(self._eval, idx, None, self.mask_config))
    return out

  def _assemble(self, split: PreparedSplit, idx: np.ndarray, rng,
                mask_config: masking.MaskConfig) -> dict[str, np.ndarray]:
    tok = self.tokenizer
    rows, tokens, static, breaks = split.take(idx)
    if breaks is None:
      batch = materialize(rows, tokens, self.max_seq_length, tok.cls_id, tok.sep_id, tok.pad_id)
    else:
      batch = packed_rows.materialize_packed(rows, tokens, breaks, self.max_seq_length,
                                             self.packing, tok.cls_id, tok.sep_id, tok.pad_id)
    eligible = batch.pop('eligible')
    if static is None:
      batch.update(masking.apply(batch['input_ids'], eligible, rng, mask_config))
    else:
      batch.update(masking.overlay(batch['input_ids'], static))
    return batch


def build_pretraining_data(config, workdir: str, process_index: int = 0,
                           process_count: int = 1):
  """Prepares the corpus if nobody has (process 0; the others wait for it), then opens it:
  a PretrainingData, or a PhasedPretrainingData when data.first_phase_seq_length is set."""
  d, t = config.data, config.train
  if t.batch_size < 1 or d.dupe_factor < 1:
    raise ConfigError(f'train.batch_size={t.batch_size} and data.dupe_factor={d.dupe_factor} '
                      'must be at least 1')
  if t.batch_size % process_count:
    raise ConfigError(f'train.batch_size={t.batch_size} does not divide among {process_count} '
                      'hosts: make it a multiple of the host count')
  if not 0 <= process_index < process_count:
    raise ConfigError(f'process_index={process_index} is outside 0..{process_count - 1}')
  nsp_schedule.check_nsp_schedule(t)
  *first, final = [_open(phase, workdir, process_index, process_count)
                    for phase in phase_configs(config)]
  return PhasedPretrainingData(first[0], final, int(d.first_phase_steps)) if first else final


def _open(config, workdir: str, process_index: int, process_count: int) -> PretrainingData:
  d = config.data
  s = _ensure_one_prepared(config, workdir, process_index)
  manifest = preparation.read_manifest(s)
  tokenizer = _run_tokenizer(s['dir'], workdir)
  stats = {'vocab_size': tokenizer.vocab_size, **manifest['totals']}
  stats.pop('bytes', None)
  packed_length = int(d.max_seq_length) if preparation.packing_layout(d) != 'none' else 0
  splits = {split: PreparedSplit(s['dir'], s['instances_dir'], manifest[f'{split}_instances'],
                                 split, static=(split == 'eval' or not d.dynamic_masking),
                                 packed_length=packed_length,
                                 read_concurrency=int(d.read_concurrency))
            for split in ('train', 'eval')}
  logging.info('Pretraining data (sequence length %d): %s', int(d.max_seq_length), stats)
  return PretrainingData(config, tokenizer, splits['train'], splits['eval'], stats,
                         process_index, process_count)


def phase_configs(config) -> list:
  """One config per sequence-length phase, in training order: the first phase's (when
  data.first_phase_seq_length is set), then `config` itself."""
  first = first_phase_config(config)
  return [config] if first is None else [first, config]


def first_phase_config(config):
  """The config of the first, shorter phase (None without one): BERT trained 90% of its steps
  at sequence length 128 and the rest at 512, since attention's cost grows with the square of
  the length while most of what MLM learns needs only short contexts; data.first_phase_steps
  steps at data.first_phase_seq_length, then data.max_seq_length. Only the length (and with it
  the default max_predictions_per_seq) differs between the phases' instances."""
  d = config.data
  length, steps = int(d.first_phase_seq_length), int(d.first_phase_steps)
  if not length:
    return None
  if not 8 <= length < int(d.max_seq_length) or steps < 1:
    raise ConfigError(f'data.first_phase_seq_length={length} must lie in 8..data.max_seq_length-1'
                      f' ({int(d.max_seq_length) - 1}) and data.first_phase_steps={steps} be at '
                      'least 1 (or set first_phase_seq_length=0 for one phase)')
  return configs.with_fields(config, {'data.max_seq_length': length,
                                      'data.first_phase_seq_length': 0})


class PhasedPretrainingData:
  """Two PretrainingData, one per sequence length: steps before `switch_step` read the first
  phase's instances, later ones the final phase's. A batch stays a pure function of its step,
  so resume is exact across the switch; eval always uses the final length, so curves compare
  across the switch and with one-phase runs. The trainer compiles one step per length."""

  def __init__(self, first: PretrainingData, final: PretrainingData, switch_step: int):
    self.first, self.final, self.switch_step = first, final, switch_step
    self.tokenizer = final.tokenizer
    self.max_seq_length = final.max_seq_length
    self.prefetch = final.prefetch
    self.batch_workers = final.batch_workers
    # An epoch is counted in the final phase's instances (the ones train.num_epochs means).
    self.num_train_examples = final.num_train_examples
    self.stats = {**final.stats, 'first_phase_train_instances':
                  first.stats.get('train_instances', 0)}

  train_iterator = PretrainingData.train_iterator  # over this class's train_batch

  def train_batch(self, step: int) -> dict[str, np.ndarray]:
    return (self.first if step < self.switch_step else self.final).train_batch(step)

  def eval_batches(self, num_batches: int) -> list[dict[str, np.ndarray]]:
    return self.final.eval_batches(num_batches)


def ensure_prepared(config, workdir: str, process_index: int = 0) -> dict:
  """Process 0 prepares the corpus (every phase's instances) unless done; the others wait for
  its manifests, at most data.prepare_timeout_s. Returns the final phase's preparation settings
  (preparation.settings)."""
  return [_ensure_one_prepared(phase, workdir, process_index)
          for phase in phase_configs(config)][-1]


def _ensure_one_prepared(config, workdir: str, process_index: int) -> dict:
  s = preparation.settings(config, workdir)
  if not preparation.is_prepared(s):
    if process_index == 0:
      logging.info('Preparing the corpus into %s: %s', s['dir'],
                   preparation.prepare(config, workdir))
    else:
      preparation.wait_for(s, float(config.data.prepare_timeout_s))
  return s


def _run_tokenizer(prepared_dir: str, workdir: str) -> Tokenizer:
  """WORKDIR/tokenizer: a copy of the preparation's (kept on resume), written whole."""
  directory = storage.join(workdir, 'tokenizer')
  if not (storage.isdir(directory) and storage.listdir(directory)):
    files = {f.name: f.read_bytes() for f in (epath.Path(prepared_dir) / 'tokenizer').iterdir()}
    if storage.is_remote(directory):  # no directory to rename: each object is committed whole
      for name, data in files.items():
        storage.write_atomic(storage.join(directory, name), data)
    else:
      tmp = directory + '.tmp'
      shutil.rmtree(tmp, ignore_errors=True)
      os.makedirs(tmp)
      for name, data in files.items():
        with open(os.path.join(tmp, name), 'wb') as out:
          out.write(data)
      shutil.rmtree(directory, ignore_errors=True)
      os.replace(tmp, directory)
  return load_tokenizer(directory)
