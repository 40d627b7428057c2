"""The plan of the mission's runs on TPU slices, from the TPU compiler on this host (libtpu):
for each model and length, with and without remat, the largest per-chip batch whose train step
fits each topology, and the memory at it.

  python -m benchmarks.tpu_plan --out docs/scaling/tpu_plan_compiles.jsonl --table
                                                     # every cell, resumed from --out
  python -m benchmarks.tpu_plan --cells mlm_nsp_base:512 --topologies v5e:2x2 --table

Compiles are slow here (mlm_nsp_base's step takes minutes, a 22-layer one at 8,192 tokens ten
and more on a shared 2-core host), so the search needs few of them. What a step needs a chip
is close to affine in the per-chip batch B and in the number of layers L (the state, the
gradients and the saved activations are per layer; one layer's working set is not):

  need(B, L) = a + b L + (c + d L) B

Four compiles of the model cut to two small depths (2 and 4 layers for BERT, 3 and 6 for the
modern models, which keeps their one-global-in-three pattern) at two batches give a, b, c, d
from the compiler; the largest B under the chip's HBM at the full depth follows by arithmetic
(`predicted`). Full-depth compiles from that batch then walk to the boundary, at most four
a cell (`compiled`; `--confirm`, on the topologies `--confirm_on` names). The four small
compiles are made on the first topology only (`--small_on reference`): other generations read
its line against their own capacity, an estimate (v6e's compiler needed less). With remat a
row's cost at small depth is within the compiler's variation, so a remat cell's line is
drawn through full-depth compiles instead (the first at twice the batch the run fits
without remat). Every walk starts from all the full-depth answers of its cell the file
holds. The table says which number is which.
The parameters and optimizer state are the compiler's sizes for those arguments alone; model
FLOPs are arithmetic (encoder/modules/flops.py).

Every compile is one JSON line in --out, written as it finishes: a second run resumes, reading
what is there. Under pmap (data parallel) every chip runs the same program on its own rows,
so a topology's answer is a per-chip batch; the global batch is that times the chips.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import jax

from encoder import configs
from encoder.train import compile_report, targets
from encoder.train.resolve import resolve_config
from encoder.train.run_setup import setup_for_target

CELLS = ('mlm_nsp_base:512', 'mlm_modern_base:8192', 'mlm_modern_base:512', 'mlm_nsp_large:512',
         'mlm_modern_large:512', 'mlm_modern_large:8192')
TOPOLOGIES = ('v5e:2x2', 'v6e:2x2', 'v5p:2x2x1', 'v4:2x2x1')
GIB = 2 ** 30


def small_depths(exp: str) -> tuple[int, int]:
  """Two depths that keep the model's pattern of layers: the modern models' every-third global
  layer needs multiples of 3."""
  return (3, 6) if 'modern' in exp else (2, 4)


def small_batches(seq: int) -> tuple[int, int]:
  """Two per-chip batches for the line: far enough apart to read its slope."""
  return (1, 2) if seq > 2048 else (2, 8)


def config_of(exp: str, seq: int, remat: bool, dtype: str, layers: int | None, batch: int):
  config = configs.load_experiment(exp)
  overrides = [f'data.max_seq_length={seq}', f'model.remat={str(remat).lower()}',
               f'model.dtype={dtype}', f'train.batch_size={batch}']
  if layers:
    overrides.append(f'model.num_layers={layers}')
  configs.apply_overrides(config, overrides)
  return resolve_config(config)


class Plan:
  """The compiles made so far (read from `path`, appended as they finish)."""

  def __init__(self, path: str, dtype: str, budget: int):
    self.path, self.dtype, self.budget, self.made = path, dtype, budget, 0
    self.records = {}
    if os.path.exists(path):
      with open(path) as f:
        for line in f:
          record = json.loads(line)
          self.records[self.key(**{k: record[k] for k in (
              'exp', 'seq', 'remat', 'topology', 'layers', 'per_chip_batch')})] = record
    self.targets = {}

  def key(self, exp, seq, remat, topology, layers, per_chip_batch):
    return (exp, seq, bool(remat), self.dtype, topology, layers or 0, per_chip_batch)

  def target(self, name: str) -> targets.Target:
    if name not in self.targets:
      self.targets[name] = targets.target(name)
    return self.targets[name]

  def compile(self, exp, seq, remat, topology, layers, per_chip_batch) -> dict | None:
    """The train step's memory at this point (a cached record, or a new compile); None once
    the budget of new compiles is spent."""
    key = self.key(exp, seq, remat, topology, layers, per_chip_batch)
    if key in self.records:
      return self.records[key]
    if self.made >= self.budget:
      return None
    target = self.target(topology)
    config = config_of(exp, seq, remat, self.dtype, layers,
                       per_chip_batch * len(target.devices))
    run = setup_for_target(config, target)
    load = os.getloadavg()[0]
    attempt = compile_report.compile_train_step(run, target)
    self.made += 1
    record = {'exp': exp, 'seq': seq, 'remat': bool(remat), 'dtype': self.dtype,
              'topology': topology, 'layers': layers or 0, 'per_chip_batch': per_chip_batch,
              'hbm_bytes': target.hbm_bytes, 'need_bytes': attempt.need,
              'fits': compile_report.fits(attempt, target),
              'compile_s': round(attempt.seconds, 1), 'load_average': round(load, 1)}
    if attempt.memory is not None:
      record.update(arguments=attempt.memory.arguments, temporaries=attempt.memory.temporaries,
                    code=attempt.memory.code, outputs=attempt.memory.outputs,
                    aliased=attempt.memory.aliased)
      if not layers:  # the full model: the state's own sizes, once
        record.update(params=compile_report.argument_bytes([run.state.params]),
                      optimizer=compile_report.argument_bytes([run.state.opt_state]))
    self.records[key] = record
    with open(self.path, 'a') as f:
      f.write(json.dumps(record) + '\n')
    print(json.dumps(record), flush=True)
    return record


def bilinear(points: dict[tuple[int, int], int]) -> tuple[float, float, float, float]:
  """a, b, c, d of need = a + b L + (c + d L) B through four points {(B, L): need}."""
  (b1, l1), (b2, l2) = min(points), max(points)
  n11, n21, n12, n22 = (points[(b1, l1)], points[(b2, l1)], points[(b1, l2)],
                        points[(b2, l2)])
  slope1, slope2 = (n21 - n11) / (b2 - b1), (n22 - n12) / (b2 - b1)  # per row, at l1 and l2
  d = (slope2 - slope1) / (l2 - l1)
  c = slope1 - d * l1
  fixed1, fixed2 = n11 - slope1 * b1, n12 - slope2 * b1
  b = (fixed2 - fixed1) / (l2 - l1)
  return fixed1 - b * l1, b, c, d


def plan_cell(plan: Plan, exp: str, seq: int, remat: bool, topology: str, confirm: str,
              line_topology: str) -> dict:
  """One cell: a line of need against the per-chip batch at the full depth, the largest batch
  under this topology's HBM it predicts, and the confirming compiles `confirm` asks for (none
  | fit | boundary). Without remat the line comes from four small compiles (on
  `line_topology`: this topology, or the reference one whose chips lay the same program out).
  With remat a row keeps only each layer's input, a slope the small depths cannot resolve
  from the compiler's variation, so the line is drawn through full-depth compiles on
  `line_topology` (`remat_line`)."""
  full = config_of(exp, seq, remat, plan.dtype, None, 1)
  layers = full.model.num_layers
  hbm = plan.target(topology).hbm_bytes
  cell = {'exp': exp, 'seq': seq, 'remat': remat, 'dtype': plan.dtype, 'topology': topology,
          'layers': layers, 'line_from': line_topology, 'hbm_bytes': hbm}
  if remat:
    line = remat_line(plan, exp, seq, line_topology, may_compile=confirm != 'none')
    if line is None:
      return {**cell, 'status': 'no line: fewer than two full-depth compiles, or need not '
              'rising with the batch across them'}
    fixed, per_row = line
  else:
    points = {}
    for depth in small_depths(exp):
      for batch in small_batches(seq):
        record = plan.compile(exp, seq, remat, line_topology, depth, batch)
        if record is None or record['need_bytes'] is None:
          return {**cell, 'status': 'incomplete (compile budget)' if record is None
                  else 'a small compile was refused without figures'}
        points[(batch, depth)] = record['need_bytes']
    a, b, c, d = bilinear(points)
    fixed, per_row = a + b * layers, c + d * layers
  predicted = max(0, math.floor((hbm - fixed) / per_row)) if per_row > 0 else None
  status = 'predicted' if predicted is not None else \
      "no line: the small compiles' need does not grow with the batch"
  cell.update(status=status, fixed_bytes=round(fixed),
              per_row_bytes=round(per_row), predicted_batch=predicted,
              predicted_need_bytes=round(fixed + per_row * (predicted or 0)))
  if confirm != 'none' and predicted is not None:  # a line that fits no row: compile one
    found, cell['refused_at'] = confirm_at_full_depth(plan, cell, max(predicted, 1), per_row,
                                                      hbm, confirm == 'boundary')
    if cell['refused_at'] == 1:
      cell['refused_need_bytes'] = plan.records[plan.key(exp, seq, remat, topology, None,
                                                         1)]['need_bytes']
    if found is not None:
      batch, record, next_refused = found
      cell.update(status='compiled', largest_per_chip_batch=batch, next_refused=next_refused,
                  **{k: record.get(k) for k in ('need_bytes', 'params', 'optimizer',
                                                'temporaries', 'code', 'compile_s')})
  if 'largest_per_chip_batch' not in cell:
    cell['largest_per_chip_batch'] = predicted
  batch = cell['largest_per_chip_batch']
  cell['global_batch'], cell['model_flops_per_step'] = 0, 0.0
  if batch:  # the arithmetic count of the step at that batch (ELECTRA's generator included)
    target = plan.target(topology)
    run = setup_for_target(config_of(exp, seq, remat, plan.dtype, None,
                                     batch * len(target.devices)), target)
    cell['global_batch'] = run.config.train.batch_size
    cell['model_flops_per_step'] = compile_report.step_flops(run)
  return cell


FULL_COMPILES = 4  # a cell's full-depth compiles in one run of the plan, at most


def full_depth(plan: Plan, exp: str, seq: int, remat: bool, topology: str
               ) -> dict[int, tuple[int, bool]]:
  """{per-chip batch: (need, fits)} of the full-depth compiles made so far for a cell."""
  return {r['per_chip_batch']: (r['need_bytes'], r['fits']) for r in plan.records.values()
          if (r['exp'], r['seq'], r['remat'], r['dtype'], r['topology'], r['layers'])
          == (exp, seq, remat, plan.dtype, topology, 0) and r['need_bytes'] is not None}


def remat_line(plan: Plan, exp: str, seq: int, topology: str, may_compile: bool
               ) -> tuple[float, float] | None:
  """(fixed, per_row) at the full depth with remat on `topology`, through its full-depth
  compiles (`compile_report.rising_line` at its HBM). With fewer than two that fit and
  `may_compile`, it compiles: first at twice the batch the run fits without remat (remat keeps
  a fraction of a row's activations), then where the last point's need scaled to the HBM
  lands (need / batch over-counts a row, so it lands below the boundary), always below the
  smallest batch refused. Refused compiles alone do not make a line: near the HBM the
  compiler rematerializes on its own, so two of them can differ by less than a row costs
  (BERT-base at 188 and 195 rows: 12.4 GiB fixed, 1.2 of it the state)."""
  hbm = plan.target(topology).hbm_bytes
  needs = full_depth(plan, exp, seq, True, topology)
  known = [b for b, (_, ok) in needs.items() if ok]
  if may_compile and len(known) < 2:
    refused = min((b for b, (_, ok) in needs.items() if not ok), default=None)
    if known:
      batch = max(1, math.floor(known[0] * hbm / needs[known[0]][0]))
    else:
      plain = [b for b, (_, ok) in full_depth(plan, exp, seq, False, topology).items() if ok]
      batch = 2 * max(plain, default=small_batches(seq)[1])
    for _ in range(2 - len(known)):
      if refused is not None:
        batch = min(batch, refused - 1)
      if batch < 1 or batch in needs:
        break
      record = plan.compile(exp, seq, True, topology, None, batch)
      if record is None or record['need_bytes'] is None:
        break
      needs[batch] = (record['need_bytes'], record['fits'])
      if not record['fits']:
        refused = batch if refused is None else min(refused, batch)
      batch = max(1, math.floor(batch * hbm / record['need_bytes']))
  return compile_report.rising_line([(b, n) for b, (n, _) in needs.items()], hbm)


def confirm_at_full_depth(plan: Plan, cell: dict, predicted: int, per_row: float, hbm: int,
                          boundary: bool):
  """Full-depth compiles from the predicted batch toward the largest that fits, each next batch
  `compile_report.next_batch`'s (the search `--compile_for --fit` makes: the line between the
  fitting and the refused answer nearest the HBM, the cell's own slope while there is no
  line, a bisection where the line reaches past the smallest refused batch), from every
  full-depth answer the file holds for the cell; with `boundary`, until a refused batch lies
  one row above a fitting one. Returns ((batch, its record, whether batch + 1 was refused
  (None: not compiled)) or None when nothing fit, the smallest batch refused (None: none))."""
  exp, seq, remat, topology = cell['exp'], cell['seq'], cell['remat'], cell['topology']
  needs = full_depth(plan, exp, seq, remat, topology)
  for _ in range(FULL_COMPILES):
    if any(ok for _, ok in needs.values()) and not boundary:
      break
    batch = predicted if not needs else compile_report.next_batch(
        [(b, n, ok) for b, (n, ok) in needs.items()], hbm, 1, per_row)
    if batch is None or batch in needs:
      break
    record = plan.compile(exp, seq, remat, topology, None, batch)
    if record is None or record['need_bytes'] is None:
      break
    needs[batch] = (record['need_bytes'], record['fits'])
  fitting = [b for b, (_, ok) in needs.items() if ok]
  refused = min((b for b, (_, ok) in needs.items() if not ok), default=None)
  if not fitting:
    return None, refused
  best = max(fitting)
  above = needs.get(best + 1)
  return ((best, plan.records[plan.key(exp, seq, remat, topology, None, best)],
           None if above is None else not above[1]), refused)


def markdown(cells: list[dict]) -> str:
  """The plan as docs/scaling.md shows it."""
  lines = ['| model | tokens | remat | topology | per-chip batch | global | params + opt GiB '
           '| temporaries GiB | total / HBM GiB | model TFLOPs a step | source |',
           '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |']
  for c in cells:
    cell = f"| {c['exp']} | {c['seq']} | {'on' if c['remat'] else 'off'} | {c['topology']} | "
    compiled = c['status'] == 'compiled'
    if c.get('largest_per_chip_batch') is None:
      lines.append(cell + f"- | - | - | - | - | - | {c['status']} |")
    elif c.get('refused_at') == 1:  # not one row fits a chip
      need = c['refused_need_bytes']
      lines.append(cell + f"0 | 0 | - | - | {'-' if need is None else f'{need / GIB:.2f}'} / "
                   f"{c['hbm_bytes'] / GIB:.2f} | - | compiled: one row refused |")
    elif not compiled and c.get('refused_at'):  # the compiles made fit nowhere at or below
      lines.append(cell + f"< {c['refused_at']} | - | - | - | - | - | refused at "
                   f"{c['refused_at']}; nothing at or below it fit within the compiles made |")
    else:
      state = (c['params'] + c['optimizer']) / GIB if compiled and c.get('params') else None
      need = c['need_bytes'] if compiled else c['predicted_need_bytes']
      temporaries = f"{c['temporaries'] / GIB:.2f}" if compiled else '-'
      source = ('compiled' + (', one row more refused' if c.get('next_refused')
                              else ': fits (the boundary lies higher)')
                if compiled else f"predicted ({c['line_from']}'s line)")
      lines.append(cell + f"{c['largest_per_chip_batch']} | {c['global_batch']} | "
                   f"{'-' if state is None else f'{state:.2f}'} | {temporaries} | "
                   f"{need / GIB:.2f} / {c['hbm_bytes'] / GIB:.2f} | "
                   f"{c['model_flops_per_step'] / 1e12:.1f} | {source} |")
  return '\n'.join(lines)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--cells', default=','.join(CELLS), help='EXPERIMENT:TOKENS,...')
  parser.add_argument('--topologies', default=','.join(TOPOLOGIES))
  parser.add_argument('--remat', default='off,on')
  parser.add_argument('--dtype', default='bfloat16', help='the compute dtype of the runs')
  parser.add_argument('--confirm', default='boundary', choices=('none', 'fit', 'boundary'),
                      help='full-depth compiles at the predicted batch (fit), and one row more '
                      '(boundary)')
  parser.add_argument('--confirm_on', default=TOPOLOGIES[0],
                      help='the topologies whose cells get full-depth compiles (all: every one)')
  parser.add_argument('--small_on', default='reference', choices=('reference', 'each'),
                      help="the four small compiles on the first topology only, its line then "
                      "read against every topology's HBM (reference), or on each topology")
  parser.add_argument('--budget', type=int, default=1000, help='new compiles at most')
  parser.add_argument('--out', default=os.path.join('runs', 'tpu_plan', 'compiles.jsonl'))
  parser.add_argument('--table', action='store_true', help='print the markdown table at the end')
  args = parser.parse_args(argv)
  os.makedirs(os.path.dirname(args.out) or '.', exist_ok=True)
  targets.target(args.topologies.split(',')[0])  # the host on its CPU, before JAX starts
  print(f'# load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; jax '
        f'{jax.__version__}; host backend {jax.default_backend()}', flush=True)
  plan = Plan(args.out, args.dtype, args.budget)
  cells = []
  start = time.perf_counter()
  for spec in args.cells.split(','):
    exp, seq = spec.split(':')
    for remat in [r == 'on' for r in args.remat.split(',')]:
      for topology in args.topologies.split(','):
        confirmed = args.confirm_on == 'all' or topology in args.confirm_on.split(',')
        line = topology if args.small_on == 'each' else args.topologies.split(',')[0]
        cell = plan_cell(plan, exp, int(seq), remat, topology,
                         args.confirm if confirmed else 'none', line)
        cells.append(cell)
        print(json.dumps({'cell': cell}), flush=True)
  print(f'# {plan.made} new compiles in {time.perf_counter() - start:.0f} s', flush=True)
  if args.table:
    print(markdown(cells))


if __name__ == '__main__':
  main()
