"""Our pretraining train step under `jax.profiler`, its ops summed by category against the step
time, on whatever device runs it (benchmarks/gpu_step.py's profile; the reading of the trace
and the categories are xla_trace's, which benchmarks/step_profile.py uses on CPU).

The step is the one `setup_steps` builds (the strategy's, state donated), lowered and compiled
here so that the HLO text of the very executable the trace shows names its ops. On a GPU it is
compiled without XLA's command buffers (`compiler_options`): inside one (a CUDA graph) the
kernels carry the command buffer's name, not the HLO instruction that launched them, so the
profile could not say what they compute. The unprofiled step time of that executable is
reported beside the profile; the other variants of gpu_step run with command buffers, as
training does.
"""

from __future__ import annotations

import collections
import statistics
import tempfile
import time

import jax

from benchmarks.common.xla_trace import HloIndex, categorize_steps, read_jax_trace
from encoder.train.run_setup import setup_steps

# On a GPU: no command buffers in the profiled executable (an empty list of command types).
GPU_PROFILE_OPTIONS = {'xla_gpu_enable_command_buffer': ''}


class ProfiledStep:
  """The train step of `config` on one placed `batch`, compiled (with `compiler_options`, if
  any), timed and profiled."""

  def __init__(self, config, batch: dict, compiler_options: dict | None = None):
    run = setup_steps(config)
    self.batch_size = config.train.batch_size
    self.state, self.batch = run.state, run.strategy.place_batch(batch)
    start = time.perf_counter()
    lowered = run.train_step.lower(self.state, self.batch)
    self.compiled = lowered.compile(compiler_options) if compiler_options else lowered.compile()
    self.compile_s = time.perf_counter() - start
    self.hlo = HloIndex(self.compiled.as_text())

  def step(self):
    self.state, metrics = self.compiled(self.state, self.batch)
    return jax.block_until_ready(metrics)

  def times_ms(self, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
      start = time.perf_counter()
      self.step()
      out.append((time.perf_counter() - start) * 1e3)
    return out

  def profile(self, steps: int, trace_dir: str | None = None) -> list[dict]:
    """`steps` steps under the profiler, one annotation each, read back by category."""
    with tempfile.TemporaryDirectory(prefix='profiled_step_') as scratch:
      where = trace_dir or scratch
      with jax.profiler.trace(where, create_perfetto_trace=True):
        for i in range(steps):
          with jax.profiler.TraceAnnotation(f'step_profile:{i}'):
            self.step()
      return categorize_steps(read_jax_trace(where, steps, self.hlo), self.hlo,
                              self.batch_size)


def summary(step_ms: list[float], steps: list[dict], top: int = 12) -> dict:
  """Medians over the profiled steps: ms per category, phase and (backward) category, the busy
  and idle ms, and the `top` ops by ms with their category's opcode and source op."""
  if not steps or not any(s['ops'] for s in steps):
    raise RuntimeError('the trace holds no ops of the step (no device tracer: CUPTI missing?)')
  med = statistics.median
  names = sorted(set().union(*(s['categories'] for s in steps)))
  categories = {c: med([s['categories'].get(c, 0.0) for s in steps]) for c in names}
  backward = {c: med([s['backward'].get(c, 0.0) for s in steps])
              for c in set().union(*(s['backward'] for s in steps))}
  phases = {p: med([s['phases'].get(p, 0.0) for s in steps])
            for p in set().union(*(s['phases'] for s in steps))}
  ops = collections.Counter()
  for s in steps:
    for name, ms in s['ops'].items():
      ops[name] += ms / len(steps)
  return {'step_ms': med(step_ms), 'profiled_ms': med([s['wall_ms'] for s in steps]),
          'busy_ms': med([s['busy_ms'] for s in steps]),
          'idle_ms': med([s['wall_ms'] - s['busy_ms'] for s in steps]),
          'categories': dict(sorted(categories.items(), key=lambda kv: -kv[1])),
          'phases': phases, 'backward_categories': backward,
          'top_ops': [[n, ms] for n, ms in ops.most_common(top)]}


def describe(hlo: HloIndex, name: str) -> str:
  """What an op computes, in a few words: opcode, output shape and source op."""
  info = hlo.info.get(hlo.resolve(name))
  if info is None:
    return '(not in the HLO)'
  what = info['target'] or info['opcode']
  source = info['op_name'].split('/', 1)[-1] if info['op_name'] else ''
  return f"{what} {info['shape'].split('{')[0]} {source}"[:110]


def print_profile(row: dict, hlo: HloIndex | None = None) -> None:
  """The profile as a table: ms per step and share of the (profiled) step by category, largest
  first; then busy, idle, the phases and the largest ops."""
  step = row['profiled_ms']
  label = max([len(c) for c in row['categories']] + [24]) + 2
  print(f"\nprofile: batch {row['batch']}, {row['what']}; ms per step (median of "
        f"{row['profiled_steps']} profiled steps), share of the profiled step")
  for category, ms in row['categories'].items():
    print(f'{category:<{label}}{ms:9.2f}{ms / step:8.1%}')
  for name, ms in (('= device busy', row['busy_ms']), ('idle (no op running)', row['idle_ms']),
                   ('profiled step', step), ('step, not profiled', row['step_ms'])):
    print(f'{name:<{label}}{ms:9.2f}{ms / step:8.1%}')
  print('phases: ' + ', '.join(f'{p} {ms:.2f} ms' for p, ms in sorted(row['phases'].items())))
  print('largest ops (ms per step):')
  for name, ms in row['top_ops']:
    print(f'  {ms:8.3f}  {name:<36} {describe(hlo, name) if hlo else ""}')
