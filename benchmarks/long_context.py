"""Long rows: tokens/s, model FLOP/s and peak memory of the train step and of embedding, per
attention form, from 512 to 8,192 tokens.

  python -m benchmarks.long_context --sizes modern_mini --lengths 512,1024,2048,4096,8192 \
      --impls explicit,blockwise --modes train,embed,local_layer --json

Each (size, form, length, mode) runs in a process of its own, so its peak RSS is its own;
a process that grows past `--max_rss_gb` is stopped and its line says so (`error`), as does
one that fails. Modes:

- train: the pretraining train step as the trainer runs it (benchmarks/common/step_timing.py's
  `Ours`: MLM alone on the modern sizes, 15% of positions predicted, no dropout as in
  ModernBERT's recipe), `--batch` rows of `seq` real tokens;
- embed: the encoder's forward pass (dropout off), as `encode`/`embed` run it;
- local_layer: one local attention layer's self-attention alone (forward and backward), at
  the size's width and window: what a band costs against the row's length.

Model FLOPs count only the attention a mask keeps: a global layer's whole [T, T] matrix, a
local layer's band (`keys_per_query`); the line gives them apart (`dense_gflops`,
`global_attention_gflops`, `local_attention_gflops`, per step), so what the explicit form
computes beyond them is waste a reader can see. `model_flops_per_s` is their sum per second.
Times are medians of `--steps` runs after one compiling run.

Each line names the form each kind of layer ran (`forms`, from `attention.layer_form`, as the
run's log says it): `--impls` names what is asked for, and a row short enough falls back (a
forward pass takes the explicit form up to two blocks, a train step up to one). An `--impls`
entry that would run the forms one before it ran at the same size, mode and length (`auto`
where it is blockwise, blockwise where the row takes the explicit form) is not run: its line
says `skipped` and names that one.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import time

FIELDS = ('size', 'impl', 'mode', 'seq')


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--sizes', default='modern_mini')
  parser.add_argument('--lengths', default='512,1024,2048,4096,8192')
  parser.add_argument('--impls', default='explicit,blockwise')
  parser.add_argument('--modes', default='train,embed')
  parser.add_argument('--batch', type=int, default=1)
  parser.add_argument('--dtype', default='float32', choices=('float32', 'bfloat16'))
  parser.add_argument('--steps', type=int, default=3, help='timed runs after the compiling one')
  parser.add_argument('--config', action='append', default=[], metavar='KEY=VALUE',
                      help='extra override for every run, e.g. model.attention_block_size=64')
  parser.add_argument('--max_rss_gb', type=float, default=20.0,
                      help='stop a run whose process grows past this')
  parser.add_argument('--json', action='store_true', help='JSON lines only, no closing table')
  parser.add_argument('--child', help=argparse.SUPPRESS)  # one run: size,impl,mode,seq
  parser.add_argument('--plan', action='store_true', help=argparse.SUPPRESS)  # forms, no run
  args = parser.parse_args(argv)
  if args.child:
    size, impl, mode, seq = args.child.split(',')
    print(json.dumps(run_one(size, impl, mode, int(seq), args)), flush=True)
    return None
  if args.plan:
    print(json.dumps(planned_forms(args)), flush=True)
    return None
  from benchmarks.common.cli import print_machine, print_table
  print_machine(devices=False)
  forms, results = plan_in_child(argv), []
  for size in args.sizes.split(','):
    for mode in args.modes.split(','):
      for seq in (int(n) for n in args.lengths.split(',')):
        ran = {}
        for impl in args.impls.split(','):
          these = forms[','.join((size, impl, mode, str(seq)))]
          same = ran.setdefault(these, impl)
          if same == impl:
            results.append(in_child(size, impl, mode, seq, args, argv))
          else:
            results.append({**dict(zip(FIELDS, (size, impl, mode, seq), strict=True)),
                            'forms': these, 'skipped': f'runs what {same} ran: {these}'})
          print(json.dumps(results[-1]), flush=True)
  if not args.json:
    print_table(results, [('size', 'size', '>11'), ('impl', 'impl', '>9'), ('mode', 'mode', '>11'),
                          ('seq', 'seq', '6.0f'), ('forms', 'forms', '>32'),
                          ('tok/s', 'tokens_per_s', '9.1f'),
                          ('GFLOP/s', 'model_gflops_per_s', '8.1f'),
                          ('RSS MB', 'peak_rss_mb', '8.0f'), ('compile', 'compile_s', '8.1f')])
  return results


def forms_of(cfg, mode: str, seq: int) -> str:
  """The form each kind of layer runs in `mode` on rows of `seq` (`attention.layer_form`):
  `global blockwise, local blockwise`; a local_layer run has its local layer alone."""
  from encoder.modules.attention import forms_by_layer_kind
  forms = forms_by_layer_kind(cfg, seq, packed=False, training=mode == 'train')
  if mode == 'local_layer':  # SelfAttention applied alone, deterministic (as `embed`)
    forms = {'local': forms.get('local', forms['global'])}
  return ', '.join(f'{kind} {form}' for kind, form in forms.items())


def run_config(size: str, impl: str, seq: int, args):
  """The pretraining config of one run: ModernBERT's recipe has no dropout;
  `--config model.attention_dropout_rate=0.1` adds it."""
  from benchmarks.common.synthetic import bench_config
  return bench_config(size, seq, args.batch, args.dtype, 30522,
                      ['model.dropout_rate=0.0', 'model.attention_dropout_rate=0.0',
                       f'model.attention_impl={impl}', *args.config])


def planned_forms(args) -> dict:
  """{'size,impl,mode,seq': the forms that run would run}, for every run asked for."""
  from encoder.tasks import pretraining as task
  forms = {}
  for size in args.sizes.split(','):
    for impl in args.impls.split(','):
      for seq in (int(n) for n in args.lengths.split(',')):
        cfg = task.build_model(run_config(size, impl, seq, args)).config
        for mode in args.modes.split(','):
          forms[','.join((size, impl, mode, str(seq)))] = forms_of(cfg, mode, seq)
  return forms


def plan_in_child(argv) -> dict:
  """`planned_forms` in a process of its own: `auto` resolves for this machine's backend,
  which this process leaves untouched (a GPU's memory stays the runs')."""
  forwarded = [a for a in (argv if argv is not None else sys.argv[1:])
               if not a.startswith('--child')]
  out = subprocess.run([sys.executable, '-m', 'benchmarks.long_context', *forwarded, '--plan'],
                       capture_output=True, text=True, check=True)
  return json.loads([line for line in out.stdout.splitlines() if line.startswith('{')][-1])


def in_child(size: str, impl: str, mode: str, seq: int, args, argv) -> dict:
  """One run in its own process, stopped if it grows past `--max_rss_gb`."""
  import psutil
  forwarded = [a for a in (argv if argv is not None else sys.argv[1:])
               if not a.startswith('--child')]
  command = [sys.executable, '-m', 'benchmarks.long_context', *forwarded,
             f'--child={size},{impl},{mode},{seq}']
  row = dict(zip(FIELDS, (size, impl, mode, seq), strict=False))
  process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  watched, peak = psutil.Process(process.pid), 0.0
  while process.poll() is None:
    try:
      peak = max(peak, watched.memory_info().rss / 2**30)
    except psutil.NoSuchProcess:
      break
    if peak > args.max_rss_gb:
      process.kill()
      process.wait()
      return {**row, 'error': f'stopped at {peak:.1f} GB of RSS (over --max_rss_gb)'}
    time.sleep(0.2)
  out, err = process.communicate()
  lines = [line for line in out.splitlines() if line.startswith('{')]
  if process.returncode or not lines:
    last = (err.strip().splitlines() or ['no output'])[-1]
    return {**row, 'error': f'exit {process.returncode}: {last[:300]}'}
  return json.loads(lines[-1])


def run_one(size: str, impl: str, mode: str, seq: int, args) -> dict:
  """Times one run in this process; its peak RSS is this process's high-water mark."""
  import jax

  from benchmarks.common.step_timing import keys_per_query
  from encoder.modules.flops import mlm_head_flops
  from encoder.tasks import pretraining as task
  config = run_config(size, impl, seq, args)
  cfg = task.build_model(config).config
  timer = {'train': _train, 'embed': _embed, 'local_layer': _local_layer}[mode]
  compile_s, seconds = timer(config, cfg, args)
  d, b = cfg.hidden_size, args.batch
  gated = cfg.activation in ('geglu', 'swiglu')
  per_layer = 4 * d * d + d * cfg.intermediate_size * (3 if gated else 2)
  local = [cfg.is_local(i) for i in range(cfg.num_layers)]
  passes = 1 if mode == 'embed' else 3  # forward + backward = 3 x forward
  # Multiply-adds x 2 per pass: Q.K^T and P.V, 2 d FLOPs each per key a query keeps.
  attention = {kind: passes * 4 * d * b * seq * keys_per_query(seq, window) * layers
               for kind, window, layers in (
                   ('global', 0, local.count(False)),
                   ('local', cfg.local_window, local.count(True)))}
  if mode == 'local_layer':
    dense = passes * 2 * 4 * d * d * b * seq
    attention = {'global': 0.0, 'local': attention['local'] / max(local.count(True), 1)}
  else:
    dense = passes * 2 * per_layer * cfg.num_layers * b * seq
    if mode == 'train':
      dense += mlm_head_flops(cfg, b, task.max_predictions(config))
  flops = dense + attention['global'] + attention['local']
  return {'size': size, 'impl': impl, 'mode': mode, 'seq': seq, 'batch': b,
          'dtype': args.dtype, 'block': cfg.attention_block_size,
          'forms': forms_of(cfg, mode, seq),
          'tokens_per_s': round(b * seq / seconds, 1), 'step_s': round(seconds, 4),
          'model_flops_per_s': round(flops / seconds, 1),
          'model_gflops_per_s': round(flops / seconds / 1e9, 2),
          'dense_gflops': round(dense / 1e9, 3),
          'global_attention_gflops': round(attention['global'] / 1e9, 3),
          'local_attention_gflops': round(attention['local'] / 1e9, 3),
          'compile_s': round(compile_s, 2),
          'peak_rss_mb': round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
          **_device_peak(),
          'load_average': round(os.getloadavg()[0], 2), 'devices': jax.local_device_count()}


