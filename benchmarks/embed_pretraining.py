"""Which pretraining gives the better embedder: each pretrained run (and its scratch twin: the
same architecture and tokenizer, random weights) fine-tuned on the NLI triplets by the
`embed_nli` recipe, then judged on STS-B (Spearman of the cosine) and SciFact (nDCG@10,
Recall@100 over the train queries); seeds side by side, medians and ranges.

  python launch.py --exp mlm_nsp_tiny --workdir runs/nsp_tiny        # the runs to compare
  python launch.py --exp mlm_modern_tiny --workdir runs/modern_tiny
  python -m benchmarks.embed_pretraining --arms nsp=runs/nsp_tiny,modern=runs/modern_tiny

The last 500 triplets are the runs' own eval set (a training curve, not a result); the runs
keep their last step. One JSON line per arm and seed, then one per arm with the medians.
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMBED = os.path.join(ROOT, '..', 'shared', 'data', 'embed')
MEASURES = ('sts_spearman', 'ndcg@10', 'recall@100')


def split_triplets(path: str, directory: str, held_out: int = 500) -> tuple[str, str]:
  with open(path, encoding='utf-8') as f:
    lines = [line for line in f if line.strip()]
  paths = (os.path.join(directory, 'train.jsonl'), os.path.join(directory, 'eval.jsonl'))
  for out, part in zip(paths, (lines[:-held_out], lines[-held_out:]), strict=True):
    with open(out, 'w', encoding='utf-8') as f:
      f.writelines(part)
  return paths


def judge(run: str, sts: str, beir_dir: str) -> dict:
  import encoder
  from encoder.embedding import evaluate
  model = encoder.load(run)
  start = time.perf_counter()
  scores = {'sts_spearman': evaluate.evaluate_sts(model, sts)['spearman']}
  beir = evaluate.evaluate_beir(model, beir_dir, 'train')
  scores.update({m: beir[m] for m in ('ndcg@10', 'recall@100')})
  return {**scores, 'eval_seconds': round(time.perf_counter() - start, 1)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--arms', required=True, help='name=RUN,...: pretrained runs to compare')
  parser.add_argument('--seeds', default='0,1,2')
  parser.add_argument('--lr', type=float, default=1e-4)
  parser.add_argument('--epochs', type=float, default=1.0)
  parser.add_argument('--triplets', default=os.path.join(EMBED, 'nli', 'triplets.jsonl'))
  parser.add_argument('--sts', default=os.path.join(EMBED, 'stsb', 'train.tsv'))
  parser.add_argument('--beir', default=os.path.join(EMBED, 'scifact'))
  # Tokens per text, in training and when judged (the tiny runs pretrain at 64).
  parser.add_argument('--max_seq_length', type=int, default=128)
  parser.add_argument('--workdir', default='')
  parser.add_argument('--no_scratch', action='store_true')
  args = parser.parse_args(argv)
  if not all(os.path.exists(p) for p in (args.triplets, args.sts, args.beir)):
    print('skipped: needs the NLI triplets, STS-B pairs and SciFact folder')
    return 0
  from encoder.suite.arms import scratch_arm
  print_machine()
  root = args.workdir or tempfile.mkdtemp(prefix='embed_pretraining_')
  os.makedirs(root, exist_ok=True)
  train, held_out = split_triplets(args.triplets, root)
  arms = []
  for spec in args.arms.split(','):
    name, run = spec.split('=', 1)
    arms.append((name, (f'init_from={run}',)))
    if not args.no_scratch:
      arms.append((f'{name}-scratch', scratch_arm(run).overrides))
  rows: dict[str, list[dict]] = {}
  for name, overrides in arms:
    for seed in [int(s) for s in args.seeds.split(',')]:
      workdir = os.path.join(root, f'{name}_seed{seed}')
      judged = os.path.join(workdir, 'judged.json')
      if os.path.exists(judged):  # a rerun keeps what an earlier one measured
        with open(judged, encoding='utf-8') as f:
          rows.setdefault(name, []).append(json.load(f))
        continue
      start = time.perf_counter()
      subprocess.run([sys.executable, os.path.join(ROOT, 'launch.py'), '--exp', 'embed_nli',
                      '--workdir', workdir, *(f'--config.{o}' for o in overrides),
                      f'--config.data.train={train}', f'--config.data.eval={held_out}',
                      f'--config.train.seed={seed}', f'--config.train.learning_rate={args.lr}',
                      f'--config.train.num_epochs={args.epochs}', '--config.train.best_metric=',
                      f'--config.data.max_seq_length={args.max_seq_length}',
                      f'--config.embed.max_seq_length={args.max_seq_length}',
                      # One length: bucketing each role apart compiles a step per combination
                      # (up to 4 x 4 x 4 here), which a run of 190 tiny steps cannot repay.
                      '--config.data.length_buckets=none',
                      '--config.train.eval_every=100000', '--config.train.checkpoint_every=100000'],
                     check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
      row = {**judge(workdir, args.sts, args.beir),
             'train_seconds': round(time.perf_counter() - start, 1)}
      rows.setdefault(name, []).append(row)
      with open(judged, 'w', encoding='utf-8') as f:
        json.dump(row, f)
      print(json.dumps({'arm': name, 'seed': seed, **row, 'load_average': os.getloadavg()[0]}),
            flush=True)
  for name, results in rows.items():
    print(json.dumps({'arm': name, 'medians': {m: round(statistics.median(r[m] for r in results),
                                                        4) for m in MEASURES},
                      'ranges': {m: [round(min(r[m] for r in results), 4),
                                     round(max(r[m] for r in results), 4)] for m in MEASURES},
                      'seeds': len(results), 'lr': args.lr, 'epochs': args.epochs}), flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
