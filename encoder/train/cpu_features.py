"""Whether this CPU computes bfloat16 products natively, from Linux's /proc/cpuinfo: for the run
log's one-line hint that a float32 run on such a CPU may be faster in bfloat16: measured on AMD
Zen 4 (avx512_bf16), BERT-base's train step 1.27-1.47x, BERT-Tiny's and BERT-Mini's none
(docs/performance.md#bfloat16-on-cpu), so the hint names the width where it pays.

XLA:CPU runs a bfloat16 product accumulated in float32 (`encoder.modules.matmul`) on AMX's
tiles (`amx_bf16`: Intel Sapphire Rapids and later) or with AVX-512 BF16's dot instructions
(`avx512_bf16`: Cooper Lake, AMD Zen 4 and later); a CPU without either has no bfloat16
product instructions, so no hint there. `amx_tile` alone names the tile registers, not the
bfloat16 products, which an AMX CPU that has them reports as `amx_bf16`.

Only x86 flags are read; another OS (no /proc/cpuinfo) or another architecture gives no flags,
so no hint. Jax-free.
"""

from __future__ import annotations

CPUINFO = '/proc/cpuinfo'
BF16_FLAGS = ('amx_bf16', 'avx512_bf16')  # the faster first
DOCS = 'docs/performance.md#bfloat16-on-cpu'


def read_cpuinfo() -> str:
  """The text of /proc/cpuinfo, or '' where there is none (not Linux) or it is unreadable."""
  try:
    with open(CPUINFO, encoding='utf-8', errors='replace') as f:
      return f.read()
  except OSError:
    return ''


def bf16_flags(cpuinfo: str | None = None) -> list[str]:
  """The flags of BF16_FLAGS the CPU reports, in that order, from `cpuinfo` (a /proc/cpuinfo
  text; None reads this machine's). The first processor's `flags` line speaks for all: a
  many-core machine lists the same line once per core."""
  text = read_cpuinfo() if cpuinfo is None else cpuinfo
  for line in text.splitlines():
    key, sep, value = line.partition(':')
    if sep and key.strip() == 'flags':
      flags = set(value.split())
      return [flag for flag in BF16_FLAGS if flag in flags]
  return []


def bfloat16_hint(dtype: str, platform: str, cpuinfo: str | None = None) -> str | None:
  """The run log's line for a float32 run (`dtype`, model.dtype) on a CPU (`platform`, JAX's
  backend) that computes bfloat16 products natively; None for any other run or machine."""
  if dtype != 'float32' or platform != 'cpu':
    return None
  flags = bf16_flags(cpuinfo)
  if not flags:
    return None
  return (f'this CPU computes bfloat16 products natively ({", ".join(flags)}): '
          f'--config.model.dtype=bfloat16 may be faster here for base-sized models ({DOCS})')
