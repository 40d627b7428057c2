"""BERT-base's bf16 train step on one GPU beside Hugging Face's, for a short borrowed GPU slot.

  bash benchmarks/gpu.sh              # on the GPU host (see gpu.sh)
  bash benchmarks/gpu.sh --rehearse   # here, on CPU at tiny sizes: the same code paths
  python -m benchmarks.gpu_step [--rehearse]   # what gpu.sh runs, without its wheels and checks

Prints the GPU's bf16 matmul ceiling (an 8192^3 product through the model's own matmul), then
one JSON line per configuration, as `python -m benchmarks.train_step` does: sequence 128, batch 32,
128 and 256, attention dropout 0.1 (BERT's recipe) and 0, `model.attention_impl=auto` (so
dropout 0.1 takes the explicit path and dropout 0 cuDNN's fused kernel on a GPU), seq/s and
MFU, and `BertForPreTraining` (SDPA, torch AdamW, bf16 autocast) on the same batch with
`ratio` = its step time over ours. A table closes the run.
"""

from __future__ import annotations

import argparse
import json

import jax

from benchmarks.common.cli import print_machine, print_table
from benchmarks.common.step_timing import Ceiling, measure, torch_available
from benchmarks.common.synthetic import bench_config
from encoder.tasks import pretraining as task

FULL = dict(size='base', seq=128, batches=(32, 128, 256), steps=10, rounds=3,
            ceiling=(8192, 8192, 8192))
REHEARSAL = dict(size='tiny', seq=32, batches=(8,), steps=1, rounds=1, ceiling=(256, 256, 256))


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rehearse', action='store_true', help='tiny sizes, any device')
  args = parser.parse_args(argv)
  plan = REHEARSAL if args.rehearse else FULL
  print_machine()
  ceiling = Ceiling(*plan['ceiling'], 'bfloat16').measure()
  print(json.dumps({'ceiling_tflops': round(ceiling / 1e12, 2),
                    'ceiling_shape': plan['ceiling']}), flush=True)
  compare = 'torch' if torch_available() else 'none'
  if compare == 'none':
    print('# torch/transformers not importable: the Hugging Face half is skipped', flush=True)
  results = []
  for batch in plan['batches']:
    for dropout in (0.1, 0.0):
      overrides = [f'model.attention_dropout_rate={dropout}', 'model.attention_impl=auto']
      run = argparse.Namespace(
          seq=plan['seq'], batch=batch, dtype='bfloat16', vocab=30522, config=overrides,
          ceiling_shape=plan['ceiling'], rounds=plan['rounds'], steps=plan['steps'],
          compare=compare)
      config = bench_config(plan['size'], plan['seq'], batch, 'bfloat16', 30522, overrides)
      result = {'batch': batch, 'attention_dropout': dropout,
                'attention_impl': task.build_model(config).config.attention_impl,
                'platform': jax.default_backend()}
      try:  # one failure (out of memory, say) must not cost a short GPU slot the other rows
        result.update(measure(plan['size'], run))
        results.append(result)
      except Exception as e:  # noqa: BLE001 - reported as a JSON line, the run goes on
        result['error'] = f'{type(e).__name__}: {str(e).splitlines()[0][:300]}'
      print(json.dumps(result), flush=True)
  print_table(results, [('batch', 'batch', '>6'), ('dropout', 'attention_dropout', '>7'),
                        ('impl', 'attention_impl', '>8'), ('seq/s', 'seq_per_s', '9.1f'),
                        ('MFU', 'mfu', '6.1%'), ('HF seq/s', 'torch_seq_per_s', '9.1f'),
                        ('HF MFU', 'torch_mfu', '7.1%'), ('ratio', 'ratio', '6.2f')])
  return results


if __name__ == '__main__':
  main()