def _device_peak() -> dict:
  """An accelerator's peak memory in use (`peak_device_mb`), where its runtime reports it."""
  import jax
  stats = jax.devices()[0].memory_stats() or {}
  if 'peak_bytes_in_use' not in stats:
    return {}
  return {'peak_device_mb': round(stats['peak_bytes_in_use'] / 2**20, 1)}


def _timed(fn, steps: int) -> tuple[float, float]:
  """(seconds of the first, compiling, call; median seconds of `steps` more)."""
  import jax
  start = time.perf_counter()
  jax.block_until_ready(fn())
  compile_s = time.perf_counter() - start
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return compile_s, statistics.median(times)


def _train(config, cfg, args):
  from benchmarks.common.step_timing import Ours
  from benchmarks.common.synthetic import random_batch
  start = time.perf_counter()
  ours = Ours(config, random_batch(config, args.batch))  # compiles and runs one step
  compile_s = time.perf_counter() - start
  return compile_s, statistics.median(ours.run(1) for _ in range(args.steps))


def _embed(config, cfg, args):
  import jax
  import jax.numpy as jnp

  from encoder.modules.transformer import Encoder
  encoder = Encoder(cfg)
  ids = jnp.asarray(jax.random.randint(jax.random.key(0), (args.batch, config.data.max_seq_length),
                                       5, cfg.vocab_size))
  mask = jnp.ones_like(ids)
  params = jax.jit(encoder.init)(jax.random.key(1), ids, None, mask)
  forward = jax.jit(lambda p, i, m: encoder.apply(p, i, None, m).pooled_output)
  return _timed(functools.partial(forward, params, ids, mask), args.steps)


def _local_layer(config, cfg, args):
  import jax
  import jax.numpy as jnp

  from encoder.modules.attention import SelfAttention
  from encoder.modules.attention_mask import AttentionMask
  layer = SelfAttention(cfg)
  x = jax.random.normal(jax.random.key(0), (args.batch, config.data.max_seq_length,
                                            cfg.hidden_size), jnp.dtype(cfg.dtype))
  mask = AttentionMask(jnp.ones(x.shape[:2], jnp.int32), window=cfg.local_window)
  params = layer.init(jax.random.key(1), x, mask)
  grad = jax.jit(jax.grad(lambda p, h: jnp.sum(layer.apply(p, h, mask)[0].astype(jnp.float32)),
                          argnums=(0, 1)))
  return _timed(functools.partial(grad, params, x), args.steps)


if __name__ == '__main__':
  main()
