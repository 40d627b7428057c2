"""Pretraining at a given shape on batches of our own: the config and random batches of the
real layout, for the scripts that time or compare the train step without a corpus."""

from __future__ import annotations

import numpy as np

from encoder import configs
from encoder.tasks import pretraining as task


def bench_config(size: str, seq: int, batch: int, dtype: str, vocab: int, extra=()):
  """mlm_nsp_base at this model size, sequence, global batch, dtype and vocabulary, with the
  `extra` overrides last: a config `setup_steps` takes as it is (no data to resolve). A
  `modern_*` size trains without NSP, as ModernBERT's recipe (it has no pooler)."""
  config = configs.load_experiment('mlm_nsp_base')
  modern = ['data.nsp=false'] if size.startswith('modern') else []
  configs.apply_overrides(config, [f'model.size={size}', *modern, f'data.max_seq_length={seq}',
                                   f'train.batch_size={batch}', f'model.dtype={dtype}',
                                   f'model.vocab_size={vocab}', *extra])
  return config


def random_batch(config, batch_size: int, seed: int = 0) -> dict:
  """A batch of the real layout: random tokens, 15% positions masked, random NSP labels."""
  rng = np.random.default_rng(seed)
  seq, preds, vocab = config.data.max_seq_length, task.max_predictions(config), \
      config.model.vocab_size
  positions = np.sort(np.stack([rng.choice(np.arange(1, seq), preds, replace=False)
                                for _ in range(batch_size)]), axis=1).astype(np.int32)
  ids = rng.integers(5, vocab, (batch_size, seq)).astype(np.int32)
  return {'input_ids': ids, 'segment_ids': (np.arange(seq) >= seq // 2).astype(np.int32)[None]
          .repeat(batch_size, 0), 'input_mask': np.ones((batch_size, seq), np.int32),
          'masked_positions': positions,
          'masked_ids': np.take_along_axis(ids, positions, 1),
          'masked_weights': np.ones((batch_size, preds), np.float32),
          'nsp_label': rng.integers(0, 2, batch_size).astype(np.int32)}
