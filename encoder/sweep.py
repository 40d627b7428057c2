"""Ablation sweeps: the cross product of typed overrides, run one after another.

Each run lives in `SWEEP_DIR/<overrides>/`, a normal workdir, so a sweep started again skips
finished runs and resumes an interrupted one through the trainer's own resume. A failing run
is recorded (`run_status.json`) and the others go on. After each run the report is rebuilt:
`sweep.csv`, `sweep.md` and `sweep.png` (the main eval metric against step, one line per run).
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import os
import re
import time
import traceback

from ml_collections import config_dict

from encoder import configs
from encoder.errors import ConfigError, EncoderError

log = logging.getLogger('encoder')
STATUS_FILE = 'run_status.json'


def parse_sweep(spec: str, config: config_dict.ConfigDict, experiment,
                user_keys: frozenset = frozenset()) -> list[tuple[str, list]]:
  """`KEY=V1,V2` -> [(KEY, [typed values])]; a bare NAME -> the experiment's named sweep.

  A named sweep may fix settings for all its runs (a key with one value, e.g. its step budget);
  a key the user set with `--config.KEY=...` keeps the user's value instead.
  """
  if '=' not in spec:
    named = getattr(experiment, 'get_sweep', None)
    if named is None:
      raise ConfigError(f"--sweep {spec}: expected KEY=V1,V2 (the experiment names no sweeps)")
    return [(key, [str(v) for v in values]) for key, values in named(spec)
            if not (len(values) == 1 and key in user_keys)]
  key, _, values = spec.partition('=')
  items = [v.strip() for v in values.split(',')]
  if not values.strip() or any(not v for v in items):
    raise ConfigError(f"--sweep {spec}: give one or more comma-separated values, e.g. {key}=1,2")
  return [(key.strip(), items)]


def expand(axes: list[tuple[str, list]], config: config_dict.ConfigDict) -> list[list[str]]:
  """The grid: every combination as a list of `KEY=VALUE` overrides, validated on a copy."""
  keys = [key for key, _ in axes]
  if len(set(keys)) != len(keys):
    raise ConfigError(f"--sweep names a key twice: {', '.join(keys)}")
  runs = [[f'{key}={value}' for key, value in zip(keys, combo, strict=True)]
          for combo in itertools.product(*(values for _, values in axes))]
  for overrides in runs:  # every value parsed and typed before any run starts
    configs.apply_overrides(copy.deepcopy(config), overrides)
  return runs


def run_name(overrides: list[str], fixed: frozenset = frozenset()) -> str:
  """`model.attention=causal` + `data.nsp=false` -> `attention=causal,nsp=false`: readable and
  safe as a directory name. Keys in `fixed` (one value across the whole grid) are left out: they
  tell the runs of one sweep nothing apart, and the report lists them with each run."""
  parts = []
  for item in overrides:
    key, _, value = item.partition('=')
    if key not in fixed:
      parts.append(f"{key.split('.')[-1]}={value}")
  return re.sub(r'[^A-Za-z0-9_.,=+-]', '_', ','.join(parts)) or 'default'


def fixed_keys(axes: list[tuple[str, list]]) -> frozenset:
  """Keys with a single value, when others vary: settings shared by every run of the grid."""
  single = frozenset(key for key, values in axes if len(values) == 1)
  return single if len(single) < len(axes) else frozenset()


def run_sweep(spec: str, config, axes: list[tuple[str, list]], sweep_dir: str,
              dry_run: bool = False) -> list[dict]:
  """Runs (or lists) the grid; returns one status record per run."""
  grid = expand(axes, config)
  fixed = fixed_keys(axes)
  names = [run_name(o, fixed) for o in grid]
  if dry_run:
    for name, overrides in zip(names, grid, strict=True):
      print(f"{os.path.join(sweep_dir, name)}  {' '.join('--config.' + o for o in overrides)}")
    return []
  from encoder.sweep_report import write_report
  from encoder.train.trainer import check_workdir, setup_logging, train_and_evaluate
  setup_logging()
  run_configs = []
  for name, overrides in zip(names, grid, strict=True):  # all refused before any run starts
    run_config = copy.deepcopy(config)
    configs.apply_overrides(run_config, overrides)
    check_workdir(run_config, os.path.join(sweep_dir, name))
    run_configs.append(run_config)
  os.makedirs(sweep_dir, exist_ok=True)
  for name, overrides, run_config in zip(names, grid, run_configs, strict=True):
    workdir = os.path.join(sweep_dir, name)
    status = read_status(workdir)
    if status.get('status') == 'done' and _last_step(workdir) >= run_config.train.num_steps:
      log.info('sweep: %s finished already, skipped', name)
      continue
    log.info('sweep: %s (%s)', name, ' '.join(overrides))
    start = time.time()
    record = {'name': name, 'overrides': overrides, 'experiment': spec}
    try:
      train_and_evaluate(run_config, workdir)
      finished = _last_step(workdir) >= run_config.train.num_steps
      record['status'] = 'done' if finished else 'interrupted'
    except EncoderError as e:
      record.update(status='failed', error=str(e))
    except Exception as e:  # noqa: BLE001 - one broken run must not stop the sweep
      record.update(status='failed', error=f'{type(e).__name__}: {e}'.split('\n')[0])
      log.error('sweep: %s failed\n%s', name, traceback.format_exc())
    record['wall_clock_s'] = round(status.get('wall_clock_s', 0) + time.time() - start, 1)
    write_status(workdir, record)
    write_report(sweep_dir)
    if record['status'] == 'interrupted':
      log.info('sweep stopped during %s; run the same command to resume', name)
      break
  return write_report(sweep_dir)  # also when every run was finished already


def _last_step(workdir: str) -> int:
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    return 0
  with open(path) as f:
    steps = [json.loads(line)['step'] for line in f if line.strip()]
  return max(steps, default=0)


def read_status(workdir: str) -> dict:
  path = os.path.join(workdir, STATUS_FILE)
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def write_status(workdir: str, record: dict) -> None:
  os.makedirs(workdir, exist_ok=True)
  tmp = os.path.join(workdir, STATUS_FILE + '.tmp')
  with open(tmp, 'w') as f:
    json.dump(record, f, indent=2)
  os.replace(tmp, os.path.join(workdir, STATUS_FILE))


def sweep_dir_name(args) -> str:
  """Default sweep directory: the experiment and the swept keys, e.g. `mlm_nsp_tiny-attention`."""
  keys = [spec.partition('=')[0].split('.')[-1] for spec in args.sweep]
  return re.sub(r'[^A-Za-z0-9_.,=+-]', '_', f"{args.exp.replace(':', '-')}-{'-'.join(keys)}")
