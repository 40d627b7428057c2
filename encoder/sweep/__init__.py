"""Ablation sweeps (`launch.py --sweep`, `--report`): grid.py turns specs into runs and names,
run.py runs them one after another, status.py reads and writes what each run directory says,
report.py rebuilds sweep.csv, sweep.md and sweep.png from the run directories alone.

The names below are imported on first use, so `encoder.sweep.grid` (which experiments import
for `Arm`) does not import the runner, and with it the trainer and JAX.
"""

import importlib

_WHERE = {'parse_sweep': 'grid', 'sweep_dir_name': 'grid', 'write_report': 'report',
          'run_sweep': 'run'}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
  if name not in _WHERE:
    raise AttributeError(f"module 'encoder.sweep' has no attribute '{name}'")
  return getattr(importlib.import_module(f'encoder.sweep.{_WHERE[name]}'), name)
