"""inspect_data prints readable examples and writes one global batch."""

import numpy as np

from encoder.data.pretrain.inspection import inspect_data
from tests.data.conftest import make_config


def test_inspect_data(corpus_dir, tmp_path, capsys):
  config = make_config(corpus_dir, tmp_path)
  inspect_data(config, str(tmp_path / 'run'), 20)  # more than one batch of 16
  out = capsys.readouterr().out
  assert out.count('example ') == 20 and '→[MASK]}' in out and '[SEP] |' in out
  assert 'IsNext' in out and 'NotNext' in out
  with np.load(tmp_path / 'run' / 'data_sample.npz') as z:
    assert z['input_ids'].shape == (16, 64) and z['masked_weights'].dtype == np.float32


def test_inspect_data_shows_the_examples_of_packed_rows(corpus_dir, tmp_path, capsys):
  config = make_config(corpus_dir, tmp_path, nsp=False, packing='documents')
  inspect_data(config, str(tmp_path / 'run'), 4)
  out = capsys.readouterr().out
  rows = [line for line in out.splitlines() if line.startswith('row ')]
  assert len(rows) == 4 and 'NSP' not in out
  # Each '‖' opens the next packed example with its own [CLS]; the count matches the header.
  bodies = [line for line in out.splitlines() if line.startswith('  [CLS]')]
  for head, body in zip(rows, bodies, strict=True):
    examples = int(head.split(' packed example')[0].rsplit(' ', 1)[1])
    assert body.count('‖ [CLS]') == body.count('‖') == examples - 1
  assert any(body.count('‖') for body in bodies)  # the corpus's documents are shorter than rows
  assert 'Real (non-padding) tokens:' in out
