"""What `model.remat` costs and saves: the compiled train step's FLOPs (XLA's cost analysis),
its temporary memory and its time, with and without each block rematerialised.

  python -m benchmarks.remat_cost --sizes mini,base --seq 128 --batch 32

The step is the pretraining train step as the trainer sets it up (`setup_steps`, the state
donated), on one device-resident batch of the real layout (`benchmarks/common/synthetic.py`),
compiled once per setting. `flops` is what the compiled program computes (the forward a
second time in the backward pass under remat), `temp_mb` the temporaries XLA allocates for
it, `step_s` the median of `--steps` steps after the compiling one. One JSON line per size and
setting, with `flops_ratio`, `temp_ratio` and `time_ratio` (remat over not) on the remat line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax

from benchmarks.common.cli import print_machine, print_table
from benchmarks.common.synthetic import bench_config, random_batch
from encoder.train.run_setup import setup_steps


def measure(size: str, remat: bool, args) -> dict:
  config = bench_config(size, args.seq, args.batch, args.dtype, args.vocab,
                        [f'model.remat={str(remat).lower()}', *args.config])
  run = setup_steps(config)
  batch = run.strategy.place_batch(random_batch(config, args.batch))
  compiled = run.train_step.lower(run.state, batch).compile()
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, list) else cost
  state, times = run.state, []
  for _ in range(args.steps + 1):  # the first call compiles (jit's own cache): not timed
    start = time.perf_counter()
    state, sums = run.train_step(state, batch)
    jax.block_until_ready(sums)
    times.append(time.perf_counter() - start)
  return {'size': size, 'remat': remat, 'seq': args.seq, 'batch': args.batch,
          'dtype': args.dtype, 'flops': float(cost['flops']),
          'temp_mb': round(compiled.memory_analysis().temp_size_in_bytes / 2**20, 1),
          'step_s': round(statistics.median(times[1:]), 4)}


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--sizes', default='mini')
  parser.add_argument('--seq', type=int, default=128)
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--dtype', default='float32', choices=('float32', 'bfloat16'))
  parser.add_argument('--vocab', type=int, default=30522)
  parser.add_argument('--steps', type=int, default=5)
  parser.add_argument('--config', action='append', default=[], metavar='KEY=VALUE')
  args = parser.parse_args(argv)
  print_machine()
  rows = []
  for size in args.sizes.split(','):
    plain = measure(size, False, args)
    rows.append(plain)
    print(json.dumps(plain), flush=True)
    remat = measure(size, True, args)
    remat.update(flops_ratio=round(remat['flops'] / plain['flops'], 3),
                 temp_ratio=round(remat['temp_mb'] / plain['temp_mb'], 3),
                 time_ratio=round(remat['step_s'] / plain['step_s'], 3))
    rows.append(remat)
    print(json.dumps(remat), flush=True)
  print_table(rows, [('size', 'size', '>6'), ('remat', 'remat', '>6'),
                     ('GFLOP', 'flops', '9.3g'), ('temp MB', 'temp_mb', '9.1f'),
                     ('step s', 'step_s', '8.4f'), ('flops x', 'flops_ratio', '8.3f'),
                     ('temp x', 'temp_ratio', '7.3f'), ('time x', 'time_ratio', '7.3f')])
  return rows


if __name__ == '__main__':
  main()
