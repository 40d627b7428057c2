"""Reading a `jax.profiler` trace: what each executed op is (from the HLO text of the
executable that ran), its category and phase, and the wall time split between the ops running
at each instant (benchmarks/step_profile.py and benchmarks/gpu_step.py print the result).

Where the ops are in the trace (`read_jax_trace`): XLA:CPU runs them on host threads, one event
per op carrying its HLO name (`hlo_op`). On a GPU they are the kernels of the device's streams
(process `/device:GPU:<i>`, one line per stream, `Stream #<id>(...)`), each kernel carrying the
HLO instruction that launched it in `hlo_op` (and its own name as the event's); the host's
events with an `hlo_op` there (cuLaunchKernel under `/host:CUPTI`) are launches, not work, and
are not counted. Inside an XLA command buffer (a CUDA graph) the kernels carry the command
buffer's name instead, so benchmarks/gpu_step.py compiles the profiled step without them (a
kernel XLA generated is still found by its own name, `device_ops`; a cuBLAS or cuDNN one is
not). A TPU's ops are on the `XLA Ops` line of `/device:TPU:<i>`.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re


class HloIndex:
  """What each instruction of a compiled module is: opcode, output shape, `op_name` metadata
  and, for a fusion, the opcodes and op_names fused into it (nested fusions included)."""

  _INSTR = re.compile(r'^\s*(?:ROOT )?%([^\s=]+) = (\S+(?:\[[^\]]*\])?(?:\{[^}]*\})?|\(.*?\)) '
                      r'([\w\-]+)\((.*)$')

  def __init__(self, text: str):
    self.info, computations, current = {}, collections.defaultdict(list), None
    self.entry = None
    for line in text.splitlines():
      head = re.match(r'^(?:ENTRY )?%([^\s(]+) .*\{$', line)
      if head:
        current = head.group(1)
        if line.startswith('ENTRY'):
          self.entry = current
        continue
      m = self._INSTR.match(line)
      if not m:
        continue
      name, shape, opcode, rest = m.groups()
      op = re.search(r'op_name="([^"]*)"', rest)
      calls = re.search(r'calls=%([^\s,}]+)', rest)
      target = re.search(r'custom_call_target="([^"]*)"', rest)
      self.info[name] = {'opcode': opcode, 'shape': shape, 'op_name': op.group(1) if op else '',
                         'calls': calls.group(1) if calls else None,
                         'operands': rest.split(')')[0],
                         'target': target.group(1) if target else ''}
      computations[current].append(name)
    self.computations = computations
    self.arguments = {n for n in computations.get(self.entry, ())
                      if self.info[n]['opcode'] == 'parameter'}  # the step's inputs
    # A GPU kernel's own name is its instruction's with '.' and '-' made '_' (a kernel
    # without an `hlo_op` in the trace is found by it).
    self.kernels = {re.sub(r'[.\-]', '_', n): n for n in computations.get(self.entry, ())}

  def resolve(self, name: str) -> str:
    """The instruction a traced op names: itself, or the one whose kernel it is."""
    if name in self.info:
      return name
    return self.kernels.get(re.sub(r'[.\-]', '_', name), name)

  def fused(self, name: str) -> tuple[set, list]:
    """Opcodes and op_names inside a fusion (empty sets for a plain instruction)."""
    opcodes, op_names, todo = set(), [], [self.info.get(name, {}).get('calls')]
    while todo:
      comp = todo.pop()
      for inner in self.computations.get(comp, ()) if comp else ():
        i = self.info[inner]
        opcodes.add(i['opcode'])
        if i['op_name']:
          op_names.append(i['op_name'])
        if i['calls'] and i['opcode'] == 'fusion':
          todo.append(i['calls'])
    return opcodes, op_names


_RNG = re.compile(r'threefry|_bernoulli|_uniform|random_bits|rng|_random')
_ATTENTION_DOT = ('->', 'dot_product_attention')  # einsum specs: only attention uses einsum
_LAYOUT = re.compile(r'/(transpose|stack|unstack|split|slice|pad|concatenate|squeeze|reshape|'
                     r'copy|broadcast_in_dim|dynamic_slice|gather)$')


def phase_of(op_name: str) -> str:
  if 'transpose(jvp(' in op_name:
    return 'backward'
  return 'forward' if 'jvp(' in op_name else 'update'


def our_category(name: str, hlo: HloIndex, batch: int) -> str:
  """The category of one executed op, from its opcode, what it fuses and its source op."""
  if name == UNTRACED:
    return 'framework overhead'
  info = hlo.info.get(name)
  if info is None:  # not in the module we compiled beside it: name only
    return 'bias, residual, other elementwise'
  opcode, op_name = info['opcode'], info['op_name']
  opcodes, inner_names = hlo.fused(name)
  opcodes.add(opcode)
  phase = phase_of(op_name)
  if opcode.startswith('all-reduce'):
    return 'all-reduce (pmap psum)'
  if (_RNG.search(op_name) and 'Dropout' not in op_name.rsplit('/', 1)[-1]) or \
      'rng-bit-generator' in opcodes or opcode == 'while':
    return 'dropout: random bits'
  if phase == 'update':
    if opcode == 'copy' and info['operands'].lstrip('%') in hlo.arguments:
      return 'state copies (donation)'  # a copy of an input: the donated state
    return 'optimizer (clip, AdamW)'
  if 'ropout' in op_name:
    return 'dropout: apply'
  target = info.get('target', '')
  if opcode == 'custom-call' and 'fmha' in target:
    return 'matmul: attention'  # cuDNN's fused attention: both products, softmax and dropout
  is_dot = bool({'dot', 'convolution'} & opcodes) or (
      opcode == 'custom-call' and ('matmul' in info['operands'] or 'gemm' in target
                                   or 'matmul' in target))  # cuBLAS on a GPU
  if is_dot:
    return 'matmul: attention' if any(a in op_name for a in _ATTENTION_DOT) \
        else 'matmul: dense layers'
  if 'embeddings/' in op_name and 'embeddings/norm' not in op_name or 'scatter' in opcodes:
    return 'embeddings'
  if re.search(r'(_norm|/norm)/', op_name):
    return 'LayerNorm'
  if '/mlp/' in op_name and '/intermediate/' not in op_name and '/output/' not in op_name:
    return 'GELU'
  if _LAYOUT.search(op_name) or opcode in ('copy', 'transpose') or (
      '/attention/add_any' in op_name and opcodes <= {'add', 'pad', 'parameter', 'bitcast',
                                                      'transpose', 'copy', 'fusion'}):
    return 'transposes / copies'
  if '/attention/' in op_name:
    leading = re.match(r'\w+\[(\d+)', info['shape'])
    if op_name.endswith('reduce_sum') and not (leading and int(leading.group(1)) == batch):
      return 'bias grads (reductions)'
    return 'softmax + mask'
  if op_name.endswith('reduce_sum') and phase == 'backward':
    return 'bias grads (reductions)'
  if 'classifier' in op_name or 'jvp()' in op_name or 'log_softmax' in op_name or \
      'take_along_axis' in op_name:
    return 'loss'
  return 'bias, residual, other elementwise'


def innermost_segments(events: list[dict]):
  """One thread's events (which nest) as disjoint (start, end, name) of the innermost one."""
  out, stack = [], []
  for e in sorted(events, key=lambda e: (e['ts'], -e['dur'])):
    start, end = e['ts'], e['ts'] + e['dur']
    while stack and stack[-1][1] <= start:  # close what ended before this one starts
      s_end, name, cursor = stack.pop()[1:]
      if cursor < s_end:
        out.append((cursor, s_end, name))
      if stack:
        stack[-1][3] = s_end
    if stack and stack[-1][3] < start:
      out.append((stack[-1][3], start, stack[-1][2]))
    if stack:
      stack[-1][3] = max(stack[-1][3], end)
    stack.append([start, end, e['name'], start])
  while stack:
    s_end, name, cursor = stack.pop()[1:]
    if cursor < s_end:
      out.append((cursor, s_end, name))
    if stack:
      stack[-1][3] = max(stack[-1][3], s_end)
  return out


