"""The command-line arguments and header line the throughput benchmarks share."""

from __future__ import annotations

import argparse
import os


def shape_parser(doc: str, sizes: str, rounds: int, rounds_help: str | None = None):
  """A parser with the model and batch shape every throughput benchmark takes."""
  parser = argparse.ArgumentParser(description=doc.split('\n')[0])
  parser.add_argument('--sizes', default=sizes)
  parser.add_argument('--seq', type=int, default=128)
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--dtype', default='float32', choices=('float32', 'bfloat16'))
  parser.add_argument('--vocab', type=int, default=30522)
  parser.add_argument('--rounds', type=int, default=rounds, help=rounds_help)
  return parser


def print_machine(devices: bool = True) -> None:
  """One `#` line: the devices (imports JAX, so not for a process that must not start it) and
  the load, without which a throughput number means little on a shared machine."""
  where = ''
  if devices:
    import jax
    where = f'devices: {jax.local_device_count()} x {jax.devices()[0].device_kind}; '
  print(f'# {where}load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs', flush=True)


def print_table(results: list[dict], columns: list[tuple[str, str, str]]) -> None:
  """A closing table of the JSON lines: (header, key, format spec) per column, right-aligned
  to the header's width; a key a row lacks (no Hugging Face run) shows as nan."""
  widths = [max(len(header), len(format(0.0, spec))) for header, _, spec in columns]
  print('\n' + ' '.join(f'{h:>{w}}' for (h, _, _), w in zip(columns, widths, strict=True)))
  for row in results:
    print(' '.join(f'{format(row.get(key, float("nan")), spec):>{w}}'
                   for (_, key, spec), w in zip(columns, widths, strict=True)))
