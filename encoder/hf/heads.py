"""Fine-tuned task heads across the Hugging Face families: which task a class is, where our
checkpoint keeps the head, and the labels of config.json both ways.

A fine-tuning run records its task in config.json (`task`) and its label names in
`data.labels` (comma-separated, in head order; none for a regression head); its head is one
parameter group (encoder.modules.task_models: `classifier`, `tagger`, `span`). Hugging Face
records the task in the class name (`BertForSequenceClassification`, ...) and the labels in
`id2label` (with `problem_type` telling regression from classification). The families (bert.py,
modernbert.py) map the head's tensors; this file holds what they share, and the config a
converted fine-tuned model gets, so that `encoder.load(workdir).classify/tag/answer` serve it
as they serve a run of ours.
"""

from __future__ import annotations

import numpy as np

from encoder import config_schema
from encoder.errors import CheckpointError

TASKS = ('classification', 'tagging', 'span_qa')
# Our parameter group of each task's head: the attribute names of encoder.modules.task_models.
GROUPS = {'classification': 'classifier', 'tagging': 'tagger', 'span_qa': 'span'}
# Hugging Face's class of each, after the family's prefix (AutoModelFor<...> loads it).
_SUFFIXES = {'classification': 'ForSequenceClassification',
             'tagging': 'ForTokenClassification', 'span_qa': 'ForQuestionAnswering'}
METHODS = {'classification': 'classify', 'tagging': 'tag', 'span_qa': 'answer'}


def architectures(prefix: str) -> dict[str, str]:
  """task -> the family's class name: architectures('Bert')['tagging'] is
  'BertForTokenClassification'."""
  return {task: prefix + suffix for task, suffix in _SUFFIXES.items()}


def task_of(hf: dict, head_architectures: dict[str, str]) -> str | None:
  """The task of config.json's (first) architecture, or None for a model without one of our
  task heads (its encoder still converts)."""
  names = hf.get('architectures')
  first = names[0] if isinstance(names, list) and names else None
  return next((t for t, name in head_architectures.items() if name == first), None)


def labels_from_hf(hf: dict, task: str) -> tuple[list[str] | None, int]:
  """(label names in id order, or None for a regression head and for question answering's
  start and end; the head's outputs) of a config.json, refusing in one line what our heads
  cannot serve."""
  names = _id2label(hf)
  if task == 'span_qa':
    if len(names) != 2:
      raise CheckpointError(f'num_labels={len(names)} for question answering: our span head has '
                            'two outputs (start, end)')
    return None, 2
  problem = hf.get('problem_type')
  if task == 'classification':
    if problem == 'multi_label_classification':
      raise CheckpointError("problem_type='multi_label_classification' is not supported: our "
                            'classification head is single-label (softmax over the labels)')
    if problem == 'regression' or len(names) == 1:
      if len(names) != 1:
        raise CheckpointError(f"problem_type='regression' with num_labels={len(names)}: our "
                              'regression head has one output')
      return None, 1
  check_names(names)
  return names, len(names)


def _id2label(hf: dict) -> list[str]:
  """id2label's names ordered by id (its JSON keys are strings), else LABEL_i for num_labels
  (transformers' default: 2)."""
  id2label = hf.get('id2label')
  if id2label is None:
    count = hf.get('num_labels', hf.get('_num_labels', 2))
    if not isinstance(count, int) or count < 1:
      raise CheckpointError(f'the config.json gives num_labels={count!r}: it must be positive')
    return [f'LABEL_{i}' for i in range(count)]
  try:
    by_id = {int(k): v for k, v in id2label.items()}
  except (AttributeError, TypeError, ValueError):
    raise CheckpointError(f'id2label {str(id2label)[:80]} is not an object of integer ids '
                          'to names') from None
  if sorted(by_id) != list(range(len(by_id))) or not by_id:
    raise CheckpointError(f'id2label has ids {sorted(by_id)[:8]}: it must number the labels '
                          '0, 1, ... without gaps')
  return [str(by_id[i]) for i in range(len(by_id))]


def check_names(names: list[str]) -> None:
  """Refuses names `data.labels` (comma-separated, each stripped) could not hold as they are."""
  for name in names:
    if not name or ',' in name or name != name.strip():
      raise CheckpointError(f'label name {name!r} is empty, has a comma or surrounding spaces: '
                            "data.labels (comma-separated) cannot hold it")
  if len(set(names)) < len(names):
    raise CheckpointError(f'label names repeat ({", ".join(names)[:120]}): each must name one '
                          'output of the head')


def hf_label_fields(task: str, names: list[str] | None, num_labels: int) -> dict:
  """config.json's label fields for a head of `num_labels` outputs named `names` (None:
  LABEL_i, transformers' default); one output of a classification head is regression."""
  if names is None:
    names = [f'LABEL_{i}' for i in range(num_labels)]
  if len(names) != num_labels:
    raise CheckpointError(f"data.labels names {len(names)} labels but the head has {num_labels} "
                          'outputs')
  check_names(names)
  fields = {'num_labels': num_labels, 'id2label': {str(i): n for i, n in enumerate(names)},
            'label2id': {n: i for i, n in enumerate(names)}}
  if task == 'classification':
    fields['problem_type'] = 'regression' if num_labels == 1 else 'single_label_classification'
  return fields


def fold_target_scale(params: dict, data: dict) -> dict:
  """`params` with a regression head's output scale folded into its last dense layer.

  A run that standardised its targets records their mean and std (data.target_mean,
  data.target_std), and its head outputs mean + std x the layer (task_models'
  BertForClassification); Hugging Face's classifier is the layer alone, so the export scales
  it: std x kernel, mean + std x bias. Unscaled heads come back as they are (bitwise)."""
  mean, std = float(data.get('target_mean') or 0.0), float(data.get('target_std') or 1.0)
  if (mean, std) == (0.0, 1.0):
    return params
  dense = params['classifier']['dense']
  scaled = {'kernel': np.asarray(dense['kernel'], np.float32) * np.float32(std),
            'bias': np.asarray(dense['bias'], np.float32) * np.float32(std) + np.float32(mean)}
  return {**params, 'classifier': {**params['classifier'], 'dense': scaled}}


def run_config(task: str, names: list[str] | None, max_length: int):
  """The config of a converted fine-tuned model: the schema's fine-tuning config of `task`
  (span_qa with SQuAD's windows) as a run of ours writes it, its labels, no `init_from` (the
  weights are the workdir's own), and sequence settings that fit `max_length` positions."""
  c = config_schema.finetuning_config('from_hf', task)
  if task == 'span_qa':
    c = config_schema.span_qa(c)
  c.init_from = ''
  d = c.data
  d.labels = ','.join(names) if names else None
  d.num_labels = len(names) if names else (1 if task == 'classification' else None)
  if max_length < d.max_seq_length:
    d.max_seq_length = max_length
    if task == 'span_qa':  # run_squad's 384 / 128 / 64, scaled to a shorter position table
      d.doc_stride, d.max_query_length = max(1, max_length // 3), max(1, max_length // 6)
  return c
