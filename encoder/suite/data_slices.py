"""A task's train and dev files for the suite: a deterministic held-out slice of its training
file as the dev set (the official dev sets are often not at hand), or its own dev file.

The slice is a seeded shuffle of the file's units (table rows, CoNLL sentences, SQuAD
paragraphs): the first `heldout_fraction` (at most `dev_size`) are the dev set, the rest (at
most `train_size`) the training set. Units are written back verbatim (header, byte-order mark
and all), so the runs read the files as GLUE ships them. The slices are written once, into a
folder named by the settings and the source file's size, and every arm, seed and rerun reads
the same ones.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random

from encoder import storage
from encoder.suite.tasks import SuiteTask

SOURCE_DIRS = {'glue': 'data_dir', 'conll': 'conll_dir', 'squad': 'squad_dir'}


@dataclasses.dataclass(frozen=True)
class TaskData:
  """Where one task's runs read their data: local files, or (both '') its TFDS dataset."""
  train: str = ''
  dev: str = ''
  missing: str = ''  # why the task cannot run ('' when it can)


def task_data(task: SuiteTask, suite, suite_dir: str) -> TaskData:
  """The task's files under the suite's folder (sliced on first use), TFDS, or why missing."""
  folder = suite.get(SOURCE_DIRS[task.source])
  if not folder:
    return TaskData()  # TFDS: the experiment's own splits (the official dev set)
  train = os.path.join(storage.abspath(folder), task.train_file)
  if not storage.isfile(train):
    return TaskData(missing=f'no {train}')
  if suite.dev_set == 'official':
    dev = os.path.join(storage.abspath(folder), task.dev_file)
    if not storage.isfile(dev):
      return TaskData(missing=f'no {dev} (suite.dev_set=official)')
    return TaskData(train, dev)
  return heldout_slices(task, train, suite, os.path.join(suite_dir, 'data'))


def heldout_slices(task: SuiteTask, source: str, suite, data_dir: str) -> TaskData:
  settings = {'source': source, 'bytes': storage.getsize(source),
              'fraction': float(suite.heldout_fraction), 'dev_size': int(suite.dev_size),
              'train_size': int(suite.train_size), 'seed': int(suite.split_seed)}
  key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
  folder = os.path.join(data_dir, f'{task.name}-{key}')
  ext = os.path.splitext(task.train_file)[1]
  paths = TaskData(os.path.join(folder, f'train{ext}'), os.path.join(folder, f'dev{ext}'))
  if storage.isfile(paths.dev):  # written last: both are complete
    return paths
  head, units, joiner, tail = _split_units(task.kind, storage.read_text(source),
                                           task.header_lines)
  order = list(range(len(units)))
  random.Random(int(suite.split_seed)).shuffle(order)
  n_dev = max(1, round(len(units) * float(suite.heldout_fraction)))
  if suite.dev_size:
    n_dev = min(n_dev, int(suite.dev_size))
  dev, train = order[:n_dev], order[n_dev:]
  if suite.train_size:
    train = train[:int(suite.train_size)]
  storage.makedirs(folder)
  for path, picked in ((paths.train, train), (paths.dev, dev)):
    storage.write_atomic(path, head + joiner.join(units[i] for i in sorted(picked)) + tail)
  storage.write_atomic(os.path.join(folder, 'slice.json'), json.dumps(
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