UNTRACED = '(pool work, no op in flight)'


def share_wall(segments: list[tuple[float, float, str]], in_flight=(), pool=()):
  """Each instant split evenly between the ops running then (`segments`: start, end, name,
  in µs). Where none is, it goes to the asynchronous ops still in flight (`in_flight`: from
  an op's event to its `end:` event, the time XLA:CPU's pool threads compute a dot or copy
  after the thunk that launched it returned), else to UNTRACED while a pool thread is inside
  a work region (`pool`: start, end), else nowhere (idle). Returns ms per name and the ms
  that went to some name."""
  points = [(t, kind, d, n) for kind, spans in enumerate((segments, in_flight, pool))
            for s, e, n in spans for t, d in ((s, 1), (e, -1))]
  points.sort(key=lambda p: (p[0], p[2]))
  active = [collections.Counter(), collections.Counter(), collections.Counter()]
  shares, last, busy = collections.Counter(), None, 0.0
  for t, kind, delta, name in points:
    if last is not None and t > last:
      for level in active:
        running = sum(level.values())
        if running:
          for n, count in level.items():
            shares[n] += (t - last) * count / running
          busy += t - last
          break
    active[kind][name] += delta
    if active[kind][name] == 0:
      del active[kind][name]
    last = t
  return {n: v / 1e3 for n, v in shares.items()}, busy / 1e3


