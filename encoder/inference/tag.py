"""`Model.tag(texts)` for checkpoints fine-tuned with the tagging task (NER).

Each text is split into words on whitespace (or given as a list of words), every word into
sub-tokens exactly as in training, and each word takes the tag predicted at its first
sub-token by the task's own Flax model (`BertForTagging`, dropout off); entity spans are read
from the IOB2 tags by conlleval's rules.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from encoder.data.finetune.finetuning_data import encode_words
from encoder.errors import DataError
from encoder.inference.fine_tuned import head_size, label_names
from encoder.modules.task_models import BertForTagging


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
  logits, positions, _ = tag_logits(model, sentences)
  results = []
  for words, row, pos in zip(sentences, logits, positions, strict=True):
    tags = [names[int(i)] for i in np.argmax(row[pos], -1)] + ['O'] * (len(words) - len(pos))
    entities = [{'type': kind, 'text': ' '.join(words[s:e]), 'start': s, 'end': e}
                for kind, s, e in chunks(tags)]
    results.append({'words': words, 'tags': tags, 'entities': entities})
  return results[0] if single else results


def tag_logits(model, sentences: list[list[str]]
               ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
  """Every token's logits [sentences, seq, num_tags] (seq: the longest row's bucket), each
  sentence's first sub-token positions (its words' tags are read there), and the input mask."""
  max_length = int(model.config['data']['max_seq_length'])
  arrays, positions = encode_words(model.tokenizer, sentences, min(max_length, model.max_length))
  module = BertForTagging(model.model_config, head_size(model.params, 'tagger'))
  logits = model.task_outputs(module, arrays)['logits']
  return logits, positions, arrays['input_mask'][:, :logits.shape[1]]
