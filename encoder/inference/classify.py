"""`Model.classify(texts)` for checkpoints fine-tuned with the classification task.

The logits come from the task's own Flax model (`BertForClassification`: the encoder's pooling
and pooler, then the classification head the run trained, dropout off). Texts are truncated to
the `data.max_seq_length` the model was fine-tuned with.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from encoder.inference.fine_tuned import head_size, label_names, softmax
from encoder.modules.task_models import BertForClassification, target_scale


def classify(model, texts: Sequence) -> list[dict]:
  """Per text (or (a, b) pair): {'label', 'probabilities': {label: p}}, or {'score'} for a
  regression checkpoint (data.num_labels = 1, e.g. STS-B)."""
  single = isinstance(texts, str) or (isinstance(texts, tuple) and len(texts) == 2
                                      and all(isinstance(t, str) for t in texts))
  batch = [texts] if single else list(texts)
  logits = classify_logits(model, [tuple(t) if isinstance(t, list) else t for t in batch])
  names = label_names(model.config)
  if names is None:
    results = [{'score': float(row[0])} for row in logits]
  else:
    probs = softmax(logits)
    results = [{'label': names[int(p.argmax())],
                'probabilities': {n: float(q) for n, q in zip(names, p, strict=True)}}
               for p in probs]
  return results[0] if single else results


def classify_logits(model, texts: list) -> np.ndarray:
  """[texts, num_labels] float32 logits of texts or (a, b) pairs, as the trainer's eval step
  computes them."""
  ids, segments, mask = model.tokenize(texts, model.config['data']['max_seq_length'])
  module = BertForClassification(model.model_config, head_size(model.params, 'classifier'),
                                  **target_scale(model.config['data']))
  return model.task_outputs(module, {'input_ids': ids, 'segment_ids': segments,
                                     'input_mask': mask})['logits']
