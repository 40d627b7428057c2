"""The train step of each run of mlm_modern_tiny's ladder, timed side by side: what each modern
change costs per step on this machine (the ladder's wall clock, without data or eval).

  python -m benchmarks.ladder_step [--rounds 5] [--steps 50]

Each arm is the real config (`--exp mlm_modern_tiny --sweep ladder`: 32 rows x 64 tokens) on
one device-resident batch of its layout (packed arms carry one document per row, the packing
fields included), stepped `--steps` times per round in alternating rounds. One JSON line per
arm: median step_ms, and its ratio to the arm below it and to `0-bert`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=1')

from benchmarks.common.step_timing import Ours  # noqa: E402 - after XLA_FLAGS
from benchmarks.common.synthetic import random_batch  # noqa: E402
from encoder import configs  # noqa: E402
from encoder.sweep import parse_sweep  # noqa: E402
from encoder.sweep.grid import run_configs  # noqa: E402
from encoder.tasks import pretraining as task  # noqa: E402
from encoder.train.resolve import resolve_config  # noqa: E402


def arm_configs() -> list[tuple[str, object]]:
  """(name, resolved config) of every ladder run, as `--sweep ladder` runs them."""
  base = configs.load_experiment('mlm_modern_tiny')
  axes = parse_sweep('ladder', base, configs.experiment_module('mlm_modern_tiny'))
  out = []
  for name, _, config in run_configs(base, axes):
    config = resolve_config(config)
    config.model.vocab_size = config.data.vocab_size
    out.append((name, config))
  return out


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rounds', type=int, default=5)
  parser.add_argument('--steps', type=int, default=50)
  args = parser.parse_args(argv)
  arms = []
  for name, config in arm_configs():
    batch = random_batch(config, config.train.batch_size)
    batch.update({k: v.__array__() for k, v in
                  task.packed_inputs(config, config.train.batch_size).items()})
    arms.append((name, Ours(config, batch)))
  times = {name: [] for name, _ in arms}
  for _ in range(args.rounds):
    for name, ours in arms:
      times[name].append(ours.run(args.steps))
  medians = [(name, statistics.median(times[name])) for name, _ in arms]
  first = medians[0][1]
  for i, (name, step_s) in enumerate(medians):
    below = medians[i - 1][1] if i else step_s
    print(json.dumps({'arm': name, 'step_ms': round(step_s * 1e3, 3),
                      'vs_below': round(step_s / below, 3), 'vs_bert': round(step_s / first, 3),
                      'rounds': args.rounds, 'steps_per_round': args.steps}), flush=True)


if __name__ == '__main__':
  main()
