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
