"""Ablation sweeps (`launch.py --sweep`, `--report`): grid.py turns specs into runs and names,
run.py runs them one after another, status.py reads and writes what each run directory says,
report.py rebuilds sweep.csv, sweep.md and sweep.png from the run directories alone."""

from encoder.sweep.grid import parse_sweep, sweep_dir_name
from encoder.sweep.report import write_report
from encoder.sweep.run import run_sweep

__all__ = ['parse_sweep', 'run_sweep', 'sweep_dir_name', 'write_report']
