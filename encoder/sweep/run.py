"""Ablation sweeps: the cross product of typed overrides, run one after another.

Each run lives in `SWEEP_DIR/<overrides>/`, a normal workdir, so a sweep started again skips
finished runs and resumes an interrupted one through the trainer's own resume. A failing run
is recorded (`run_status.json`) and the others go on. After each run the report is rebuilt:
`sweep.csv`, `sweep.md` and `sweep.png` (the main eval metric against step, one line per run).
"""

from __future__ import annotations

import logging
import os
import time
import traceback

from encoder import storage
from encoder.errors import EncoderError
from encoder.sweep.grid import run_configs
from encoder.sweep.report import write_report
from encoder.sweep.status import finished, read_status, write_status
from encoder.train.resolve import resolve_config
from encoder.train.trainer import check_workdir, setup_logging, train_and_evaluate

log = logging.getLogger('encoder')


def run_sweep(spec: str, config, axes: list[tuple[str, list]], sweep_dir: str,
              dry_run: bool = False) -> list[dict]:
  """Runs (or lists) the grid; returns one status record per run."""
  runs = run_configs(config, axes)
  if dry_run:
    for name, overrides, _ in runs:
      print(f"{os.path.join(sweep_dir, name)}  {' '.join('--config.' + o for o in overrides)}")
    return []
  setup_logging()
  storage.check_checkpoint_location(sweep_dir)
  storage.check_bucket(sweep_dir)  # before anything is written
  for name, _, run_config in runs:  # all refused before any run starts
    if 'cache_dir' in run_config.data and not run_config.data.cache_dir:
      # One cache for the arms: those on the same corpus share one preparation of it.
      run_config.data.cache_dir = os.path.join(sweep_dir, 'cache')
    try:
      resolved = resolve_config(run_config)
    except EncoderError:
      continue  # a config training refuses: recorded as this run's failure in its turn
    check_workdir(resolved, os.path.join(sweep_dir, name))
  storage.makedirs(sweep_dir)
  for name, overrides, run_config in runs:
    workdir = os.path.join(sweep_dir, name)
    status = read_status(workdir)
    record = {'name': name, 'overrides': overrides, 'experiment': spec}
    if status.get('status') == 'done' and finished(workdir, run_config):
      log.info('sweep: %s finished already, skipped', name)
      if status.get('name') != name:  # copied from another sweep: the same config, our name
        write_status(workdir, {**status, **record})
      continue
    log.info('sweep: %s (%s)', name, ' '.join(overrides))
    start = time.time()
    try:
      train_and_evaluate(run_config, workdir)
      record['status'] = 'done' if finished(workdir, run_config) else 'interrupted'
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
