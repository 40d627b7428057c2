"""`--compile_for TARGET [--fit]`: the run `launch.py` would train, compiled on this host for a
TPU slice or GPUs it does not have, to learn before renting them whether the run fits.

The run is the trainer's (`run_setup.setup_for_target`: the resolved config, its strategy and
mesh, remat, dtype, accumulation, the attention form `auto` takes on the target), built from
shapes alone; its train and eval steps are lowered and compiled by the target's own compiler
(libtpu for a TPU, the CUDA plugin for a GPU; encoder/train/targets.py). What a device needs
is what that compiler reports: its arguments, outputs, temporaries and generated code
(`memory_analysis`); the parameters, optimizer state and batch are the compiler's sizes for
those arguments alone. A TPU compiler refuses a step that exceeds its HBM; that refusal, or
figures above the device's memory, is the one-line error (exit 2) that says by how much and
what to change (encoder/train/out_of_memory.py), and nothing is written. Otherwise
WORKDIR/compile/TARGET/ gets report.json and the optimized HLO of both steps.

`--fit` searches the largest global batch that fits with a few compiles: what a step needs is
close to affine in the batch (the state is fixed, activations grow with the rows), so two
compiles (a refusal names its bytes too) predict the boundary and one or two more confirm it.
Model FLOPs are arithmetic (encoder/modules/flops.py), not the compiler's count.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time

import jax

from encoder import storage
from encoder.config_schema import PRETRAINING_TASKS
from encoder.errors import OutOfMemoryError
from encoder.modules.flops import electra_flops, model_flops
from encoder.tasks.pretraining import max_predictions
from encoder.train import hlo_structure, out_of_memory, run_setup, targets
from encoder.train.run_setup import RunSetup, setup_for_target
from encoder.train.sharding import bytes_per_device
from encoder.train.xla_sizes import SIZE, parse_size

log = logging.getLogger('encoder')
FIT_COMPILES = 6  # at most, after the first two


@dataclasses.dataclass
class StepMemory:
  """A compiled step's bytes on one device, as its compiler reports them."""
  arguments: int
  outputs: int
  aliased: int  # outputs that reuse a donated argument's buffer
  temporaries: int
  code: int

  @property
  def total(self) -> int:
    return self.arguments + self.outputs - self.aliased + self.temporaries + self.code

  @classmethod
  def of(cls, compiled) -> StepMemory:
    m = compiled.memory_analysis()
    return cls(m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes,
               m.temp_size_in_bytes, m.generated_code_size_in_bytes)


@dataclasses.dataclass
class Attempt:
  """One compile of the train step at a global batch: its memory, or the compiler's refusal
  (`refused`: the bytes it said it needed where it names them)."""
  batch: int
  seconds: float
  memory: StepMemory | None = None
  compiled: object = None
  refused: str = ''
  needed: int | None = None

  @property
  def need(self) -> int | None:
    return self.memory.total if self.memory is not None else self.needed


def compile_train_step(run: RunSetup, target: targets.Target) -> Attempt:
  """The train step of `run` compiled for `target`, or the compiler's out-of-memory refusal."""
  progress = jax.ShapeDtypeStruct((), 'float32', sharding=run.state.step.sharding)
  args = (run.state, run.batch) + ((progress,) if _budgeted(run) else ())
  start = time.perf_counter()
  try:
    compiled = run.train_step.lower(*args).compile()
  except Exception as e:  # noqa: BLE001  (JaxRuntimeError: the compiler's answer)
    if not out_of_memory.is_out_of_memory(e):
      raise
    return Attempt(run.config.train.batch_size, time.perf_counter() - start, refused=str(e),
                   needed=_refused_bytes(str(e), run))
  seconds = time.perf_counter() - start
  return Attempt(run.config.train.batch_size, seconds, StepMemory.of(compiled), compiled)


def _budgeted(run: RunSetup) -> bool:
  return float(run.config.train.get('max_minutes', 0.0) or 0.0) > 0


def _refused_bytes(message: str, run: RunSetup) -> int | None:
  """What a refused step needs a device, from the compiler's message: its temporaries (the
  figure TPU's message names) plus the arguments, which are the state and the batch."""
  found = re.search(r'required for HLO temporaries \(' + SIZE + r'\)', message)
  if not found:
    return None
  return parse_size(*found.groups()) + _argument_bytes(run)


