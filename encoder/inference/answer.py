"""`Model.answer(question, context)` for checkpoints fine-tuned with the span_qa task (SQuAD).

The context is cut into the same windows as in training (the checkpoint's data.max_seq_length,
doc_stride, max_query_length), the task's own Flax model (`BertForQuestionAnswering`, dropout
off) gives each window's start and end logits, and the answer is decoded with the training
run's n-best rules, so a long context is read whole and the answer is quoted from it by
character offsets.
"""

from __future__ import annotations

import numpy as np

from encoder.data.finetune.squad_examples import QAExample
from encoder.data.finetune.squad_features import build_features
from encoder.errors import DataError
from encoder.inference.fine_tuned import head_size
from encoder.modules.task_models import BertForQuestionAnswering


def answer(model, question, context):
  """{'text', 'start', 'end' (character offsets into context, end exclusive), 'score' (start +
  end logit), 'probability' (over the n-best answers), 'no_answer'}; a SQuAD 2.0 checkpoint
  also gives 'null_score_diff' and answers `no_answer=True` with text '' and start = end =
  None when the null answer wins. Lists of questions and contexts give a list."""
  # Imported here: encoder.load imports nothing from encoder.tasks (the training side).
  from encoder.tasks.span_decoding import decode_all, decode_options
  single = isinstance(question, str)
  questions = [question] if single else list(question)
  contexts = [context] if isinstance(context, str) else list(context)
  if len(questions) != len(contexts) or not all(
      isinstance(t, str) for t in questions + contexts):
    raise DataError('answer() takes a question and a context (strings), or two lists of them '
                    'of equal length')
  examples = [QAExample(str(i), q, c, [], False, f'answer()[{i}]')
              for i, (q, c) in enumerate(zip(questions, contexts, strict=True))]
  features = windows(model, examples)
  start, end = span_logits(model, features.arrays)
  options = decode_options(model.config['data'])
  results = []
  for p in decode_all(examples, features, start, end, options):
    none = not p.text
    result = {'text': p.text, 'start': None if none else p.start,
              'end': None if none else p.end, 'score': float(p.score),
              'probability': float(p.probability), 'no_answer': none}
    if options['version_2']:
      result['null_score_diff'] = float(p.null_score_diff)
    results.append(result)
  return results[0] if single else results


def windows(model, examples: list[QAExample]):
  """The examples' windows (`squad_features.Features`), cut by the run's data settings."""
  data = model.config['data']
  return build_features(model.tokenizer, examples,
                        min(int(data['max_seq_length']), model.max_length),
                        int(data['doc_stride']), int(data['max_query_length']))


def span_logits(model, arrays: dict) -> tuple[np.ndarray, np.ndarray]:
  """Start and end logits of encoded windows, [windows, seq] each (seq: the longest window's
  bucket), padding at MASKED_LOGIT, as the trainer's eval step computes them."""
  head_size(model.params, 'span')  # a checkpoint without the head fails here, in one line
  out = model.task_outputs(BertForQuestionAnswering(model.model_config), arrays)
  return out['start_logits'], out['end_logits']
