"""A ModernBERT-shaped pretraining run (RoPE, local/global layers, no biases, packed rows,
bfloat16) on the FSDP mesh: exact resume across a stop, and a checkpoint that loads."""

import json

import numpy as np
import pytest

import encoder
from tests.train.test_mesh import MESHES
from tests.train.test_trainer import losses, train

MODERN = ('model.size=modern_tiny', 'model.local_window=16', 'model.dtype=bfloat16',
          'data.nsp=false', 'data.packing=documents', 'train.log_every=1',
          'train.batch_size=16', *MESHES['fsdp=8'])


# Slow: its parts are each in the default suite (FSDP meshes in test_mesh, packed resume in
# test_packed_pretraining, bf16 attention in tests/modules); this is their combination.
@pytest.mark.slow
def test_modern_packed_bf16_run_on_fsdp_resumes_exactly(tmp_path, corpus, cache_dir):
  common = (*MODERN, 'train.num_steps=4', 'train.eval_every=4', 'train.checkpoint_every=2')
  straight = train(tmp_path / 'straight', corpus, cache_dir, *common)
  train(tmp_path / 'resumed', corpus, cache_dir, *common, 'train.stop_at_step=2')
  resumed = train(tmp_path / 'resumed', corpus, cache_dir, *common)
  assert resumed == straight
  assert losses(tmp_path / 'resumed') == losses(tmp_path / 'straight')
  saved = json.loads((tmp_path / 'straight' / 'config.json').read_text())['model']
  assert (saved['position_embedding'], saved['use_bias'], saved['global_every']) == (
      'rope', False, 3)
  model = encoder.load(str(tmp_path / 'straight'))
  assert 'pooler' not in model.params['encoder']
  assert np.isfinite(model.encode(['a short test sentence']).sequence_output).all()
