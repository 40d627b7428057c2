"""One suite run in its own process: `python -m encoder.suite.worker WORKDIR/suite_run.json`.

What `suite.parallel=N` starts N of at once (execute.py); the run's outcome goes to its
workdir's run_status.json, as when the suite runs it in its own process.
"""

from __future__ import annotations

import json
import sys

from encoder import storage
from encoder.suite.execute import run_one
from encoder.suite.plan import RunSpec


def main(argv: list[str]) -> int:
  payload = json.loads(storage.read_text(argv[0]))
  spec = payload['spec']
  spec['overrides'] = tuple(spec['overrides'])
  record = run_one(RunSpec(**spec), payload.get('keep_weights', False))
  if record['status'] == 'failed':
    sys.stderr.write(f"error: {record.get('error', '')}\n")
  return 0 if record['status'] != 'failed' else 2


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
