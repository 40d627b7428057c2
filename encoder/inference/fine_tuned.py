"""What the fine-tuned task methods (classify.py, tag.py, answer.py) share: the size of a head
read from the checkpoint, the run's label names, and softmax.

The heads themselves are not here: each method runs its task's Flax model
(`encoder.modules.task_models`, the one the trainer trained) through `Model.task_outputs`.
"""

from __future__ import annotations

import numpy as np

from encoder.errors import CheckpointError


def head_size(params: dict, head: str) -> int:
  """The outputs of the fine-tuned head `params[head]` (its last dense layer's width), so the
  model is rebuilt in the shape it was trained in."""
  try:
    return int(np.shape(params[head]['dense']['kernel'])[-1])
  except KeyError:
    raise CheckpointError(f"the checkpoint has no '{head}' head parameters") from None


def label_names(config: dict) -> list[str] | None:
  """The fine-tuning run's `data.labels`, in head order; None for a regression head."""
  labels = config['data'].get('labels')  # a pretraining run has none
  return [s.strip() for s in labels.split(',')] if labels else None


def softmax(logits: np.ndarray) -> np.ndarray:
  """Probabilities over the last axis, stable for large logits."""
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  return probs / probs.sum(-1, keepdims=True)
