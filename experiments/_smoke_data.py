"""Tiny synthetic fine-tuning files for `:smoke` variants, so they run on a fresh clone.

Each kind is written once (deterministically, atomically) under the system temp directory and
exercises a different local format: TSV with and without a header, CSV, JSONL, CoNLL columns.
The labels follow simple word cues, so even a tiny model can learn something from them.
"""

from __future__ import annotations

import json
import os
import random
import tempfile

GOOD = ['wonderful', 'great', 'moving', 'brilliant', 'delightful', 'superb']
BAD = ['awful', 'boring', 'dull', 'terrible', 'clumsy', 'tedious']
NOUNS = ['film', 'story', 'cast', 'script', 'plot', 'music', 'ending', 'scene']
PEOPLE = ['Alice', 'Bruno', 'Chen', 'Dmitri', 'Elena', 'Farah']
PLACES = ['Paris', 'Lagos', 'Oslo', 'Lima', 'Kyoto', 'Quebec']
ORGS = ['Acme', 'Globex', 'Initech', 'Umbrella']


def _sentence(rng: random.Random, positive: bool) -> str:
  return f'the {rng.choice(NOUNS)} was {rng.choice(GOOD if positive else BAD)} .'


def write_once(path: str, lines: list[str]) -> str:
  """Writes `lines` to `path` unless it exists (atomically: parallel test workers share it)."""
  if not os.path.exists(path):
    tmp = f'{path}.{os.getpid()}.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
      f.write(''.join(line + '\n' for line in lines))
    os.replace(tmp, path)
  return path


def _rows(kind: str, rng: random.Random, n: int) -> list[str]:
  rows = []
  for i in range(n):
    positive = i % 2 == 0
    a, b = _sentence(rng, positive), _sentence(rng, rng.random() < 0.5)
    if kind == 'single':  # TSV with a header
      rows.append(f'{a}\t{int(positive)}')
    elif kind == 'single_noheader':  # CoLA's layout: source, label, original label, sentence
      rows.append(f'src{i}\t{int(positive)}\t*\t{a}')
    elif kind == 'pair':  # CSV, label names
      same = rng.random() < 0.5
      rows.append(f'"{a}","{a if same else b}",{"equivalent" if same else "different"}')
    elif kind == 'nli':  # JSONL
      label = ('entailment', 'neutral', 'contradiction')[i % 3]
      hyp = a if label == 'entailment' else (b if label == 'neutral' else _sentence(rng, False))
      rows.append(json.dumps({'premise': a, 'hypothesis': hyp, 'label': label}))
    elif kind == 'regression':  # TSV of scores in [0, 5]
      score = rng.choice([0.0, 1.5, 3.0, 5.0])
      rows.append(f'{a}\t{a if score == 5.0 else b}\t{score}')
  return rows


def _conll(rng: random.Random, n: int) -> list[str]:
  lines = ['-DOCSTART- -X- -X- O', '']
  for _ in range(n):
    for word, tag in [(rng.choice(PEOPLE), 'B-PER'), ('visited', 'O'),
                      (rng.choice(PLACES), 'B-LOC'), ('for', 'O'), (rng.choice(ORGS), 'B-ORG'),
                      ('Inc', 'I-ORG'), ('.', 'O')]:
      lines.append(f'{word} NNP {tag}')
    lines.append('')
  return lines


HEADERS = {'single': 'sentence\tlabel', 'regression': 'sentence1\tsentence2\tlabel'}
EXTENSIONS = {'single': 'tsv', 'single_noheader': 'tsv', 'pair': 'csv', 'nli': 'jsonl',
              'regression': 'tsv', 'ner': 'txt'}


def smoke_files(kind: str, eval_sets: int = 1) -> tuple[str, str]:
  """(train path, comma-separated eval paths) of the tiny `kind` data set, written if absent."""
  directory = os.path.join(tempfile.gettempdir(), 'encoder_smoke_data')
  os.makedirs(directory, exist_ok=True)
  paths = []
  for split, n in [('train', 48)] + [(f'eval{i}', 16) for i in range(eval_sets)]:
    rng = random.Random(f'{kind}-{split}')
    ext = EXTENSIONS[kind]
    lines = _conll(rng, n) if kind == 'ner' else _rows(kind, rng, n)
    if kind in HEADERS:
      lines = [HEADERS[kind]] + lines
    paths.append(write_once(os.path.join(directory, f'{kind}_{split}.{ext}'), lines))
  return paths[0], ','.join(paths[1:])