def _argument_bytes(run: RunSetup) -> int:
  """The state's and the batch's bytes on one device, from their shapes and layout."""
  return bytes_per_device(run.state) + bytes_per_device(run.batch)


def fits(attempt: Attempt, target: targets.Target) -> bool:
  return attempt.memory is not None and attempt.memory.total <= target.hbm_bytes


def argument_bytes(tree) -> int:
  """What the compiler lays out on one device for `tree` (abstract arrays with their
  shardings) as a program's arguments: its shapes rounded up to the target's tiles."""
  compiled = jax.jit(lambda *_: 0, keep_unused=True).lower(*tree).compile()
  return compiled.memory_analysis().argument_size_in_bytes


def per_chip(run: RunSetup, memory: StepMemory) -> dict[str, int]:
  """One device's bytes: the parameters, optimizer state and batch as the compiler lays them
  out, the step's temporaries and code, and its total (the compiler's)."""
  return {'params': argument_bytes([run.state.params]),
          'optimizer': argument_bytes([run.state.opt_state]),
          'batch': argument_bytes([run.batch]),
          'temporaries': memory.temporaries, 'code': memory.code, 'total': memory.total}


def refusal(attempt: Attempt, run: RunSetup, target: targets.Target) -> OutOfMemoryError:
  """The one-line error for a train step that does not fit."""
  forms = attention_forms(run)
  devices = len(target.devices)
  if attempt.memory is not None:
    m = attempt.memory
    parts = {'arguments': m.arguments, 'temporaries': m.temporaries, 'code': m.code}
    needed = m.total
  else:
    needed = attempt.needed or 0
    parts = {'arguments': _argument_bytes(run), 'temporaries': needed - _argument_bytes(run)}
  if not needed:  # the compiler named no figure: its own first line
    return OutOfMemoryError(f'{target.name}: {attempt.refused.strip().splitlines()[0]}'
                            + out_of_memory.knobs(run.config, forms, devices=devices))
  return OutOfMemoryError(out_of_memory.compile_message(
      target.name, 'train', needed, target.hbm_bytes, parts, run.config, forms, devices))


def attention_forms(run: RunSetup, training: bool = True) -> dict[str, str]:
  return run_setup.attention_forms(run.config, run.model, training)


def step_flops(run: RunSetup) -> float:
  """Model FLOPs of the run's train step (arithmetic from the shapes; modules/flops.py)."""
  c = run.config
  preds = max_predictions(c) if c.task in PRETRAINING_TASKS else 0
  shape = (c.train.batch_size, c.data.max_seq_length, preds)
  if c.task == 'electra':
    return electra_flops(run.model.config, run.model.generator_config, *shape)
  return model_flops(run.model.config, *shape)


def with_batch(config, batch: int):
  config = config.copy_and_resolve_references()
  config.train.batch_size = batch
  return config


def search_largest_batch(compile_at, unit: int, capacity: int
                         ) -> tuple[Attempt | None, list[Attempt]]:
  """The largest global batch (a multiple of `unit`: batch shards x accumulation steps) whose
  train step fits `capacity` bytes a device, from a few compiles (`compile_at(batch)` gives an
  Attempt): one and two units give the affine line of need against batch, a compile at its
  prediction and one a unit past it confirm the boundary (the line is redrawn through the
  attempts nearest it). Returns the largest attempt that fit (None if none did) and every
  attempt made, by batch."""
  attempts = {unit: compile_at(unit)}

  def fitting(a: Attempt) -> bool:
    return a.memory is not None and a.memory.total <= capacity

  if fitting(attempts[unit]):
    attempts[2 * unit] = compile_at(2 * unit)
  for _ in range(FIT_COMPILES):
    guess = next_batch([(b, a.need, fitting(a)) for b, a in attempts.items()], capacity, unit)
    if guess is None or guess in attempts:
      break
    attempts[guess] = compile_at(guess)
  low = max((b for b, a in attempts.items() if fitting(a)), default=0)
  return (attempts[low] if low else None), [attempts[b] for b in sorted(attempts)]


