"""Throughput and MFU of the real pretraining train step, optionally against Hugging Face.

  python -m benchmarks.train_step --sizes mini,base --seq 128 --batch 32 --dtype float32 \
      --compare torch

Our step is the one launch.py runs, set up as the trainer sets it up
(`encoder.train.run_setup.setup_steps`: the strategy `parallel.strategy` names, pmap by
default; jit-compiled, state donated, seeded by `train.seed`), on device-resident batches of
the real layout (15% of positions masked, NSP labels), reused, so the numbers are the step
alone (the data loader has its own benchmark). The helpers are `benchmarks/common/step_timing.py`.

MFU is model FLOPs per second over a matmul ceiling measured in the same run: a jitted
[batch*seq, hidden] x [hidden, 4*hidden] product (the FFN's shape, or `--ceiling_shape`) in
the compute dtype, through the model's own `matmul` (bfloat16 accumulates in float32), timed
in every round next to the steps, since on a shared machine the ceiling moves with the load
(the best of five products per round, the median over rounds).
Model FLOPs per step, as in PaLM's appendix B (forward + backward = 3 x forward):

  6 * N * B * T  +  12 * L * d * B * T^2  +  6 * (d*V + d^2) * B * P

N is the encoder's matmul parameters (attention, FFN and pooler kernels, embeddings
excluded since a lookup is no matmul), T the sequence length, P the predicted (masked)
positions per sequence: the MLM transform and tied decoder run only there, in ours as in
BERT's original code. Hugging Face decodes every position, and its extra work is not counted
in its favour: both sides are credited with the same useful FLOPs.

`--compare torch` (needs torch and transformers) times `BertForPreTraining` (SDPA attention,
torch AdamW, same clipping, same size, batch and sequence; bf16 through `torch.autocast`) on
the same batch, alternating with ours in rounds; medians of the rounds and their ratio are
reported. Peak RSS is the process's high-water mark after our step has run, before torch
builds its model. One JSON object per configuration per line, then a table.
"""

from __future__ import annotations

import json
import sys

from benchmarks.common.cli import print_machine, print_table, shape_parser
from benchmarks.common.step_timing import measure, torch_available


def main(argv=None):
  parser = shape_parser(__doc__, sizes='mini,base', rounds=3,
                        rounds_help='alternations of ours and theirs')
  parser.add_argument('--steps', type=int, default=3, help='steps timed per round and side')
  parser.add_argument('--compare', choices=('none', 'torch'), default='none')
  parser.add_argument('--ceiling_shape', type=lambda s: tuple(int(x) for x in s.split(',')),
                      help='M,K,N of the ceiling matmul (default: the FFN, batch*seq,d,4d); '
                      'accelerators need a larger one to reach their peak')
  parser.add_argument('--config', action='append', default=[], metavar='KEY=VALUE',
                      help='extra experiment override, e.g. model.attention_dropout_rate=0')
  args = parser.parse_args(argv)
  if args.compare == 'torch' and not torch_available():
    print('torch/transformers not importable: comparison skipped', file=sys.stderr)
    args.compare = 'none'
  print_machine()
  results = []
  for size in args.sizes.split(','):
    results.append(measure(size, args))
    print(json.dumps(results[-1]), flush=True)
  print_table(results, [('size', 'size', '>6'), ('dtype', 'dtype', '>8'),
                        ('seq/s', 'seq_per_s', '8.2f'), ('tok/s', 'tokens_per_s', '8.0f'),
                        ('MFU', 'mfu', '6.1%'), ('ceiling', 'ceiling_gflops', '8.0f'),
                        ('HF seq/s', 'torch_seq_per_s', '9.2f'), ('ratio', 'ratio', '6.2f'),
                        ('compile', 'compile_s', '8.1f'), ('RSS MB', 'peak_rss_mb', '7.0f')])
  return results


if __name__ == '__main__':
  main()
