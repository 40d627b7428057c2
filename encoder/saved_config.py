"""A run's saved config.json as its readers see it (resume, `init_from`, `encoder.load`, the
sweep and suite readers): every field its task's schema (config_schema) has, so a run written
by a version that lacked a field reads like one written today; and the pooling a fine-tuned
head reads its encoder with.

Jax-free, as config_schema.
"""

from __future__ import annotations

import json
import os

from encoder import storage
from encoder.config_schema import SIZES, preset, task_config


def complete(saved: dict) -> dict:
  """A saved config (config.json as a dict) with every field the schema of its task has and it
  lacks (written by an earlier version) filled in: missing model fields from its size's
  preset, the others from their default. What it holds is kept as it is."""
  schema = task_config(saved.get('task', 'pretraining')).to_dict()  # earliest files: pretraining
  model = dict(saved.get('model') or {})
  if model.get('size', 'base') in SIZES:  # an unknown size is refused where it is resolved
    for key, value in preset(model.get('size', 'base')).items():
      model.setdefault(key, value)
  return _merged(schema, {**saved, 'model': model})


def head_pooling(saved: dict) -> str:
  """How a fine-tuned sentence-level head pools a run's encoder unless the fine-tuning config
  sets model.pooling: the run's own model.pooling, except for a model imported from
  sentence-transformers, whose encoder was trained to be read by its pipeline's pooling (mean
  for all-MiniLM-L6-v2): its heads read it the same way (docs/finetuning.md measures it)."""
  embed = saved.get('embed') or {}
  if embed.get('sentence_transformers') and embed.get('pooling') in ('cls', 'mean'):
    return embed['pooling']
  return (saved.get('model') or {}).get('pooling') or 'cls'


def read_saved(workdir: str) -> dict:
  """A run's config.json, `complete`d: what resume, `init_from`, `encoder.load` and the sweep
  and suite readers see of a run written by any version."""
  return complete(json.loads(storage.read_text(os.path.join(workdir, 'config.json'))))


def _merged(defaults: dict, saved: dict) -> dict:
  out = dict(saved)
  for key, value in defaults.items():
    if key not in out:
      out[key] = value
    elif isinstance(value, dict) and isinstance(out[key], dict):
      out[key] = _merged(value, out[key])
  return out