def next_batch(points: list[tuple[int, int | None, bool]], capacity: int, unit: int,
               per_row: float | None = None) -> int | None:
  """The next batch to compile in a search for the largest that fits `capacity`, from the
  (batch, need or None, fits) of the compiles made; None once a refused batch lies one unit
  above a fitting one. Two lines guess it, and the one reaching further short of the smallest
  refused batch is taken: the line between the fitting and the refused compile nearest the
  boundary (`_predict`), and the line through the two largest fitting batches. Near its
  capacity the TPU compiler rematerializes on its own and bends the fits' need below the
  first line, which then crawls a row a compile (BERT-large at 512 tokens on v5e: 21 to 24
  rows rose 0.09-0.17 GiB a row, the line to 112 rows' refused 66.5 GiB 0.57); where it holds
  their need flat, the second meets the capacity past the refused batch (16-20 rows at
  14.5-15.0 GiB: past 100 rows) and is not taken. Lacking a line, the answer nearest the
  capacity extended at `per_row` bytes a row where that lands inside the bracket, else its
  batch scaled by capacity over its need (BERT-large with remat on v6e, read from v5e's line
  at 0.10 GiB a row, was refused at 264 rows needing 87.9 GiB: the slope's answer, below one
  row, gives way to 93); with no answer naming its need, the batch doubled. The bracket
  (largest fitting, smallest refused) is halved instead where the guess reaches the smallest
  refused batch (a refusal that names no bytes leaves only the fitting compiles' line), and
  where the fits' line reaches past it (or falls: BERT-large with remat on v6e needed 30.87
  GiB at 83 rows, 30.86 at 84) while the line to it gives one unit more, in a bracket wider
  than two: the need jumps between them (the compiler stops rematerializing;
  ModernBERT-large at 512 tokens needed 14.93 GiB at 28 rows and 21.18 at 36), and a walk a
  unit at a time finds the jump slowly. A guess at or below the largest fitting batch probes
  one unit above it."""
  low = max((b for b, _, ok in points if ok), default=0)
  high = min((b for b, _, ok in points if not ok), default=None)
  if high is not None and high - low <= unit:
    return None
  middle = None if high is None else (low + high) // 2 // unit * unit
  known = [(b, n) for b, n, _ in points if n]
  guess = _predict(known, capacity, unit)
  fitting = sorted((b, n) for b, n, ok in points if ok and n)
  if guess is not None and high is not None and len(fitting) >= 2:
    local = _meets(*fitting[-2:], capacity, unit)  # the slope where the need stands now
    if local is not None and guess < local < high:
      guess = local
    elif (local is None or local >= high) and guess <= low + unit < high - 2 * unit:
      guess = middle  # the need jumps inside the bracket
  if guess is None and known:
    b0, n0 = min(known, key=lambda point: abs(point[1] - capacity))
    guess = int((b0 + (capacity - n0) / per_row) // unit * unit) if per_row else 0
    if not low < guess < (high or guess + 1):  # that slope misses the bracket: the answer's
      guess = int(b0 * capacity / n0 // unit * unit)  # need scaled (its fixed part: short of it)
  if guess is None:
    guess = 2 * low
  if high is not None and guess >= high:
    guess = middle
  guess = max(guess, low + unit)
  return guess if high is None else min(guess, high - unit)


def _batch_unit(run: RunSetup) -> int:
  """The step between global batches the run can take: batch shards x accumulation steps."""
  t = run.config.train
  shards = t.batch_size // run.strategy.per_device_batch_size(t.batch_size, 1)
  return shards * t.grad_accum_steps


def _predict(points: list[tuple[int, int]], capacity: int, unit: int) -> int | None:
  """Where the line through the two (batch, need) points nearest the boundary reaches
  `capacity`, rounded down to `unit`; where that pair's need falls with the batch (near its
  capacity the TPU compiler rematerializes on its own), `rising_line`'s; None with no rising
  pair."""
  known = sorted(points)
  below = [k for k in known if k[1] <= capacity]
  above = [k for k in known if k[1] > capacity]
  if below and above:  # the boundary lies between these two
    pair = [below[-1], above[0]]
  else:  # extrapolated from the two nearest it
    pair = below[-2:] if below else above[:2]
  if len(pair) < 2 or pair[0][0] == pair[1][0]:
    return None
  guess = _meets(*pair, capacity, unit)
  if guess is not None:
    return guess
  line = rising_line(known, capacity)
  return None if line is None else int((capacity - line[0]) / line[1] // unit * unit)


def _meets(point1: tuple[int, int], point2: tuple[int, int], capacity: int, unit: int
           ) -> int | None:
  """The batch (rounded down to `unit`) where the line through two (batch, need) points
  reaches `capacity`; None where the need does not rise between them."""
  (b1, n1), (b2, n2) = point1, point2
  slope = (n2 - n1) / (b2 - b1)
  return int((b1 + (capacity - n1) / slope) // unit * unit) if slope > 0 else None


def rising_line(points: list[tuple[int, int]], capacity: int) -> tuple[float, float] | None:
  """(fixed, per_row) of need against batch through the pair of (batch, need) points nearest
  `capacity` whose need rises with the batch (need is not monotonic near capacity, where the
  compiler trades memory for recomputation); None without such a pair."""
  nearest = sorted(points, key=lambda point: abs(point[1] - capacity))
  for i, (b1, n1) in enumerate(nearest):
    for b2, n2 in nearest[i + 1:]:
      if (n2 - n1) * (b2 - b1) > 0:
        per_row = (n2 - n1) / (b2 - b1)
        return n1 - per_row * b1, per_row
  return None


def compile_eval_step(run: RunSetup):
  start = time.perf_counter()
  compiled = run.eval_step.lower(run.state.params, run.batch).compile()
  return compiled, time.perf_counter() - start


def compile_for(config, workdir: str, name: str, fit: bool = False) -> dict:
  """Compiles `config`'s run for target `name` (a `resolve_config` result), prints the per-
  device table and writes WORKDIR/compile/NAME/ (report.json, the steps' optimized HLO);
  OutOfMemoryError (nothing written) when its train or eval step does not fit. With `fit`,
  the largest global batch that fits is searched first, and reported."""
  target = targets.target(name)
  log.info('compiling for %s: %d x %s, %s a device', name, len(target.devices), target.kind,
           out_of_memory.gib(target.hbm_bytes))
  runs = {}

  def compile_at(batch: int) -> Attempt:
    runs[batch] = setup_for_target(with_batch(config, batch), target)
    made = compile_train_step(runs[batch], target)
    log.info('train step at global batch %d: %s: %s (%.0f s)', batch,
             f'{out_of_memory.gib(made.need)} a device' if made.need else 'refused',
             'fits' if fits(made, target) else 'does not fit', made.seconds)
    return made
  if fit:
    unit = _batch_unit(setup_for_target(config, target))
    attempt, attempts = search_largest_batch(compile_at, unit, target.hbm_bytes)
    if attempt is None:
      raise refusal(attempts[0], runs[attempts[0].batch], target)
  else:
    attempt = compile_at(config.train.batch_size)
    attempts = [attempt]
    if not fits(attempt, target):
      raise refusal(attempt, runs[attempt.batch], target)
  run = runs[attempt.batch]
  try:
    evaluated, eval_s = compile_eval_step(run)
  except Exception as e:  # noqa: BLE001  (JaxRuntimeError: the compiler's answer)
    if not out_of_memory.is_out_of_memory(e):
      raise
    raise OutOfMemoryError(f'{target.name}: the eval step does not fit: '
                           f'{str(e).strip().splitlines()[0]}'
                           + out_of_memory.knobs(run.config, attention_forms(run, False),
                                                 devices=len(target.devices))) from None
  report = _report(run, target, attempt, StepMemory.of(evaluated), eval_s, attempts, fit)
  if report['eval_per_chip_bytes']['total'] > target.hbm_bytes:
    raise OutOfMemoryError(out_of_memory.compile_message(
        target.name, 'eval', report['eval_per_chip_bytes']['total'], target.hbm_bytes,
        report['eval_per_chip_bytes'], run.config, attention_forms(run, False),
        len(target.devices)))
  folder = os.path.join(workdir, 'compile', name)
  storage.makedirs(folder)
  storage.write_atomic(os.path.join(folder, 'train_step.hlo.txt'), attempt.compiled.as_text())
  storage.write_atomic(os.path.join(folder, 'eval_step.hlo.txt'), evaluated.as_text())
  storage.write_atomic(os.path.join(folder, 'report.json'), json.dumps(report, indent=2) + '\n')
  print(table(report, folder))
  return report


def _report(run: RunSetup, target: targets.Target, attempt: Attempt, eval_memory: StepMemory,
            eval_s: float, attempts: list[Attempt], fit: bool) -> dict:
  c = run.config
  chip = per_chip(run, attempt.memory)
  resident = chip['params'] + chip['optimizer']  # the state stays beside the eval step
  eval_total = eval_memory.total + chip['optimizer']
  cost = attempt.compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, list) else cost
  report = {
      'topology': target.name, 'platform': target.platform, 'device_kind': target.kind,
      'devices': len(target.devices), 'experiment': c.get('experiment', ''),
      'strategy': run.strategy.name, 'mesh_shape': run.strategy.mesh_shape,
      'global_batch': c.train.batch_size,
      'per_device_batch': run.strategy.per_device_batch_size(c.train.batch_size, 1),
      'grad_accum_steps': c.train.grad_accum_steps, 'seq_length': c.data.max_seq_length,
      'dtype': c.model.dtype, 'remat': bool(c.model.remat),
      'fits': attempt.memory.total <= target.hbm_bytes and eval_total <= target.hbm_bytes,
      'hbm_bytes': target.hbm_bytes, 'per_chip_bytes': chip,
      'eval_per_chip_bytes': {'temporaries': eval_memory.temporaries, 'code': eval_memory.code,
                              'resident_state': resident, 'total': eval_total},
      'compiler_memory': {'train': dataclasses.asdict(attempt.memory),
                          'eval': dataclasses.asdict(eval_memory)},
      'model_flops_per_step': step_flops(run),
      'compiler_flops_per_device': float(cost.get('flops', 0.0)) if cost else None,
      'compile_s': round(attempt.seconds + eval_s, 1),
      'compile_s_steps': {'train': round(attempt.seconds, 1), 'eval': round(eval_s, 1)},
      'attention': attention_forms(run), 'attention_eval': attention_forms(run, False),
      'structure': hlo_structure.structure(attempt.compiled.as_text()),
  }
  if fit:
    report['largest_batch'] = c.train.batch_size
    report['fit_attempts'] = [{'global_batch': a.batch, 'need_bytes': a.need,
                               'fits': fits(a, target), 'compile_s': round(a.seconds, 1)}
                              for a in attempts]
  return report


def table(report: dict, folder: str) -> str:
  """The per-device table `--compile_for` prints."""
  chip, hbm = report['per_chip_bytes'], report['hbm_bytes']

  def row(name: str, nbytes: int) -> str:
    return f'  {name:<18}{nbytes / 2 ** 30:>9.2f} GiB'
  mesh = f" {report['mesh_shape']}" if report['mesh_shape'] else ''
  lines = [f"{report['experiment'] or 'run'} on {report['topology']}: {report['devices']} x "
           f"{report['device_kind']}, {hbm / 2 ** 30:.2f} GiB each; {report['strategy']}{mesh}, "
           f"global batch {report['global_batch']} ({report['per_device_batch']} a device), "
           f"{report['seq_length']} tokens, {report['dtype']}, remat {report['remat']}",
           'per device (train step)',
           row('parameters', chip['params']), row('optimizer state', chip['optimizer']),
           row('batch', chip['batch']), row('temporaries', chip['temporaries']),
           row('generated code', chip['code']),
           row('total', chip['total']) + f"  of {hbm / 2 ** 30:.2f} "
           f"({chip['total'] / hbm:.0%}): {'fits' if report['fits'] else 'does not fit'}",
           row('eval step total', report['eval_per_chip_bytes']['total'])
           + '  (with the optimizer state beside it)',
           f"model FLOPs a step {report['model_flops_per_step']:.3g} (arithmetic: 6ND + "
           'attention + MLM head)',
           'attention          ' + ', '.join(f'{k} layers {v}'
                                             for k, v in report['attention'].items()),
           f"compile            train {report['compile_s_steps']['train']:.0f} s, eval "
           f"{report['compile_s_steps']['eval']:.0f} s"]
  shape = report['structure']
  kernels = ', '.join(f'{n} {k}' for k, n in shape['kernels'].items())
  lines.append(f'train step kernels {kernels}; products '
               + (', '.join(f'{n} {k}' for k, n in shape['products'].items()) or 'none')
               + '; attention kernels '
               + (', '.join(f'{n} {k}' for k, n in shape['attention_kernels'].items()) or 'none'))
  if 'largest_batch' in report:
    tried = ', '.join(f"{a['global_batch']}{'' if a['fits'] else ' (no)'}"
                      for a in report['fit_attempts'])
    lines.append(f"largest global batch that fits: {report['largest_batch']} (compiled: {tried})")
  lines.append(f'written            {folder}/report.json, train_step.hlo.txt, eval_step.hlo.txt')
  return '\n'.join(lines)
