"""`Model.encode` throughput against Hugging Face `BertModel` on the same inputs.

  python -m benchmarks.inference --sizes mini,base --seq 128 --batch 32

Ours is the public path a notebook takes, `encoder.inference.Model.encode(input_ids=...)`:
host arrays in, the jitted encoder, numpy sequence and pooled outputs back on the host. Theirs
is `BertModel` (SDPA attention, eval mode, `torch.inference_mode`) on the same ids, segments and
mask. Both run random weights of the same shape (speed does not depend on the values), in
alternating rounds on one machine; the medians of the rounds and their ratio are reported,
one JSON object per configuration per line, then a table.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time

import flax.linen as nn
import jax
import numpy as np

from benchmarks.common.cli import print_machine, shape_parser
from encoder.inference import Model
from encoder.modules.config import model_config
from encoder.modules.transformer import Encoder


def inputs(batch: int, seq: int, vocab: int, seed: int = 0) -> dict:
  """Random ids with a ragged right padding, as real batches of sentences have."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(seq // 2, seq + 1, batch)
  mask = (np.arange(seq)[None] < lengths[:, None]).astype(np.int32)
  ids = rng.integers(5, vocab, (batch, seq)).astype(np.int32) * mask
  segments = ((np.arange(seq)[None] >= lengths[:, None] // 2) & mask.astype(bool))
  return {'input_ids': ids, 'segment_ids': segments.astype(np.int32), 'input_mask': mask}


def ours(size: str, vocab: int, dtype: str, data: dict):
  cfg = model_config({'size': size, 'dtype': dtype}, vocab)
  cfg = dataclasses.replace(cfg, dropout_rate=0.0, attention_dropout_rate=0.0)
  params = nn.unbox(jax.jit(Encoder(cfg).init)(jax.random.key(0), data['input_ids'][:1]))
  model = Model({'model': dataclasses.asdict(cfg)}, {'encoder': params['params']}, None, cfg)

  def run():
    return model.encode(**data)
  return cfg, run


def theirs(cfg, data: dict, dtype: str):
  import torch
  import transformers
  hf = transformers.BertConfig(
      vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
      num_attention_heads=cfg.num_heads, intermediate_size=cfg.intermediate_size,
      max_position_embeddings=cfg.max_position_embeddings, type_vocab_size=cfg.type_vocab_size,
      layer_norm_eps=cfg.layer_norm_eps)
  model = transformers.BertModel._from_config(hf, attn_implementation='sdpa').eval()
  tensors = {'input_ids': torch.from_numpy(data['input_ids'].astype(np.int64)),
             'token_type_ids': torch.from_numpy(data['segment_ids'].astype(np.int64)),
             'attention_mask': torch.from_numpy(data['input_mask'].astype(np.int64))}

  def run():
    with torch.inference_mode(), torch.autocast('cpu', torch.bfloat16,
                                                enabled=dtype == 'bfloat16'):
      return model(**tensors)
  return run


def timed(fn, calls: int) -> float:
  start = time.perf_counter()
  for _ in range(calls):
    fn()
  return (time.perf_counter() - start) / calls


def measure(size: str, args) -> dict:
  data = inputs(args.batch, args.seq, args.vocab)
  cfg, our_run = ours(size, args.vocab, args.dtype, data)
  start = time.perf_counter()
  our_run()
  compile_s = time.perf_counter() - start
  their_run = None
  if args.compare == 'torch':
    their_run = theirs(cfg, data, args.dtype)
    their_run()
  ours_t, theirs_t = [], []
  for _ in range(args.rounds):
    ours_t.append(timed(our_run, args.calls))
    if their_run:
      theirs_t.append(timed(their_run, args.calls))
  result = {'size': size, 'seq': args.seq, 'batch': args.batch, 'dtype': args.dtype,
            'seq_per_s': round(args.batch / statistics.median(ours_t), 2),
            'compile_s': round(compile_s, 2), 'rounds': args.rounds, 'calls_per_round': args.calls}
  if their_run:
    result['torch_seq_per_s'] = round(args.batch / statistics.median(theirs_t), 2)
    result['ratio'] = round(statistics.median(theirs_t) / statistics.median(ours_t), 3)
  return result


def main(argv=None):
  parser = shape_parser(__doc__, sizes='mini,base', rounds=5)
  parser.add_argument('--calls', type=int, default=3, help='encode calls per round and side')
  parser.add_argument('--compare', choices=('none', 'torch'), default='torch')
  args = parser.parse_args(argv)
  if args.compare == 'torch':
    try:
      import torch  # noqa: F401
      import transformers  # noqa: F401
    except ImportError:
      print('torch/transformers not importable: comparison skipped', file=sys.stderr)
      args.compare = 'none'
  print_machine()
  results = []
  for size in args.sizes.split(','):
    results.append(measure(size, args))
    print(json.dumps(results[-1]), flush=True)
  nan = float('nan')
  print(f'\n{"size":>6} {"dtype":>8} {"seq/s":>8} {"HF seq/s":>9} {"ratio":>6}')
  for r in results:
    print(f'{r["size"]:>6} {r["dtype"]:>8} {r["seq_per_s"]:8.1f} '
          f'{r.get("torch_seq_per_s", nan):9.1f} {r.get("ratio", nan):6.2f}')
  return results


if __name__ == '__main__':
  main()