def pool_regions(events: list[dict]) -> list[tuple[float, float, str]]:
  """A pool thread's work regions (ThreadpoolListener StartRegion ... StopRegion)."""
  out, opened = [], None
  for e in sorted(events, key=lambda e: e['ts']):
    if e['name'] == 'ThreadpoolListener::StartRegion':
      opened = e['ts']
    elif e['name'] == 'ThreadpoolListener::StopRegion' and opened is not None:
      out.append((opened, e['ts'], UNTRACED))
      opened = None
  return out


def async_spans(ops: list[dict], ends: list[dict]) -> list[tuple[float, float, str]]:
  """From the end of each op's event to its `end: NAME` event, where that comes later (the
  k-th event of a name paired with its k-th end: a loop body runs its ops many times)."""
  starts, finishes = collections.defaultdict(list), collections.defaultdict(list)
  for e in sorted(ops, key=lambda e: e['ts']):
    starts[e['name']].append(e['ts'] + e['dur'])
  for e in sorted(ends, key=lambda e: e['ts']):
    finishes[e['name'][len('end: '):]].append(e['ts'])
  return [(returned, done, name) for name, returns in starts.items()
          for returned, done in zip(returns, finishes.get(name, ()), strict=False)
          if done > returned + 50]  # 50 µs: an op that finished where it ran


def device_op_lines(trace_events: list[dict]) -> set[tuple[int, int]]:
  """(pid, tid) of the lines that hold an accelerator's ops: a GPU's streams, else a TPU's
  `XLA Ops` (a GPU's derived lines, if any, repeat its streams' kernels), else every line of a
  `/device:` process; empty for a CPU, whose ops run on host threads."""
  processes = {e['pid']: e['args'].get('name', '') for e in trace_events
               if e.get('ph') == 'M' and e.get('name') == 'process_name'}
  lines = {(e['pid'], e['tid']): e['args'].get('name', '') for e in trace_events
           if e.get('ph') == 'M' and e.get('name') == 'thread_name'
           and processes.get(e['pid'], '').startswith('/device:')}
  for wanted in (lambda n: n.startswith('Stream #'), lambda n: n == 'XLA Ops'):
    chosen = {line for line, name in lines.items() if wanted(name)}
    if chosen:
      return chosen
  return set(lines)


