"""Small corpora and configs built in tmp dirs, so the data tests need nothing outside the repo."""

import os
import random

import pytest

from experiments import mlm_nsp_base

SPECIALS = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
WORDS = ['alpha', 'beta', 'gamma', 'delta', 'river', 'stone', 'light', 'quick', 'brown', 'fox',
         'jumps', 'over', 'lazy', 'dog', 'cat', 'runs', 'under', 'green', 'tree', 'sky']


def write_corpus(directory, num_docs=40, sentences=(8, 30), seed=0, name='corpus.txt') -> str:
  """Text corpus whose sentences carry their document and index: 'dN sM word word ...'."""
  rng = random.Random(seed)
  docs = []
  for d in range(num_docs):
    lines = []
    for s in range(rng.randint(*sentences)):
      words = [rng.choice(WORDS) for _ in range(rng.randint(3, 9))]
      lines.append(f'd{d} s{s} ' + ' '.join(words) + ' .')
    docs.append('\n'.join(lines))
  path = os.path.join(directory, name)
  with open(path, 'w', encoding='utf-8') as f:
    f.write('\n\n'.join(docs) + '\n')
  return path


def write_vocab(directory, num_docs=40, max_sentences=30) -> str:
  """A WordPiece vocab covering write_corpus text: tags are whole tokens, some words split."""
  vocab = SPECIALS + ['.', ',', '!', '?']
  vocab += [f'd{i}' for i in range(num_docs)] + [f's{i}' for i in range(max_sentences)]
  for w in WORDS:
    if len(w) > 4:  # 'river' -> 'riv' '##er': multi-piece words for whole-word masking
      vocab += [w[:3], '##' + w[3:]]
    else:
      vocab.append(w)
  vocab += ['the', 'a', 'un', '##able', '##s']
  seen, out = set(), []
  for t in vocab:
    if t not in seen:
      seen.add(t)
      out.append(t)
  path = os.path.join(directory, 'vocab.txt')
  with open(path, 'w', encoding='utf-8') as f:
    f.write('\n'.join(out) + '\n')
  return path


@pytest.fixture
def corpus_dir(tmp_path):
  write_corpus(tmp_path)
  write_vocab(tmp_path)
  return tmp_path


def make_config(corpus_dir, workdir, **data):
  """The base experiment on the tagged corpus and its WordPiece vocab, small and fast."""
  c = mlm_nsp_base.get_config()
  c.data.corpus = f'text:{corpus_dir}/corpus.txt'
  c.data.tokenizer = str(corpus_dir / 'vocab.txt')
  c.data.max_seq_length = 64
  c.data.eval_fraction = 0.1
  c.data.cache_dir = str(workdir / 'cache')
  c.data.prefetch = 2
  c.train.batch_size = 16
  for k, v in data.items():
    c.data[k] = v
  return c
