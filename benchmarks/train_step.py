"""Throughput of the real pretraining train step (the jitted, pmap-ed function launch.py runs).

  python benchmarks/train_step.py --sizes tiny,base --seq 128 --batch 32

Batches are device-resident and reused, so the numbers are the step alone (the data loader
has its own benchmark). Prints compile time and the median over timed windows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from encoder import configs  # noqa: E402
from encoder.tasks import pretraining as task  # noqa: E402
from encoder.train import parallel  # noqa: E402
from encoder.train.optim import make_optimizer  # noqa: E402
from encoder.train.steps import create_state, pmap_steps  # noqa: E402
from encoder.train.trainer import init_params  # noqa: E402


def random_batch(config, batch_size: int, seed: int = 0) -> dict:
  """A batch of the real layout: random tokens, 15% positions masked, random NSP labels."""
  rng = np.random.default_rng(seed)
  seq, preds, vocab = config.data.max_seq_length, task.max_predictions(config), \
      config.model.vocab_size
  positions = np.sort(np.stack([rng.choice(np.arange(1, seq), preds, replace=False)
                                for _ in range(batch_size)]), axis=1).astype(np.int32)
  ids = rng.integers(5, vocab, (batch_size, seq)).astype(np.int32)
  return {'input_ids': ids, 'segment_ids': (np.arange(seq) >= seq // 2).astype(np.int32)[None]
          .repeat(batch_size, 0), 'input_mask': np.ones((batch_size, seq), np.int32),
          'masked_positions': positions,
          'masked_ids': np.take_along_axis(ids, positions, 1),
          'masked_weights': np.ones((batch_size, preds), np.float32),
          'nsp_label': rng.integers(0, 2, batch_size).astype(np.int32)}


def measure(size: str, seq: int, batch: int, dtype: str, vocab: int, windows: int, steps: int):
  config = configs.load_experiment('mlm_nsp_base')
  configs.apply_overrides(config, [f'model.size={size}', f'data.max_seq_length={seq}',
                                   f'train.batch_size={batch}', f'model.dtype={dtype}',
                                   f'model.vocab_size={vocab}'])
  model, tx = task.build_model(config), make_optimizer(config.train)
  state = parallel.replicate(create_state(init_params(model, task.dummy_batch(config), 0), tx, 0))
  train_step, _ = pmap_steps(model, task, tx)
  sharded = parallel.shard(random_batch(config, batch))
  start = time.perf_counter()
  state, metrics = train_step(state, sharded)
  jax.block_until_ready(metrics)
  compile_s = time.perf_counter() - start
  times = []
  for _ in range(windows):
    start = time.perf_counter()
    for _ in range(steps):
      state, metrics = train_step(state, sharded)
    jax.block_until_ready(metrics)
    times.append((time.perf_counter() - start) / steps)
  step_s = statistics.median(times)
  print(f'{size:>6} seq {seq} batch {batch} {dtype}: compile {compile_s:6.1f} s, '
        f'{1 / step_s:7.2f} steps/s, {batch / step_s:8.1f} seq/s, '
        f'{batch * seq / step_s:10.0f} tokens/s (median of {windows} x {steps} steps)',
        flush=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--sizes', default='tiny,base')
  parser.add_argument('--seq', type=int, default=128)
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--dtype', default='float32')
  parser.add_argument('--vocab', type=int, default=30522)
  parser.add_argument('--windows', type=int, default=3)
  parser.add_argument('--steps', type=int, default=5)
  args = parser.parse_args()
  print(f'devices: {jax.device_count()} x {jax.devices()[0].device_kind}')
  for size in args.sizes.split(','):
    measure(size, args.seq, args.batch, args.dtype, args.vocab, args.windows, args.steps)


if __name__ == '__main__':
  main()
