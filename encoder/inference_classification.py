"""`Model.classify(texts)` for checkpoints fine-tuned with the classification task.

The head is one dense layer on the pooled [CLS] output (dropout is off at inference), so it is
applied here in numpy on `Model.encode`'s pooled output: no training code is imported. Texts
are truncated to the `data.max_seq_length` the model was fine-tuned with.
"""

from __future__ import annotations

from collections.abc import Sequence

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
  labels = config.get('data', {}).get('labels')
  return [s.strip() for s in labels.split(',')] if labels else None


def classify(model, texts: Sequence) -> list[dict]:
  """Per text (or (a, b) pair): {'label', 'probabilities': {label: p}}, or {'score'} for a
  regression checkpoint (data.num_labels = 1, e.g. STS-B)."""
  single = isinstance(texts, str) or (isinstance(texts, tuple) and len(texts) == 2
                                      and all(isinstance(t, str) for t in texts))
  batch = [texts] if single else list(texts)
  max_length = model.config.get('data', {}).get('max_seq_length')
  pooled = model.encode([tuple(t) if isinstance(t, list) else t for t in batch],
                        max_length=max_length).pooled_output
  logits = head_logits(model, pooled, 'classifier')
  names = label_names(model.config)
  if names is None:
    results = [{'score': float(row[0])} for row in logits]
  else:
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    results = [{'label': names[int(p.argmax())],
                'probabilities': {n: float(q) for n, q in zip(names, p, strict=True)}}
               for p in probs]
  return results[0] if single else results
