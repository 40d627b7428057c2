"""What a compiled step is made of, read from its optimized HLO text: the kernels it launches
(fusions by kind, the custom calls), how its matrix products are computed, its attention
kernels and its dropout PRNG. `--compile_for` reports it beside the memory (report.json's
`structure`): for a GPU compiled without a device it ranks structure, not time (nothing is
autotuned, docs/scaling.md).

The top-level computations (the entry, loop bodies and conditions, called computations) are
what runs as kernels; a fusion's own computation runs inside its one kernel, so its ops count
as products or PRNG work but not as kernels. PRNG work is counted in ops and in the elements
they produce (a mask-sized op against a key's few words).
"""

from __future__ import annotations

import collections
import re

HEADER = re.compile(r'^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->.*\{\s*$')
CALLS = re.compile(r'calls=%?([\w.\-]+)')
OPCODE = re.compile(r' ([a-z][a-z0-9\-]*)\(')  # the first after ' = ': a shape has none
FUSION_KIND = re.compile(r'kind=k(\w+)')
TARGET = re.compile(r'custom_call_target="([^"]+)"')
BACKEND_KIND = re.compile(r'"fusion_backend_config":\{"kind":"([^"]+)"')  # GPU custom fusions
CUBLAS = ('__cublas$gemm', '__cublas$lt$matmul')
COLLECTIVES = ('all-reduce', 'all-gather', 'reduce-scatter', 'all-to-all', 'collective-permute')
# Dropout's masks (jax.random.bernoulli): threefry's hash inlined as plain integer ops, or
# XLA's RngBitGenerator (train.rng_impl), which a GPU compiler expands to Philox's ops; each
# op is told by the call its op_name metadata names.
PRNG_SOURCES = {'dropout_mask': 'jit(_bernoulli)', 'rng_bit_generator': 'rng_bit_generator'}
SHAPE = re.compile(r'^[a-z]\w*\[([\d,]*)\]')


def elements(line: str) -> int:
  """The elements of an instruction's (array) result: 'u32[64,128]{1,0} xor(...)' -> 8192."""
  found = SHAPE.match(line.partition(' = ')[2])
  if not found:
    return 0
  dims = [int(d) for d in found.group(1).split(',') if d]
  total = 1
  for d in dims:
    total *= d
  return total


def computations(text: str) -> dict[str, list[str]]:
  """Computation name -> its instruction lines."""
  found, name = {}, None
  for line in text.splitlines():
    header = HEADER.match(line.strip()) if not line.startswith(' ') else None
    if header:
      name = header.group(1)
      found[name] = []
    elif name is not None and line.strip() and line.strip() != '}':
      found[name].append(line.strip())
  return found


def opcode(line: str) -> str:
  """'%convolution.2 = f32[8,2]{1,0:T(8,128)} convolution(%a, %b), ...' -> 'convolution'."""
  _, equals, rest = line.partition(' = ')
  found = OPCODE.search(' ' + rest) if equals else None
  return found.group(1) if found else ''


def structure(text: str) -> dict:
  """Counts of the step's kernels and of the work inside them (see the module docstring):
  `custom_calls` holds the custom-call targets and the Triton fusions' kinds (GPU)."""
  parts = computations(text)
  fused = {callee for lines in parts.values() for line in lines if opcode(line) == 'fusion'
           for callee in CALLS.findall(line)}
  kernels, calls, products = collections.Counter(), collections.Counter(), collections.Counter()
  prng = collections.Counter()
  for name, lines in parts.items():
    top = name not in fused
    for line in lines:
      op = opcode(line)
      if top and op == 'fusion':
        kind = FUSION_KIND.search(line)
        kernels[f'fusion:{kind.group(1).lower() if kind else "?"}'] += 1
        backend = BACKEND_KIND.search(line)
        if backend:  # a GPU fusion emitted by Triton: a GEMM, or a normalisation, softmax ...
          calls[backend.group(1)] += 1
          if 'gemm' in backend.group(1):
            products['triton_gemm'] += 1
      elif top and op == 'custom-call':
        target = TARGET.search(line)
        target = target.group(1) if target else '?'
        calls[target] += 1
        if target in CUBLAS:
          products['cublas'] += 1
      elif top and op.removesuffix('-start') in COLLECTIVES + ('while',):
        kernels[op.removesuffix('-start')] += 1  # an asynchronous one counted at its start
      if op in ('dot', 'convolution'):
        products[op] += 1
      for source, tag in PRNG_SOURCES.items():
        if tag in line:
          prng[f'{source}_ops'] += 1
          prng[f'{source}_elements'] += elements(line)
  attention = {target: n for target, n in calls.items()
               if 'fmha' in target.lower() or 'attention' in target.lower()
               or target == 'tpu_custom_call'}
  return {'kernels': dict(sorted(kernels.items())),
          'fusions': sum(n for k, n in kernels.items() if k.startswith('fusion:')),
          'custom_calls': dict(sorted(calls.items())), 'products': dict(sorted(products.items())),
          'attention_kernels': attention, 'prng': dict(sorted(prng.items()))}
