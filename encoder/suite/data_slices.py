"""A task's train and dev files for the suite: its own dev file where the folder has it, else
a deterministic held-out slice of its training file (the official dev sets are often not at
hand: `suite.dev_set=auto`, the default, decides per task; `official` or `heldout` force one).

The slice is a seeded shuffle of the file's units (table rows, CoNLL sentences, SQuAD
paragraphs): the first `heldout_fraction` (at most `dev_size`) are the dev set, the rest (at
most the task's cap: `train_sizes`, else `train_size`) the training set. Units are written
back verbatim (header, byte-order mark and all), so the runs read the files as GLUE ships
them. The slices are written once, into a folder named by the settings and the source file's
size, and every arm, seed and rerun reads the same ones. With an official dev file, the cap
still applies to the training file (a seeded sample of it, written the same way). SST-2's
file holds every phrase of each sentence's parse tree: its slice is whole sentences, and their
phrases leave training (sentence_split.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random

from encoder import storage
from encoder.suite import sentence_split
from encoder.suite.catalog import SuiteTask
from encoder.suite.options import train_cap

SOURCE_DIRS = {'glue': 'data_dir', 'conll': 'conll_dir', 'squad': 'squad_dir'}


@dataclasses.dataclass(frozen=True)
class TaskData:
  """Where one task's runs read their data: local files, or (both '') its TFDS dataset."""
  train: str = ''
  dev: str = ''
  missing: str = ''  # why the task cannot run ('' when it can)
  dev_source: str = 'official'  # 'official' (its own dev file, or TFDS's) or 'heldout'


def task_data(task: SuiteTask, suite, suite_dir: str) -> TaskData:
  """The task's files under the suite's folder (sliced on first use), TFDS, or why missing."""
  mode = suite.dev_set  # checked by options.build
  folder = suite[SOURCE_DIRS[task.source]]
  if not folder:
    return TaskData()  # TFDS: the experiment's own splits (the official dev set)
  train = os.path.join(storage.abspath(folder), task.train_file)
  if not storage.isfile(train):
    return TaskData(missing=f'no {train}')
  dev = os.path.join(storage.abspath(folder), task.dev_file)
  if mode == 'official' and not storage.isfile(dev):
    return TaskData(missing=f'no {dev} (suite.dev_set=official)')
  official = mode == 'official' or (mode == 'auto' and storage.isfile(dev))
  if official and not train_cap(task.name, suite):
    return TaskData(train, dev)
  sliced = slices(task, train, suite, os.path.join(suite_dir, 'data'), heldout=not official)
  return dataclasses.replace(sliced, dev=dev) if official else sliced


def slices(task: SuiteTask, source: str, suite, data_dir: str, heldout: bool = True) -> TaskData:
  """The training file's slices: the held-out dev set (with `heldout`) and the capped rest."""
  settings = {'source': source, 'bytes': storage.getsize(source),
              'fraction': float(suite.heldout_fraction) if heldout else 0.0,
              'dev_size': int(suite.dev_size) if heldout else 0,
              'train_size': train_cap(task.name, suite), 'seed': int(suite.split_seed)}
  if heldout and task.phrase_tree:
    settings['whole_sentences'] = True
  key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
  folder = os.path.join(data_dir, f'{task.name}-{key}')
  ext = os.path.splitext(task.train_file)[1]
  paths = TaskData(os.path.join(folder, f'train{ext}'),
                   os.path.join(folder, f'dev{ext}') if heldout else '',
                   dev_source='heldout' if heldout else 'official')
  done = os.path.join(folder, 'slice.json')  # written last: the slices are complete
  if storage.isfile(done):
    return paths
  head, units, joiner, tail = _split_units(task.kind, storage.read_text(source),
                                           task.header_lines)
  order = list(range(len(units)))
  random.Random(int(suite.split_seed)).shuffle(order)
  whole = heldout and task.phrase_tree  # SST-2: dev is whole sentences (the first column)
  texts = [u.split('\t')[0] for u in units] if whole else []
  candidates = order
  if whole:
    sentences = sentence_split.whole_sentences(texts)
    candidates = [i for i in order if i in sentences]
  n_dev = 0
  if heldout:
    n_dev = max(1, round(len(candidates) * float(suite.heldout_fraction)))
    if suite.dev_size:
      n_dev = min(n_dev, int(suite.dev_size))
  dev = candidates[:n_dev]
  train = sentence_split.outside(texts, dev, order) if whole else order[n_dev:]
  if settings['train_size']:
    train = train[:settings['train_size']]
  storage.makedirs(folder)
  for path, picked in ((paths.train, train), (paths.dev, dev)):
    if path:
      storage.write_atomic(path, head + joiner.join(units[i] for i in sorted(picked)) + tail)
  storage.write_atomic(done, json.dumps(
      {**settings, 'train_units': len(train), 'dev_units': len(dev)}, indent=2))
  return paths


def _split_units(kind: str, text: str, header_lines: int) -> tuple[str, list[str], str, str]:
  """(text before the units, the units, what goes between them, what after): table rows after
  the header lines, CoNLL sentences (blank-line separated, -DOCSTART- documents dropped) or
  SQuAD paragraphs (each with its article's title)."""
  if kind == 'rows':
    lines = text.split('\n')
    if lines and lines[-1] == '':
      lines.pop()
    head = ''.join(line + '\n' for line in lines[:header_lines])
    return head, [line for line in lines[header_lines:] if line.strip()], '\n', '\n'
  if kind == 'sentences':
    blocks = ['\n'.join(line for line in block.split('\n') if line.strip()
                        and not line.startswith('-DOCSTART-'))
              for block in text.replace('\r\n', '\n').split('\n\n')]
    units = [b for b in blocks if b]
    return '', units, '\n\n', '\n'
  data = json.loads(text)
  units = [json.dumps({'title': article.get('title', ''), 'paragraphs': [paragraph]})
           for article in data['data'] for paragraph in article['paragraphs']]
  return (f'{{"version": {json.dumps(data.get("version", ""))}, "data": [', units, ', ', ']}')
