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
