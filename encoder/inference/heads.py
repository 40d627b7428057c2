"""What the fine-tuned task methods share: their heads, applied in numpy to `Model.encode`.

A task head is one dense layer (dropout is off at inference), so applying it here keeps the
training code out of inference; each task module (classification, tagging, span_qa) reads its
head and label names through these helpers rather than through one another.
"""

from __future__ import annotations

import numpy as np

from encoder.errors import CheckpointError


def head_logits(model, features: np.ndarray, head: str) -> np.ndarray:
  """A fine-tuned dense head (`params[head]['dense']`) applied to encoder features."""
  try:
    dense = model.params[head]['dense']
  except KeyError:
    raise CheckpointError(f"the checkpoint has no '{head}' head parameters") from None
  return features.astype(np.float32) @ np.asarray(dense['kernel'], np.float32) + dense['bias']


def encode_trimmed(model, arrays: dict) -> tuple[np.ndarray, np.ndarray]:
  """Sequence outputs of encoded rows with the all-padding columns dropped (they change no
  output, only cost), and the input mask at the same width."""
  width = int(arrays['input_mask'].sum(1).max())
  out = model.encode(**{k: arrays[k][:, :width] for k in ('input_ids', 'segment_ids',
                                                            'input_mask')})
  return out.sequence_output, arrays['input_mask'][:, :width]


def label_names(config: dict) -> list[str] | None:
  """The fine-tuning run's `data.labels`, in head order; None for a regression head."""
  labels = config['data'].get('labels')  # a pretraining run has none
  return [s.strip() for s in labels.split(',')] if labels else None


def softmax(logits: np.ndarray) -> np.ndarray:
  """Probabilities over the last axis, stable for large logits."""
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  return probs / probs.sum(-1, keepdims=True)
