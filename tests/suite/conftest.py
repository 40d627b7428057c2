"""Suite test helpers: GLUE-layout data folders (GLUE's real headers, a byte-order mark), a
stand-in pretrained run, and a fake trainer for the suite's own logic (planning, skipping,
resuming, failures, tables) in milliseconds; tests/suite/test_suite_runs.py trains for real."""

from __future__ import annotations

import hashlib
import json
import os
import random

import pytest

from encoder.suite import run_suite

WORDS = 'good bad fine dull great awful film plot actor scene'.split()


def _sentence(rng: random.Random) -> str:
  return ' '.join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))


def write_glue_dir(root, rows: int = 40, tasks=('sst2', 'mrpc')) -> str:
  """SST-2 (header `sentence label`) and MRPC (a BOM, `Quality #1 ID #2 ID #1 String #2
  String`) as the GLUE download lays them out, labels learnable from the words."""
  rng = random.Random(0)
  root = str(root)
  if 'sst2' in tasks:
    os.makedirs(os.path.join(root, 'SST-2'), exist_ok=True)
    with open(os.path.join(root, 'SST-2', 'train.tsv'), 'w', encoding='utf-8') as f:
      f.write('sentence\tlabel\n')
      for _ in range(rows):
        s = _sentence(rng)
        f.write(f"{s} \t{int('good' in s)}\n")
  if 'mrpc' in tasks:
    os.makedirs(os.path.join(root, 'MRPC'), exist_ok=True)
    with open(os.path.join(root, 'MRPC', 'train.tsv'), 'w', encoding='utf-8-sig') as f:
      f.write('Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n')
      for i in range(rows):
        a = _sentence(rng)
        f.write(f'{i % 2}\t{1000 + i}\t{2000 + i}\t{a}\t{a if i % 2 else _sentence(rng)}\n')
  return root


def fake_run(root, steps=(), model=None) -> str:
  """A directory that passes for a pretraining run: config.json, tokenizer/, checkpoints."""
  run = str(root)
  os.makedirs(os.path.join(run, 'tokenizer'), exist_ok=True)
  for step in steps:
    os.makedirs(os.path.join(run, 'checkpoints', str(step)), exist_ok=True)
  model = model or {'size': 'tiny', 'num_layers': 2, 'hidden_size': 32, 'attention': 'causal'}
  with open(os.path.join(run, 'config.json'), 'w') as f:
    json.dump({'task': 'pretraining', 'model': model}, f)
  return run


def fake_metric(workdir: str) -> float:
  """A dev score that depends only on the run (its workdir's last two parts)."""
  key = '/'.join(workdir.rstrip('/').split('/')[-2:])
  return int(hashlib.sha256(key.encode()).hexdigest()[:6], 16) / 0xFFFFFF


class FakeTrainer:
  """train_and_evaluate's stand-in: writes the metrics a finished run leaves; `fail` maps a run
  name ('pretrained/mrpc-seed1') to the error it raises."""

  def __init__(self):
    self.calls, self.fail = [], {}

  def __call__(self, config, workdir):
    name = '/'.join(workdir.rstrip('/').split('/')[-2:])
    self.calls.append(name)
    if name in self.fail:
      raise self.fail[name]
    os.makedirs(workdir, exist_ok=True)
    score = fake_metric(workdir)
    records = [{'step': config.train.num_steps, 'split': 'train', 'loss': 1.0},
               {'step': config.train.num_steps, 'split': 'eval', 'accuracy': score,
                'f1': score / 2, 'mcc': score - 0.5, 'pearson': score, 'spearman': score}]
    with open(os.path.join(workdir, 'metrics.jsonl'), 'w') as f:
      f.writelines(json.dumps(r) + '\n' for r in records)
    return records[-1]


@pytest.fixture
def fake_trainer(monkeypatch) -> FakeTrainer:
  from encoder.train import trainer
  fake = FakeTrainer()
  monkeypatch.setattr(trainer, 'train_and_evaluate', fake)
  return fake


BUDGET = ['train.num_steps=3', 'train.batch_size=8']  # a suite's runs, as short as they go


def glue_suite(tmp_path, *extra, data_dir=None, run=None):
  """The glue suite, 2 seeds, on `run` (a stand-in run by default) and a GLUE folder written
  under tmp_path, into tmp_path/suite."""
  data_dir = data_dir or write_glue_dir(tmp_path / 'glue')
  run = run or fake_run(tmp_path / 'run')
  return run_suite('glue', [f'init_from={run}', f'suite.data_dir={data_dir}', 'suite.seeds=2',
                            *BUDGET, *extra], str(tmp_path / 'suite'))
