"""`Model.tag(texts)` for checkpoints fine-tuned with the tagging task (NER).

Each text is split into words on whitespace (or given as a list of words), every word into
sub-tokens exactly as in training, and each word takes the tag predicted at its first
sub-token; entity spans are read from the IOB2 tags by conlleval's rules.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from encoder.data.finetune.finetuning_data import encode_words
from encoder.errors import DataError
from encoder.inference.heads import encode_trimmed, head_logits, label_names


def _words(text) -> list[str]:
  if isinstance(text, str):
    return text.split()
  if isinstance(text, list | tuple) and all(isinstance(w, str) for w in text):
    return list(text)
  raise DataError(f'tag() takes strings or lists of words, got {type(text).__name__}')


def tag(model, texts: Sequence) -> list[dict]:
  """Per text: {'words', 'tags', 'entities': [{'type', 'text', 'start', 'end'}]} with word
  indices (end exclusive). Words beyond the fine-tuned `data.max_seq_length` get 'O'."""
  # Imported here: encoder.load imports nothing from encoder.tasks (the training side).
  from encoder.tasks.conlleval import chunks
  single = isinstance(texts, str)
  sentences = [_words(t) for t in ([texts] if single else texts)]
  names = label_names(model.config)
  if not names:
    raise DataError('the checkpoint has no tag names (config data.labels)')
  max_length = int(model.config['data']['max_seq_length'])
  arrays, positions = encode_words(model.tokenizer, sentences, min(max_length, model.max_length))
  sequence, _ = encode_trimmed(model, arrays)
  logits = head_logits(model, sequence, 'tagger')
  results = []
  for words, row, pos in zip(sentences, logits, positions, strict=True):
    tags = [names[int(i)] for i in np.argmax(row[pos], -1)] + ['O'] * (len(words) - len(pos))
    entities = [{'type': kind, 'text': ' '.join(words[s:e]), 'start': s, 'end': e}
                for kind, s, e in chunks(tags)]
    results.append({'words': words, 'tags': tags, 'entities': entities})
  return results[0] if single else results
