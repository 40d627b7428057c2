"""Which XLA:CPU flags speed up our train step: each flag set against the default, side by side.

  python -m benchmarks.xla_flags --sizes mini,base --rounds 2

XLA reads `XLA_FLAGS` once, when the backend starts, so every flag set runs
`python -m benchmarks.train_step` in a process of its own. The sets take turns in every round (the
default first), so a change in the machine's load spreads over all of them; each set's
sequences/s is the median over rounds, and its ratio is against the default's median. Each
process also measures the matmul ceiling under its flags, printed beside the step.

The candidate sets are the CPU flags this jaxlib lists (`XLA_FLAGS=--help`): XNNPACK / YNNPACK
and oneDNN fusions of the matmuls, 512-bit vectors, and fast math (it drops NaN/inf
guarantees, so it is measured, not recommended). Add your own with `--flags NAME=FLAGS`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from benchmarks.common.cli import print_machine, shape_parser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CANDIDATES = {
    'default': '',
    'xnn_dot': '--xla_cpu_experimental_xnn_fusion_type=dot',
    'ynn_dot': '--xla_cpu_experimental_ynn_fusion_type=dot',
    'no_xnnpack': '--xla_cpu_use_xnnpack=false',
    'onednn_dot': '--xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_fusion_type=dot',
    'onednn_all': '--xla_cpu_use_onednn=true '
                  '--xla_cpu_experimental_onednn_fusion_type=dot,eltwise,reduce',
    'vector512': '--xla_cpu_prefer_vector_width=512',
    'fast_math': '--xla_cpu_enable_fast_math=true',
}


def run_once(flags: str, size: str, args) -> dict | None:
  """One `benchmarks.train_step` process under `flags`; its JSON line, or None if it failed."""
  env = dict(os.environ)
  env['XLA_FLAGS'] = ' '.join(x for x in (os.environ.get('XLA_FLAGS', ''), flags) if x)
  cmd = [sys.executable, '-m', 'benchmarks.train_step', '--sizes', size,
         '--seq', str(args.seq), '--batch', str(args.batch), '--dtype', args.dtype,
         '--rounds', '1', '--steps', str(args.steps), '--vocab', str(args.vocab)]
  proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
  lines = [line for line in proc.stdout.splitlines() if line.startswith('{')]
  if proc.returncode != 0 or not lines:
    print(f'# {flags or "default"} failed: {proc.stderr.strip().splitlines()[-1:]}',
          file=sys.stderr)
    return None
  return json.loads(lines[-1])


def main(argv=None):
  parser = shape_parser(__doc__, sizes='mini', rounds=2)
  parser.add_argument('--steps', type=int, default=3, help='steps timed per process')
  parser.add_argument('--only', help='comma-separated names of the candidate sets to run')
  parser.add_argument('--flags', action='append', default=[], metavar='NAME=FLAGS',
                      help='an extra flag set, e.g. "mine=--xla_cpu_ftz=false"')
  args = parser.parse_args(argv)
  sets = dict(CANDIDATES)
  for item in args.flags:
    name, _, flags = item.partition('=')
    sets[name] = flags
  if args.only:  # the named candidates, plus the default and any --flags of the user's own
    own = {item.partition('=')[0] for item in args.flags}
    sets = {n: f for n, f in sets.items() if n == 'default' or n in own
            or n in args.only.split(',')}
  print_machine(devices=False)  # JAX must not start here: its flags are the children's
  results = []
  for size in args.sizes.split(','):
    runs = {name: [] for name in sets}
    for _ in range(args.rounds):
      for name, flags in sets.items():
        record = run_once(flags, size, args)
        if record:
          runs[name].append(record)
    base = statistics.median(r['seq_per_s'] for r in runs['default']) if runs['default'] else 0
    for name, records in runs.items():
      if not records:
        continue
      seq_per_s = statistics.median(r['seq_per_s'] for r in records)
      result = {'size': size, 'flags': name, 'xla_flags': sets[name], 'dtype': args.dtype,
                'seq_per_s': seq_per_s, 'ratio': round(seq_per_s / base, 3) if base else None,
                'ceiling_gflops': statistics.median(r['ceiling_gflops'] for r in records),
                'compile_s': statistics.median(r['compile_s'] for r in records),
                'loss': records[-1]['loss'], 'runs': len(records)}
      results.append(result)
      print(json.dumps(result), flush=True)
  print(f'\n{"size":>6} {"flags":>12} {"seq/s":>8} {"vs default":>10} {"ceiling":>8} '
        f'{"compile":>8} {"loss":>8}')
  for r in results:
    print(f'{r["size"]:>6} {r["flags"]:>12} {r["seq_per_s"]:8.2f} {r["ratio"] or 0:10.3f} '
          f'{r["ceiling_gflops"]:8.0f} {r["compile_s"]:8.1f} {r["loss"]:8.4f}')
  return results


if __name__ == '__main__':
  main()
