"""`Model.classify(texts)` for checkpoints fine-tuned with the classification task.

The head is one dense layer on the pooled [CLS] output, applied in numpy (see heads.py). Texts
are truncated to the `data.max_seq_length` the model was fine-tuned with.
"""

from __future__ import annotations

from collections.abc import Sequence

from encoder.inference.heads import head_logits, label_names, softmax


def classify(model, texts: Sequence) -> list[dict]:
  """Per text (or (a, b) pair): {'label', 'probabilities': {label: p}}, or {'score'} for a
  regression checkpoint (data.num_labels = 1, e.g. STS-B)."""
  single = isinstance(texts, str) or (isinstance(texts, tuple) and len(texts) == 2
                                      and all(isinstance(t, str) for t in texts))
  batch = [texts] if single else list(texts)
  max_length = model.config['data']['max_seq_length']
  pooled = model.encode([tuple(t) if isinstance(t, list) else t for t in batch],
                        max_length=max_length).pooled_output
  logits = head_logits(model, pooled, 'classifier')
  names = label_names(model.config)
  if names is None:
    results = [{'score': float(row[0])} for row in logits]
  else:
    probs = softmax(logits)
    results = [{'label': names[int(p.argmax())],
                'probabilities': {n: float(q) for n, q in zip(names, p, strict=True)}}
               for p in probs]
  return results[0] if single else results
