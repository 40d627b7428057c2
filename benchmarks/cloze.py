"""Cloze accuracy of a pretraining run: one word masked in held-out sentences, top-1 and top-5.

  python -m benchmarks.cloze RUN_DIR [--sentences 200] [--examples 5]

The sentences come from the run's own held-out documents (`encoder.data.pretrain.pretraining_data.
split_documents` with the run's corpus and eval settings), so the model never trained on them.
A sentence qualifies when it reads as prose (6 to 40 words, at least 70% of them plain
alphabetic words); its target is one such word, not the first, that the run's tokenizer writes
as a single piece, since one [MASK] can only be filled by one piece. Sentences and targets are
drawn with a fixed seed: the same run gives the same numbers, and runs with the same tokenizer
are scored on the same sentences (`set_digest` says whether two runs were).

A prediction is right when `fill_mask`'s token is the target's piece (the word-start marker
included): top-1 is the most probable piece, top-5 any of the five.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys

import numpy as np

SEED = 0
WORD = re.compile(r'[A-Za-z]+')
PUNCT = ',.;:!?'


def held_out_sentences(config, run_dir: str) -> list[str]:
  """The run's held-out documents' sentences, in corpus order: the documents its preparation
  held out (the same shard plan and `shard_worker.held_out` choice per shard)."""
  from encoder.data.corpus import sources
  from encoder.data.pretrain import shard_worker
  d = config['data']  # the run's config.json, as `encoder.load` reads it
  cache = d.get('cache_dir') or os.path.join(run_dir, 'cache')
  plan = sources.plan(d['corpus'], int(d.get('prepare_shard_mb', 8.0) * 2**20),
                     cache if os.path.isdir(cache) else None, d.get('tfds_data_dir') or None)
  held_out = {'fraction': d['eval_fraction'], 'max_documents': d['max_eval_documents']}
  sentences = []
  for index, shard in enumerate(plan):
    job = {'shard': shard, 'index': index, 'num_shards': len(plan), 'eval': held_out}
    sentences += [s for doc in shard_worker.split_shard(job)[0]['eval'] for s in doc]
  return sentences


def targets(sentence: str, tokenizer) -> list[tuple[int, int]]:
  """(start, end) of every word that may be masked: alphabetic, not first, one piece."""
  words = list(re.finditer(r'\S+', sentence))
  if not 6 <= len(words) <= 40:
    return []
  plain = [w for w in words if WORD.fullmatch(w.group().rstrip(PUNCT))]
  if len(plain) < 0.7 * len(words):
    return []
  spans = []
  for w in plain:
    if w.start() == 0:
      continue
    core = w.group().rstrip(PUNCT)
    if len(tokenizer.encode(core)) == 1:
      spans.append((w.start(), w.start() + len(core)))
  return spans


def cloze_items(sentences: list[str], tokenizer, n: int, max_tokens: int = 10**9) -> list[dict]:
  """`n` (masked text, target piece) items, drawn with a fixed seed: one word per sentence.
  Sentences longer than the model's sequence (`max_tokens`, [CLS] and [SEP] included) are left
  out: truncated, they would lose their right context, or the [MASK] itself."""
  rng = np.random.default_rng(SEED)
  candidates = [(s, spans) for s in sentences if (spans := targets(s, tokenizer))
                and len(tokenizer.encode(s)) + 2 <= max_tokens]
  order = rng.permutation(len(candidates))[:n]
  items = []
  for i in sorted(order.tolist()):
    sentence, spans = candidates[i]
    start, end = spans[rng.integers(len(spans))]
    piece = tokenizer.id_to_token(tokenizer.encode(sentence[start:end])[0])
    items.append({'text': sentence[:start] + '[MASK]' + sentence[end:], 'target': piece,
                  'word': sentence[start:end]})
  return items


def score(model, items: list[dict], top_k: int = 5) -> list[list[str]]:
  """The top_k pieces `fill_mask` gives each item's [MASK]."""
  predictions = model.fill_mask([item['text'] for item in items], top_k=top_k)
  return [[token for token, _ in masks[0]] for masks in predictions]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('run_dir')
  parser.add_argument('--sentences', type=int, default=200)
  parser.add_argument('--examples', type=int, default=5, help='items printed with predictions')
  args = parser.parse_args(argv)
  import encoder
  model = encoder.load(args.run_dir)
  items = cloze_items(held_out_sentences(model.config, args.run_dir), model.tokenizer,
                      args.sentences, int(model.config['data']['max_seq_length']))
  if len(items) < args.sentences:
    print(f'# only {len(items)} held-out sentences qualify', file=sys.stderr)
  top = score(model, items)
  top1 = float(np.mean([row[0] == item['target'] for row, item in zip(top, items, strict=True)]))
  top5 = float(np.mean([item['target'] in row for row, item in zip(top, items, strict=True)]))
  for item, row in list(zip(items, top, strict=True))[:args.examples]:
    print(f"{item['text']}\n    target {item['target']}   top-5 {', '.join(row)}")
  digest = hashlib.sha256(json.dumps([(i['text'], i['target']) for i in items]).encode())
  result = {'run': args.run_dir, 'sentences': len(items), 'top1': round(top1, 4),
            'top5': round(top5, 4), 'vocab_size': model.tokenizer.vocab_size,
            'set_digest': digest.hexdigest()[:12]}
  print(json.dumps(result), flush=True)
  return result


if __name__ == '__main__':
  main()
