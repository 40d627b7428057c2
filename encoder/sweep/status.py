"""What a sweep run's workdir says about it: its status record (`run_status.json`, written by
the runner after each attempt, read by the runner to skip and by the report) and its last step.
"""

from __future__ import annotations

import json
import os

from encoder import storage
from encoder.checkpoint_files import newest_data_state
from encoder.configs import nested_get
from encoder.train.metric_writer import read_metrics
from encoder.train.time_budget import CLOCK_KEY

STATUS_FILE = 'run_status.json'


def read_status(workdir: str) -> dict:
  """The run's last status record; {} for a run never attempted."""
  path = os.path.join(workdir, STATUS_FILE)
  if not storage.isfile(path):
    return {}
  return json.loads(storage.read_text(path))


def write_status(workdir: str, record: dict) -> None:
  """Replaces the status record atomically, so a kill never leaves half of one."""
  storage.makedirs(workdir)
  storage.write_atomic(os.path.join(workdir, STATUS_FILE), json.dumps(record, indent=2))


def last_step(workdir: str) -> int:
  """The newest step in metrics.jsonl; 0 before the first write."""
  return max((r['step'] for r in read_metrics(workdir)), default=0)


def target_steps(workdir: str, config) -> int | None:
  """The run's length: a positive `train.num_steps`, else the one its run resolved from
  `train.num_epochs` (the workdir's config.json); None when it was never resolved."""
  if config.train.num_steps > 0:
    return int(config.train.num_steps)
  path = os.path.join(workdir, 'config.json')
  if not storage.isfile(path):
    return None
  return nested_get(json.loads(storage.read_text(path)), ['train', 'num_steps'])


def finished(workdir: str, config) -> bool:
  """Whether the run's metrics reach its last step, or its wall-clock budget
  (`train.max_minutes`) ended it: `train.num_steps` is then only an upper bound, and the newest
  checkpoint's training clock says the budget was spent (saved with the final evaluation)."""
  target = target_steps(workdir, config)
  if target is not None and last_step(workdir) >= target:
    return True
  return bool(config.train.get('max_minutes')) and budget_ended(workdir)


def budget_ended(workdir: str) -> bool:
  """Whether the run's wall-clock budget ended it (its newest checkpoint's clock)."""
  return bool(newest_data_state(workdir).get(CLOCK_KEY, {}).get('ended', False))

