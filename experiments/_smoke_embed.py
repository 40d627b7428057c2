"""Tiny synthetic contrastive data for the `embed_*:smoke` variants, so they run on a fresh clone.

Written once (deterministically, atomically) under the system temp directory, one per layout the
contrastive task reads: JSONL triplets, a TSV of scored pairs, and a BEIR folder. An anchor and
its positive share a topic word, so even a tiny model can learn to pair them.
"""

from __future__ import annotations

import json
import os
import random
import tempfile

from experiments._smoke_data import write_once

TOPICS = ['river', 'violin', 'planet', 'garden', 'engine', 'castle', 'forest', 'ocean', 'dragon',
          'bakery', 'rocket', 'island', 'tiger', 'piano', 'desert', 'glacier']
FILLER = ['the', 'a', 'old', 'new', 'quiet', 'bright', 'near', 'by', 'with', 'small', 'far']


def _text(rng: random.Random, topic: str, words: int) -> str:
  return ' '.join([topic, *rng.choices(FILLER, k=words), topic])


def _triplets(rng: random.Random, n: int) -> list[str]:
  rows = []
  for _ in range(n):
    topic, other = rng.sample(TOPICS, 2)
    rows.append(json.dumps({'anchor': _text(rng, topic, 3), 'positive': _text(rng, topic, 5),
                            'negative': _text(rng, other, 5)}))
  return rows


def _scored(rng: random.Random, n: int) -> list[str]:
  rows = ['sentence1\tsentence2\tscore']
  for _ in range(n):
    topic, other = rng.sample(TOPICS, 2)
    same = rng.random() < 0.5
    rows.append(f'{_text(rng, topic, 3)}\t{_text(rng, topic if same else other, 3)}\t'
                f'{rng.uniform(3.5, 5) if same else rng.uniform(0, 1.5):.2f}')
  return rows


def _beir(directory: str, rng: random.Random) -> str:
  """A BEIR folder: one document per topic and word count, queries judged in train and test."""
  os.makedirs(os.path.join(directory, 'qrels'), exist_ok=True)
  docs = [(f'd{i}', topic) for i, topic in enumerate(TOPICS * 2)]
  write_once(os.path.join(directory, 'corpus.jsonl'),
         [json.dumps({'_id': d, 'title': topic, 'text': _text(rng, topic, 8)})
          for d, topic in docs])
  queries = [(f'q{i}', topic) for i, topic in enumerate(TOPICS * 4)]
  write_once(os.path.join(directory, 'queries.jsonl'),
         [json.dumps({'_id': q, 'text': _text(rng, topic, 2)}) for q, topic in queries])
  for split, chosen in (('train', queries[:48]), ('test', queries[48:])):
    write_once(os.path.join(directory, 'qrels', f'{split}.tsv'),
           ['query-id\tcorpus-id\tscore'] + [f'{q}\t{d}\t1' for q, topic in chosen
                                             for d, t in docs if t == topic][:200])
  return directory


def smoke_files(kind: str) -> tuple[str, str]:
  """(train source, eval source) of the tiny `kind` set: triplets, scored or beir."""
  directory = os.path.join(tempfile.gettempdir(), 'encoder_smoke_data')
  os.makedirs(directory, exist_ok=True)
  if kind == 'beir':
    folder = _beir(os.path.join(directory, 'embed_beir'), random.Random('beir'))
    return folder, folder
  make, ext = (_triplets, 'jsonl') if kind == 'triplets' else (_scored, 'tsv')
  paths = [write_once(os.path.join(directory, f'embed_{kind}_{split}.{ext}'),
                  make(random.Random(f'{kind}-{split}'), n))
           for split, n in (('train', 64), ('eval', 32))]
  return paths[0], paths[1]
