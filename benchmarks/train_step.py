"""Throughput and MFU of the real pretraining train step, optionally against Hugging Face.

  python benchmarks/train_step.py --sizes mini,base --seq 128 --batch 32 --dtype float32 \
      --compare torch

Our step is the one launch.py runs (`PmapStrategy.steps`: jit-compiled, pmap-ed, state donated) on
device-resident batches of the real layout (15% of positions masked, NSP labels), reused, so
the numbers are the step alone (the data loader has its own benchmark).

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
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.cli import print_machine, print_table, shape_parser  # noqa: E402
from encoder import configs  # noqa: E402
from encoder.modules import matmul  # noqa: E402
from encoder.tasks import pretraining as task  # noqa: E402
from encoder.train import sharding  # noqa: E402
from encoder.train.optim import make_optimizer  # noqa: E402
from encoder.train.strategy import PmapStrategy  # noqa: E402


def bench_config(size: str, seq: int, batch: int, dtype: str, vocab: int, extra=()):
  config = configs.load_experiment('mlm_nsp_base')
  configs.apply_overrides(config, [f'model.size={size}', f'data.max_seq_length={seq}',
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


def model_flops(model_cfg, batch: int, seq: int, preds: int) -> float:
  """Training FLOPs of one step by the formula in the module docstring."""
  d, layers, vocab = model_cfg.hidden_size, model_cfg.num_layers, model_cfg.vocab_size
  ffn = model_cfg.intermediate_size * (2 if model_cfg.activation == 'geglu' else 1)
  per_layer = 4 * d * d + d * ffn + model_cfg.intermediate_size * d
  n = layers * per_layer + d * d  # + pooler (run on one position; negligible either way)
  return (6 * n * batch * seq + 12 * layers * d * batch * seq * seq
          + 6 * (d * vocab + d * d) * batch * preds)


class Ceiling:
  """The jitted matmul FLOP/s on this machine now, in the compute dtype: [m, k] x [k, n]."""

  def __init__(self, m: int, k: int, n: int, dtype: str):
    key = jax.random.key(0)
    self.x = jax.random.normal(key, (m, k), dtype)
    self.w = jax.random.normal(key, (k, n), dtype)
    self.flops = 2 * m * k * n
    self.fn = jax.jit(matmul.matmul)  # the model's own product (float32 accumulation)
    self.fn(self.x, self.w).block_until_ready()

  def measure(self, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
      start = time.perf_counter()
      self.fn(self.x, self.w).block_until_ready()
      times.append(time.perf_counter() - start)
    return self.flops / min(times)


class Ours:
  def __init__(self, config, batch: dict):
    self.model, tx = task.build_model(config), make_optimizer(config.train)
    strategy = PmapStrategy()
    self.state = strategy.init_state(self.model, tx, task.dummy_batch(config), 0)
    self.step_fn, _ = strategy.steps(self.model, task, tx, config.train.grad_accum_steps)
    self.batch = sharding.shard(batch)
    start = time.perf_counter()
    self.run(1)
    self.compile_s = time.perf_counter() - start
    self.last_loss = None

  def run(self, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
      self.state, metrics = self.step_fn(self.state, self.batch)
    jax.block_until_ready(metrics)
    self.metrics = metrics
    return (time.perf_counter() - start) / steps


class Theirs:
  """Hugging Face BertForPreTraining with the same shape, batch, AdamW and clipping."""

  def __init__(self, config, batch: dict):
    import torch
    import transformers
    m, t = task.build_model(config).config, config.train
    hf = transformers.BertConfig(
        vocab_size=m.vocab_size, hidden_size=m.hidden_size, num_hidden_layers=m.num_layers,
        num_attention_heads=m.num_heads, intermediate_size=m.intermediate_size,
        max_position_embeddings=m.max_position_embeddings, type_vocab_size=m.type_vocab_size,
        hidden_dropout_prob=m.dropout_rate, attention_probs_dropout_prob=m.attention_dropout_rate,
        layer_norm_eps=m.layer_norm_eps)
    self.torch = torch
    self.device = 'cuda' if torch.cuda.is_available() else 'cpu'  # beside ours on a GPU host
    self.model = transformers.BertForPreTraining._from_config(hf, attn_implementation='sdpa')
    self.model.to(self.device).train()
    self.opt = torch.optim.AdamW(self.model.parameters(), lr=t.learning_rate, betas=(t.b1, t.b2),
                                 eps=t.eps, weight_decay=t.weight_decay)
    self.clip = t.clip_norm
    self.bf16 = m.dtype == 'bfloat16'
    labels = np.full(batch['input_ids'].shape, -100, np.int64)
    np.put_along_axis(labels, batch['masked_positions'], batch['masked_ids'], 1)
    self.inputs = {'input_ids': torch.from_numpy(batch['input_ids'].astype(np.int64)),
                   'token_type_ids': torch.from_numpy(batch['segment_ids'].astype(np.int64)),
                   'attention_mask': torch.from_numpy(batch['input_mask'].astype(np.int64)),
                   'labels': torch.from_numpy(labels),
                   'next_sentence_label': torch.from_numpy(batch['nsp_label'].astype(np.int64))}
    self.inputs = {k: v.to(self.device) for k, v in self.inputs.items()}
    self.run(1)

  def run(self, steps: int) -> float:
    torch = self.torch
    start = time.perf_counter()
    for _ in range(steps):
      with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.bf16):
        loss = self.model(**self.inputs).loss
      loss.backward()
      if self.clip:
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
      self.opt.step()
      self.opt.zero_grad(set_to_none=True)
    if self.device == 'cuda':
      torch.cuda.synchronize()  # the steps were queued; time them done
    return (time.perf_counter() - start) / steps


def torch_available() -> bool:
  try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
  except ImportError:
    return False
  return True


def measure(size: str, args) -> dict:
  config = bench_config(size, args.seq, args.batch, args.dtype, args.vocab, args.config)
  batch = random_batch(config, args.batch)
  preds = task.max_predictions(config)
  flops = model_flops(task.build_model(config).config, args.batch, args.seq, preds)
  hidden = task.build_model(config).config.hidden_size
  shape = args.ceiling_shape or (args.batch * args.seq, hidden, 4 * hidden)
  ceiling = Ceiling(*shape, args.dtype)
  ours = Ours(config, batch)
  rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  theirs = Theirs(config, batch) if args.compare == 'torch' else None
  ours_t, theirs_t, ceilings = [], [], []
  for _ in range(args.rounds):
    ceilings.append(ceiling.measure())
    ours_t.append(ours.run(args.steps))
    if theirs:
      theirs_t.append(theirs.run(args.steps))
  step_s, peak = statistics.median(ours_t), statistics.median(ceilings)
  result = {'size': size, 'seq': args.seq, 'batch': args.batch, 'dtype': args.dtype,
            'seq_per_s': round(args.batch / step_s, 3),
            'tokens_per_s': round(args.batch * args.seq / step_s, 1),
            'compile_s': round(ours.compile_s, 2), 'peak_rss_mb': round(rss_mb, 1),
            'model_tflops_per_step': round(flops / 1e12, 4),
            'achieved_gflops': round(flops / step_s / 1e9, 1),
            'ceiling_gflops': round(peak / 1e9, 1), 'mfu': round(flops / step_s / peak, 4),
            'rounds': args.rounds, 'steps_per_round': args.steps,
            'devices': jax.local_device_count(),
            'loss': round(float(task.reduce_metrics(
                jax.tree.map(lambda x: np.asarray(x)[0], ours.metrics))['loss']), 4)}
  if theirs:
    their_s = statistics.median(theirs_t)
    result.update(torch_seq_per_s=round(args.batch / their_s, 3),
                  torch_mfu=round(flops / their_s / peak, 4),
                  ratio=round(their_s / step_s, 3))
  return result


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
