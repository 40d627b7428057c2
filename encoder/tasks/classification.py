"""Sequence classification on the pooled output: single sentences and pairs (GLUE).

`[CLS] A [SEP] (B [SEP])` -> encoder -> pooled output ([CLS] or the tokens' mean) -> the
classification head (`BertForClassification` in encoder.modules.task_models, which
`encoder.load(...).classify` runs too). Cross-entropy over `data.num_labels` classes;
`data.num_labels=1` is regression (mean squared error, STS-B).
Eval metrics come from whole predictions (`predict` + `evaluate`), since F1, MCC and the
correlations are no sums: `accuracy` (+ `f1` for two classes, `mcc`); `pearson`, `spearman`.
Packed batches (`data.packing=examples`) hold several examples per row: the model pools each
one's [CLS] (`cls_positions`), so logits, labels and weights are [rows, slots] there.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from encoder.data.finetune import file_readers, finetuning_data, packing, tfds_examples
from encoder.errors import DataError
from encoder.modules.config import model_config
from encoder.modules.task_models import BertForClassification, target_scale
from encoder.tasks import metrics, task_inputs, with_loss_settings

WEIGHTS = ('weight',)


def num_labels(config) -> int:
  """data.num_labels, else the size of data.labels, else 2 (before the data is read)."""
  names = task_inputs.given_names(config)
  return config.data.num_labels or (len(names) if names else 2)


def build_model(config) -> BertForClassification:
  return BertForClassification(model_config(config.model, config.data.vocab_size),
                               num_labels(config), **target_scale(config.data))


def bind(config):
  """The task with a regression run's target scale bound into its loss: with
  `data.standardize_targets` the squared error is taken in standard deviations, so training
  is exactly that on standardised targets (the model's output stays in the targets' units)."""
  return with_loss_settings(globals(), loss_and_metrics,
                            target_std=target_scale(config.data)['target_std'])


def dummy_batch(config, batch_size: int = 1) -> dict:
  regression = num_labels(config) == 1
  return {**task_inputs.dummy_inputs(config, batch_size),
          'label': jnp.zeros((batch_size,), jnp.float32 if regression else jnp.int32),
          'weight': jnp.ones((batch_size,), jnp.float32)}


def loss_denominators(batch: dict) -> dict:
  return {'examples': batch['weight'].astype(jnp.float32).sum()}


def loss_and_metrics(outputs: dict, batch: dict, denominators: dict | None = None,
                     target_std: float = 1.0) -> tuple[jax.Array, dict]:
  """Mean cross-entropy (or squared error, in units of `target_std`, when there is one
  output) over weighted examples (any leading shape: [batch], or a packed batch's
  [rows, slots])."""
  if denominators is None:
    denominators = loss_denominators(batch)
  logits, weight = outputs['logits'], batch['weight'].astype(jnp.float32)
  if logits.shape[-1] == 1:
    per_example = jnp.square((logits[..., 0] - batch['label'].astype(jnp.float32)) / target_std)
    correct = jnp.zeros_like(weight)
  else:
    per_example = optax.softmax_cross_entropy_with_integer_labels(logits, batch['label'])
    correct = (logits.argmax(-1) == batch['label']).astype(jnp.float32)
  loss_sum = (per_example * weight).sum()
  sums = {'loss': loss_sum, 'correct': (correct * weight).sum(), 'count': weight.sum()}
  return loss_sum / jnp.maximum(denominators['examples'], 1.0), sums


def reduce_metrics(sums: dict) -> dict:
  count = max(float(sums['count']), 1.0)
  return {'loss': float(sums['loss']) / count, 'accuracy': float(sums['correct']) / count}


def predict(outputs: dict, batch: dict) -> dict:
  """Per-example outputs the host-side `evaluate` needs."""
  return {'logits': outputs['logits']}


def evaluate(data, predictions: dict) -> tuple[dict, dict]:
  """Metrics of every eval set (sets after the first suffix theirs) and their prediction
  records, one per example: text, gold, prediction (+ its probability)."""
  names = data.info['labels']
  results, records = {}, {}
  for s, offset, n in task_inputs.eval_slices(data, len(predictions['logits'])):
    logits = np.asarray(predictions['logits'][offset:offset + n], np.float64)
    gold, examples = s.arrays['label'][:n], s.examples[:n]
    suffix = task_inputs.metric_suffix(s.name)
    if names is None:
      pred = logits[:, 0]
      scores = {**metrics.regression_scores(gold, pred),
                **metrics.baseline_scores(gold, regression=True)}
      rows = [{'gold': float(g), 'prediction': float(p)} for g, p in zip(gold, pred, strict=True)]
    else:
      probs = np.exp(logits - logits.max(-1, keepdims=True))
      probs /= probs.sum(-1, keepdims=True)
      pred = probs.argmax(-1)
      which = ('accuracy', 'f1', 'mcc') if len(names) == 2 else ('accuracy', 'mcc')
      scores = {**metrics.classification_scores(gold, pred, which),
                **metrics.baseline_scores(gold, which)}
      rows = [{'gold': names[g], 'prediction': names[p], 'probability': round(float(q[p]), 6)}
              for g, p, q in zip(gold, pred, probs, strict=True)]
    results.update({f'{k}{suffix}': v for k, v in scores.items()})
    records[s.name] = [{'text': e.texts[0] if len(e.texts) == 1 else list(e.texts), **row}
                       for e, row in zip(examples, rows, strict=True)]
  return results, records


def _read(config, source: str, local: bool, cols) -> tuple[list, list[str] | None]:
  d = config.data
  if local:
    # Without data.text_columns, a GLUE experiment's local files are read by GLUE's names.
    glue_task = d.tfds.rpartition('/')[2] if not cols else ''
    glue = tfds_examples.GLUE_TEXT.get(glue_task, ())
    return file_readers.read_classification(source, cols or list(glue), d.label_column, d.header,
                                          d.format, defaulted=bool(glue),
                                          glue_task=glue_task), None
  return tfds_examples.read_glue(d.tfds, source, d.tfds_data_dir, cols or None)


def _labels(config, examples, names: list[str] | None, regression: bool) -> np.ndarray:
  values, wheres = [e.label for e in examples], [e.where for e in examples]
  if regression:
    bad = next((i for i, v in enumerate(values) if not _is_float(v)), None)
    if bad is not None:
      raise DataError(f'{wheres[bad]}: label {values[bad]!r} is not a finite number '
                      '(data.num_labels=1 is regression)')
    return np.asarray([float(v) for v in values], np.float32)
  return np.asarray(task_inputs.label_ids(values, wheres, names), np.int32)


def _is_float(v) -> bool:
  """A finite number: 'nan' or 'inf' as a regression target would poison the loss."""
  try:
    return math.isfinite(float(v)) and not isinstance(v, bool)
  except (TypeError, ValueError, OverflowError):
    return False


def datasets(config, workdir: str, process_index: int = 0, process_count: int = 1):
  """Reads, labels, tokenizes and encodes the train and eval sets (see FinetuningData)."""
  d = config.data
  packing.packing_mode(config)  # a bad value fails before anything is written
  local, train_source, eval_sources = task_inputs.eval_sources(config)
  cols = file_readers.split_list(d.text_columns)
  train, source_names = _read(config, train_source, local, cols)
  # Built (and a single-sentence set refused) before anything is written to the workdir; added
  # after the tokenizer, which learns from the texts as read.
  swapped = swapped_pairs(train) if d.get('swap_pairs') else []
  regression = d.num_labels == 1 or (not local and source_names is None)
  names = None if regression else (task_inputs.given_names(config) or source_names
                                   or task_inputs.infer_names([e.label for e in train]))
  evals = [(task_inputs.eval_set_name(i, s), _read(config, s, local, cols)[0])
           for i, s in enumerate(eval_sources)]
  tokenizer = finetuning_data.finetuning_tokenizer(
      config, workdir, [t for e in train for t in e.texts])

  def encode(examples) -> dict:
    arrays = finetuning_data.encode_texts(tokenizer, [e.texts for e in examples],
                                          int(d.max_seq_length))
    arrays['label'] = _labels(config, examples, names, regression)
    arrays['weight'] = np.ones(len(examples), np.float32)
    return arrays

  eval_sets = [finetuning_data.EvalSet(name, ex, encode(ex)) for name, ex in evals]
  arrays, info = encode(train + swapped), {'labels': names}
  if regression and d.get('standardize_targets'):
    info['target_scale'] = standardisation(arrays['label'])
  return finetuning_data.FinetuningData(config, tokenizer, arrays, eval_sets, WEIGHTS,
                                        process_index, process_count, info)


def swapped_pairs(examples: list) -> list:
  """Each pair reversed (`data.swap_pairs`), for tasks whose label ignores the order; a
  single-sentence set has no order to swap, so asking for it is an error, not a no-op."""
  single = next((e for e in examples if len(e.texts) != 2), None)
  if single is not None:
    raise DataError(f'{single.where}: data.swap_pairs=true needs sentence pairs, and this '
                    f'example has {len(single.texts)} text(s)')
  return [dataclasses.replace(e, texts=e.texts[::-1], where=f'{e.where} (swapped)')
          for e in examples]


def standardisation(targets: np.ndarray) -> dict:
  """The training targets' mean and standard deviation (1 where they are all equal), as the
  config fields that record them."""
  values = np.asarray(targets, np.float64)
  std = float(values.std()) if len(values) else 0.0
  return {'data.target_mean': float(values.mean()) if len(values) else 0.0,
          'data.target_std': std if std > 0 else 1.0}


def resolved_fields(config, data) -> dict:
  """Vocabulary size, and the label set (num_labels 1: regression)."""
  fields = task_inputs.vocab_fields(config, data.tokenizer)
  names = data.info['labels']
  if names is None:
    return {**fields, 'data.num_labels': 1, **data.info.get('target_scale', {})}
  return {**fields, **task_inputs.label_fields(config, names)}


write_predictions = None  # the evaluator's JSONL predictions are all there is


prepare_data = None  # local files and TFDS splits need no preparation


couples_examples = False  # each example's loss is its own