def device_ops(events: list[dict], lines: set[tuple[int, int]],
               hlo: HloIndex | None = None) -> list[dict]:
  """The events of those lines, each named by the HLO instruction that ran it (`hlo_op`), else
  by its own name (a kernel XLA did not annotate, a copy, a memset). Given the executable's
  `hlo`, a kernel whose `hlo_op` is not one of its instructions (a command buffer's name) but
  whose own name is an instruction's kernel is named by that instruction."""
  out = []
  for e in events:
    if (e['pid'], e.get('tid')) not in lines:
      continue
    name = (e.get('args') or {}).get('hlo_op') or e['name']
    if hlo is not None and name not in hlo.info and hlo.resolve(e['name']) in hlo.info:
      name = hlo.resolve(e['name'])
    out.append({**e, 'name': name})
  return out


def read_jax_trace(trace_dir: str, n_steps: int, hlo: HloIndex | None = None) -> list[dict]:
  """Per profiled step (the `step_profile:i` annotations): wall ms, the ms of each HLO op
  (`share_wall`) and of UNTRACED, and the busy ms (wall less idle). On an accelerator the ops
  are its own (`device_op_lines`, named as `device_ops` names them) and busy is the time any
  of them ran."""
  [path] = glob.glob(os.path.join(trace_dir, 'plugins', 'profile', '*', 'perfetto_trace.json.gz'))
  with gzip.open(path) as f:
    trace_events = json.load(f)['traceEvents']
  events = [e for e in trace_events if e.get('ph') == 'X']
  device = device_op_lines(trace_events)
  marks = sorted((e for e in events if re.fullmatch(r'step_profile:\d+', e['name'])),
                 key=lambda e: e['ts'])[:n_steps]
  steps = []
  for mark in marks:
    start, end = mark['ts'], mark['ts'] + mark['dur']
    inside = [e for e in events if start <= e['ts'] < end]
    if device:
      ops = device_ops(inside, device, hlo)
      segments = [s for line in device for s in innermost_segments(
          [e for e in ops if (e['pid'], e['tid']) == line])]
      per_op, busy = share_wall(segments)
      steps.append({'wall_ms': mark['dur'] / 1e3, 'busy_ms': busy, 'ops': per_op,
                    'thread_ms': sum(e - s for s, e, _ in segments) / 1e3})
      continue
    ops = [e for e in inside if 'hlo_op' in (e.get('args') or {})]
    by_thread, pool = collections.defaultdict(list), collections.defaultdict(list)
    for e in ops:
      by_thread[e['tid']].append(e)
    for e in inside:
      if e['name'].startswith('ThreadpoolListener::'):
        pool[e['tid']].append(e)
    segments = [s for evs in by_thread.values() for s in innermost_segments(evs)]
    regions = [r for evs in pool.values() for r in pool_regions(evs)]
    spans = async_spans(ops, [e for e in inside if e['name'].startswith('end: ')])
    per_op, busy = share_wall(segments, spans, regions)
    steps.append({'wall_ms': mark['dur'] / 1e3, 'busy_ms': busy, 'ops': per_op,
                  'thread_ms': sum(e - s for s, e, _ in segments) / 1e3})
  return steps


def categorize_steps(steps: list[dict], hlo: HloIndex, batch: int) -> list[dict]:
  """`read_jax_trace`'s steps with their op ms summed by category (`our_category`), phase and,
  for the backward, category again; an op the executable's HLO does not name (a GPU memcpy,
  a kernel of another module) counts under NOT_IN_HLO."""
  out = []
  for s in steps:
    categories, phases, backward = (collections.Counter() for _ in range(3))
    for name, ms in s['ops'].items():
      instruction = hlo.resolve(name)
      known = instruction in hlo.info or name == UNTRACED
      category = our_category(instruction, hlo, batch) if known else NOT_IN_HLO
      phase = phase_of(hlo.info[instruction]['op_name']) if instruction in hlo.info else 'other'
      categories[category] += ms
      phases[phase] += ms
      if phase == 'backward':
        backward[category] += ms
    out.append({**s, 'categories': categories, 'phases': phases, 'backward': backward})
  return out


NOT_IN_HLO = "not in the step's HLO (copies, memsets)"
