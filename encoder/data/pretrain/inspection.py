"""`launch.py --inspect_data N`: look at what the model will be trained on.

Prints N decoded training examples with every masked position visible as {original→shown}
(shown is [MASK], a random token, or the original kept), the A/B segments and the NSP label (or
a packed row's example boundaries), the share of real tokens, and writes the first global batch
of raw arrays to WORKDIR/data_sample.npz."""

from __future__ import annotations

import os

import numpy as np

from encoder import config_schema
from encoder.data import cache
from encoder.data.pretrain.pretraining_data import build_pretraining_data
from encoder.errors import ConfigError

_NSP = {0: 'IsNext (B follows A)', 1: 'NotNext (B is random)'}


def format_example(batch: dict[str, np.ndarray], i: int, tokenizer, nsp: bool = True) -> str:
  """One example as text: tokens, with masked ones as {original→shown}; segments A and B split
  by |, the examples of a packed row by ‖."""
  ids, n = batch['input_ids'][i], int(batch['input_mask'][i].sum())
  shown_at = {}
  for pos, orig, w in zip(batch['masked_positions'][i], batch['masked_ids'][i],
                          batch['masked_weights'][i], strict=True):
    if w > 0:
      shown_at[int(pos)] = int(orig)
  examples = batch.get('input_segmentation')
  pieces = []
  for p in range(n):
    token = tokenizer.id_to_token(ids[p])
    if p in shown_at:
      token = f'{{{tokenizer.id_to_token(shown_at[p])}→{token}}}'
    if p > 0 and examples is not None and examples[i][p] != examples[i][p - 1]:
      pieces.append('‖')
    elif p > 0 and batch['segment_ids'][i][p] != batch['segment_ids'][i][p - 1]:
      pieces.append('|')
    pieces.append(token)
  masked = len(shown_at)
  head = f'example {i}: {n} tokens, {masked} masked'
  if examples is not None:
    head = (f'row {i}: {n} of {len(ids)} tokens real, {int(examples[i].max())} packed '
            f'example(s), {masked} masked')
  elif nsp:
    head += f', NSP label {batch["nsp_label"][i]} = {_NSP[int(batch["nsp_label"][i])]}'
  return head + '\n  ' + ' '.join(pieces)


def inspect_data(config, workdir: str, n: int) -> None:
  """Prints `n` decoded training examples and saves one global batch to WORKDIR/data_sample.npz."""
  if config.task not in config_schema.PRETRAINING_TASKS:  # a fine-tuning config: no corpus
    raise ConfigError('--inspect_data shows pretraining examples (masks, NSP); '
                      f'{config.experiment} is a {config.task} experiment')
  data = build_pretraining_data(config, workdir)
  it = data.train_iterator()
  first = next(it)
  batches = [first]
  while sum(len(b['input_ids']) for b in batches) < n:
    batches.append(next(it))
  it.close()
  merged = {k: np.concatenate([b[k] for b in batches]) for k in first}
  print(f'Data: {data.stats}')
  real = merged['input_mask'][:n].mean()
  print(f'Real (non-padding) tokens: {real:.1%} of these {n} rows (data.packing='
        f"{config.data.packing}).")
  print('Masked tokens are shown as {original→shown}; | separates segment A from segment B, '
        '‖ the examples of a packed row.')
  for i in range(n):
    print(format_example(merged, i, data.tokenizer, bool(config.data.nsp)))
  path = os.path.join(workdir, 'data_sample.npz')
  cache.write_arrays(path, first)
  print(f'Wrote one global batch ({len(first["input_ids"])} examples) to {path}')
