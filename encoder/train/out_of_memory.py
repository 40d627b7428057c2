"""One way to say that a run's step does not fit its devices' memory, whether a compiler says
so for a target before any hardware is rented (`--compile_for`, encoder/train/compile_report.py)
or an allocation fails while a run trains (encoder/train/trainer.py): what ran out, by how much,
and the settings that change it, in one line.
"""

from __future__ import annotations

import contextlib
import os
import re

import jax

from encoder.errors import OutOfMemoryError
from encoder.train.xla_sizes import SIZE, parse_size

GIB = 2 ** 30


def gib(nbytes: float) -> str:
  return f'{nbytes / GIB:.2f} GiB'


def is_out_of_memory(error: BaseException) -> bool:
  """Whether a JAX runtime or compiler error is an allocation that did not fit."""
  return 'RESOURCE_EXHAUSTED' in str(error)


def requested_bytes(message: str) -> int | None:
  """The bytes an allocation failure names ('Out of memory allocating 32927830016 bytes',
  'Attempting to allocate 1.50G'), None if it names none."""
  found = re.search(r'(\d+) bytes', message)
  if found:
    return int(found.group(1))
  found = re.search(r'allocate ' + SIZE, message)
  return parse_size(*found.groups()) if found else None


def knobs(config, forms: dict[str, str] | None = None, *, devices: int = 1) -> str:
  """The settings that change what a step needs, with this run's values: the batch, the
  length, recomputing activations, microbatches, the state split over devices (a mesh's
  fsdp axis, where there are devices to split over) and the attention form."""
  t, m, p = config.train, config.model, config.parallel
  items = [f'lower train.batch_size ({t.batch_size}) or data.max_seq_length '
           f'({config.data.max_seq_length})']
  if not m.remat:
    items.append('set model.remat=true')
  items.append(f'raise train.grad_accum_steps ({t.grad_accum_steps})')
  if devices > 1:
    if p.strategy == 'mesh':
      items.append(f"raise parallel.mesh_shape.fsdp ({p.mesh_shape['fsdp']})")
    else:
      items.append('split the state with parallel.strategy=mesh and parallel.mesh_shape.fsdp')
  if forms:
    ran = ', '.join(f'{kind} layers {form}' for kind, form in forms.items())
    items.append(f'or take another attention form (model.attention_impl={m.attention_impl}: '
                 f'{ran})')
  return '; to fit: ' + ', '.join(items)


def compile_message(target: str, step: str, needed: int, available: int, parts: dict,
                    config, forms: dict[str, str] | None, devices: int) -> str:
  """A target's compiler said no (or its figures exceed the device): `needed` bytes a device
  against `available`, `parts` the breakdown ({name: bytes})."""
  shown = ', '.join(f'{name} {nbytes / GIB:.2f}' for name, nbytes in parts.items())
  return (f'{target}: the {step} step needs {gib(needed)} a device, {gib(needed - available)} '
          f'more than the {gib(available)} it has ({shown} GiB)'
          + knobs(config, forms, devices=devices))


@contextlib.contextmanager
def said_in_one_line(config, forms: dict[str, str] | None = None):
  """A run's allocation failure (JAX's RESOURCE_EXHAUSTED) inside the block becomes an
  OutOfMemoryError with `run_message`'s line: the CLI prints it without a traceback, exit 2.
  The loop's own handler has let a save in flight commit by then, and saves nothing more."""
  try:
    yield
  except jax.errors.JaxRuntimeError as e:
    if not is_out_of_memory(e):
      raise
    raise OutOfMemoryError(run_message(e, jax.default_backend(), config, forms,
                                       jax.device_count(), device_memory())) from None


def device_memory() -> int | None:
  """The bytes one device may allocate: the runtime's limit (GPU, TPU), a CPU's physical
  memory; None where neither is known."""
  try:
    stats = jax.local_devices()[0].memory_stats() or {}
  except Exception:  # noqa: BLE001  (a backend without memory statistics)
    stats = {}
  if stats.get('bytes_limit'):
    return int(stats['bytes_limit'])
  if jax.default_backend() == 'cpu' and hasattr(os, 'sysconf'):
    return os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
  return None


def run_message(error: BaseException, platform: str, config, forms: dict[str, str] | None,
                devices: int, capacity: int | None = None) -> str:
  """An allocation failed while the run trained (RESOURCE_EXHAUSTED from the runtime)."""
  asked = requested_bytes(str(error))
  what = f'allocating {gib(asked)} failed' if asked else 'an allocation failed'
  has = f' (a device has {gib(capacity)})' if capacity else ''
  return (f'out of memory on {platform} while the run stepped: {what}{has}; nothing was saved '
          'after the last checkpoint' + knobs(config, forms, devices=devices))
