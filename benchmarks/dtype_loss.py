"""Does bfloat16 compute train like float32? The same short run in both, loss by loss.

  python -m benchmarks.dtype_loss --size tiny --steps 50

Both runs start from the same float32 parameters (seeded by `train.seed`) and see the same
stream of batches and the same dropout randomness through the real train step, set up as the
trainer sets it up (`encoder.train.run_setup.setup_steps`); only `model.dtype` differs. The batches
repeat a random 8-token motif along each sequence, so masked tokens are predictable from their
context and the loss falls quickly (on uniformly random tokens it could not fall below
log(vocab), and any two runs would agree trivially). Prints one JSON line: the mean loss of
the last ten steps in each dtype, their relative difference, the largest per-step relative
difference, and whether the final difference is within `--tolerance`.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from benchmarks.common.synthetic import bench_config, random_batch
from encoder.tasks import pretraining as task
from encoder.train.run_setup import setup_steps


def motif_batch(config, batch_size: int, seed: int) -> dict:
  """`random_batch`'s layout with each sequence a repeated random 8-token motif."""
  batch = random_batch(config, batch_size, seed)
  rng = np.random.default_rng(seed + 10_000)
  seq = config.data.max_seq_length
  motifs = rng.integers(5, min(config.model.vocab_size, 1000), (batch_size, 8))
  ids = np.tile(motifs, (1, -(-seq // 8)))[:, :seq].astype(np.int32)
  batch['masked_ids'] = np.take_along_axis(ids, batch['masked_positions'], 1)
  np.put_along_axis(ids, batch['masked_positions'], 4, 1)  # what the model sees: [MASK]-like
  batch['input_ids'] = ids
  return batch


def losses(dtype: str, args) -> list[float]:
  config = bench_config(args.size, args.seq, args.batch, dtype, args.vocab, [
      'train.learning_rate=1e-3', 'train.warmup_steps=5', 'train.schedule=constant',
      f'train.num_steps={args.steps}'])
  run = setup_steps(config)  # the trainer's set-up: both dtypes start from train.seed's weights
  state, result = run.state, []
  for i in range(args.steps):
    state, sums = run.train_step(state, run.strategy.place_batch(
        motif_batch(config, args.batch, i)))
    result.append(sums)
  return [task.reduce_metrics(run.strategy.sum_metrics([s]))['loss'] for s in result]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--size', default='tiny')
  parser.add_argument('--steps', type=int, default=50)
  parser.add_argument('--seq', type=int, default=128)
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--vocab', type=int, default=30522)
  parser.add_argument('--tolerance', type=float, default=0.05,
                      help='largest relative difference of the final losses counted as equal')
  args = parser.parse_args(argv)
  f32, bf16 = losses('float32', args), losses('bfloat16', args)
  tail = min(10, args.steps)
  final32, final16 = float(np.mean(f32[-tail:])), float(np.mean(bf16[-tail:]))
  rel = np.abs(np.array(bf16) - np.array(f32)) / np.array(f32)
  final_rel = abs(final16 - final32) / final32
  print(json.dumps({
      'size': args.size, 'steps': args.steps, 'seq': args.seq, 'batch': args.batch,
      'first_loss': round(f32[0], 4), 'final_loss_float32': round(final32, 4),
      'final_loss_bfloat16': round(final16, 4), 'final_rel_diff': round(final_rel, 4),
      'max_step_rel_diff': round(float(rel.max()), 4), 'tolerance': args.tolerance,
      'within_tolerance': bool(final_rel <= args.tolerance)}), flush=True)
  for i in range(0, args.steps, max(1, args.steps // 10)):
    print(f'step {i + 1:4d}  float32 {f32[i]:.4f}  bfloat16 {bf16[i]:.4f}')


if __name__ == '__main__':
  main()
