"""The pretraining train step timed beside Hugging Face's `BertForPreTraining`: model FLOPs,
the matmul ceiling they are measured against, ours and theirs, and one measurement of both
(`measure`), for benchmarks/train_step.py and benchmarks/gpu_step.py."""

from __future__ import annotations

import functools
import resource
import statistics
import time

import jax
import numpy as np

from benchmarks.common.synthetic import bench_config, random_batch
from encoder.modules import matmul
from encoder.modules.flops import keys_per_query, model_flops  # noqa: F401  (re-exported)
from encoder.tasks import pretraining as task
from encoder.train.run_setup import setup_steps
from encoder.train.steps import train_step
from encoder.train.strategy import OneDeviceStrategy


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
  """Our train step as the trainer sets it up (`setup_steps`: the strategy `parallel` names,
  the state seeded by `train.seed`, donated to the step), on one device-resident batch;
  `donate=False` compiles the same step without donating the state (`undonated_step`)."""

  def __init__(self, config, batch: dict, donate: bool = True):
    run = setup_steps(config)
    self.strategy, self.state = run.strategy, run.state
    self.step_fn = run.train_step if donate else undonated_step(run)
    self.batch = run.strategy.place_batch(batch)
    start = time.perf_counter()
    self.run(1)
    self.compile_s = time.perf_counter() - start

  def run(self, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
      self.state, metrics = self.step_fn(self.state, self.batch)
    jax.block_until_ready(metrics)
    self.metrics = metrics
    return (time.perf_counter() - start) / steps

  def loss(self) -> float:
    """The loss of the last step run."""
    return float(task.reduce_metrics(self.strategy.sum_metrics([self.metrics]))['loss'])


def undonated_step(run):
  """The train step of a one-device run (`OneDeviceStrategy`'s jit) without donating the
  state, so XLA writes the new state beside the old one: what donation saves (one device only;
  a pmap or mesh step is refused)."""
  if not isinstance(run.strategy, OneDeviceStrategy):
    raise ValueError(f'the undonated step is built for one device, not {run.strategy.name}')
  t = run.config.train
  return jax.jit(functools.partial(
      train_step, model=run.model, task=run.task, tx=run.tx,
      grad_accum_steps=t.grad_accum_steps, one_device=True,
      skip_nonfinite=bool(t.skip_nonfinite), rng_impl=t.rng_impl))


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
  """Whether the Hugging Face side can run here (torch and transformers importable)."""
  try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
  except ImportError:
    return False
  return True


def measure(size: str, args) -> dict:
  """One row of benchmarks/train_step.py (`args`: its flags): the ceiling, our step and, with
  `compare == 'torch'`, theirs, in alternating rounds; medians, MFU, compile time, peak RSS."""
  config = bench_config(size, args.seq, args.batch, args.dtype, args.vocab, args.config)
  batch = random_batch(config, args.batch)
  preds = task.max_predictions(config)
  flops = model_flops(task.build_model(config).config, args.batch, args.seq, preds)
  hidden = task.build_model(config).config.hidden_size
  shape = args.ceiling_shape or (args.batch * args.seq, hidden, 4 * hidden)
  ceiling = Ceiling(*shape, args.dtype)
  ours = Ours(config, batch, getattr(args, 'donate', True))
  rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  # Hugging Face's side is BertForPreTraining: a modern_* size has no BERT to compare with.
  theirs = (Theirs(config, batch) if args.compare == 'torch' and not size.startswith('modern')
            else None)
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
            'loss': round(ours.loss(), 4)}
  if theirs:
    their_s = statistics.median(theirs_t)
    result.update(torch_seq_per_s=round(args.batch / their_s, 3),
                  torch_mfu=round(flops / their_s / peak, 4),
                  ratio=round(their_s / step_s, 3))
  return result
