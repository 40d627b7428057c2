"""Tasks: each is a model (encoder + head), a loss, metric sums and data.

The trainer asks `get_task(config.task)` and never branches on which task it runs.
"""

import importlib

from encoder.errors import ConfigError

TASKS = {'pretraining': 'encoder.tasks.pretraining',
         'classification': 'encoder.tasks.classification',
         'tagging': 'encoder.tasks.tagging',
         'span_qa': 'encoder.tasks.span_qa'}


def get_task(name: str):
  if name not in TASKS:
    raise ConfigError(f"unknown task '{name}' (known: {', '.join(sorted(TASKS))})")
  return importlib.import_module(TASKS[name])
