"""Extractive question answering (SQuAD v1.1 and v2.0), as BERT's run_squad.

`[CLS] question [SEP] context window [SEP]` -> encoder -> a start and an end logit per token
(padding masked out). Loss: the mean of the start and end cross-entropies against the answer's
first and last token ([CLS] when the window does not hold the answer, or there is none). Eval
decodes each question's n-best spans over all its windows (`span_decoding`) and scores them by
the official scripts' rules (`squad_metrics`): `exact_match`, `f1` as fractions; v2.0 adds
`has_ans_*`, `no_ans_*` and `best_*` with the null_score_diff thresholds reaching them.
Predictions: `predictions/<set>_step<N>.jsonl` (one record per question), plus the official
`{id: answer}` file `<set>_step<N>_official.json` and, for v2.0, `<set>_step<N>_null_odds.json`
(the null score differences, the official script's --na-prob-file).
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import optax

from encoder.data import cache
from encoder.data.finetune import finetuning_data, squad_examples, squad_features
from encoder.errors import DataError
from encoder.modules.config import model_config
from encoder.modules.task_models import MASKED_LOGIT, BertForQuestionAnswering
from encoder.tasks import span_decoding, squad_metrics, task_inputs

WEIGHTS = ('weight',)


def build_model(config) -> BertForQuestionAnswering:
  return BertForQuestionAnswering(model_config(config.model, config.data.vocab_size))


def dummy_batch(config, batch_size: int = 1) -> dict:
  return {**task_inputs.dummy_inputs(config, batch_size),
          'start_positions': jnp.zeros((batch_size,), jnp.int32),
          'end_positions': jnp.zeros((batch_size,), jnp.int32),
          'weight': jnp.ones((batch_size,), jnp.float32)}


def loss_denominators(batch: dict) -> dict:
  return {'windows': batch['weight'].astype(jnp.float32).sum()}


def loss_and_metrics(outputs: dict, batch: dict,
                     denominators: dict | None = None) -> tuple[jax.Array, dict]:
  """(start cross-entropy + end cross-entropy) / 2, averaged over weighted windows."""
  if denominators is None:
    denominators = loss_denominators(batch)
  weight = batch['weight'].astype(jnp.float32)
  sums = {'count': weight.sum()}
  total = jnp.zeros_like(weight)
  for side in ('start', 'end'):
    logits, labels = outputs[f'{side}_logits'], batch[f'{side}_positions']
    total += optax.softmax_cross_entropy_with_integer_labels(logits, labels) / 2
    sums[f'{side}_correct'] = ((logits.argmax(-1) == labels) * weight).sum()
  sums['loss'] = (total * weight).sum()
  return sums['loss'] / jnp.maximum(denominators['windows'], 1.0), sums


def reduce_metrics(sums: dict) -> dict:
  count = max(float(sums['count']), 1.0)
  return {'loss': float(sums['loss']) / count,
          'start_accuracy': float(sums['start_correct']) / count,
          'end_accuracy': float(sums['end_correct']) / count}


def predict(outputs: dict, batch: dict) -> dict:
  return {'start_logits': outputs['start_logits'], 'end_logits': outputs['end_logits']}


def evaluate(data, predictions: dict) -> tuple[dict, dict]:
  """EM/F1 of every eval set (sets after the first suffix theirs) and one record per question:
  id, question, gold answers, prediction with its character span and score."""
  options = data.info['decode']
  version_2 = options['version_2']
  results, records = {}, {}
  for s, offset, n in task_inputs.eval_slices(data, len(predictions['start_logits'])):
    start = predictions['start_logits'][offset:offset + n]
    end = predictions['end_logits'][offset:offset + n]
    preds = span_decoding.decode_all(s.examples, s.extra, start, end, options)
    pairs = [(e, p) for e, p in zip(s.examples, preds, strict=True) if p is not None]
    if not pairs:
      break
    golds = {e.qid: [a[0] for a in e.answers] for e, _ in pairs}
    answers = {e.qid: p.text for e, p in pairs}
    if version_2:
      odds = {e.qid: p.null_score_diff for e, p in pairs}
      spans = {e.qid: p.best_span.text if p.best_span else '' for e, p in pairs}
      scores = squad_metrics.squad_v2(golds, answers, odds, spans)
    else:
      scores = squad_metrics.squad_v1(golds, answers)
    suffix = task_inputs.metric_suffix(s.name)
    results.update({f'{k}{suffix}': v for k, v in scores.items()})
    records[s.name] = [_record(e, p, golds[e.qid], version_2) for e, p in pairs]
  return results, records


def _record(example, p, gold: list[str], version_2: bool) -> dict:
  em, f1 = squad_metrics.question_scores(p.text, gold, version_2)
  row = {'id': example.qid, 'question': example.question, 'gold': gold, 'prediction': p.text,
         'start': p.start, 'end': p.end, 'score': round(p.score, 4),
         'probability': round(p.probability, 6), 'exact_match': em, 'f1': round(f1, 6)}
  if version_2:
    row['null_score_diff'] = round(p.null_score_diff, 4)
  return row


def write_predictions(directory: str, step: int, records: dict) -> None:
  """The official scripts' inputs next to the records: {id: answer} (and {id: null odds})."""
  for name, rows in records.items():
    files = {'official': {r['id']: r['prediction'] for r in rows}}
    if rows and 'null_score_diff' in rows[0]:
      files['null_odds'] = {r['id']: r['null_score_diff'] for r in rows}
    for kind, content in files.items():
      cache.write_bytes(os.path.join(directory, f'{name}_step{step}_{kind}.json'),
                        json.dumps(content, ensure_ascii=False).encode('utf-8'))


def _read(config, source: str, local: bool) -> list:
  d = config.data
  if local:
    examples = squad_examples.read_squad_json(source)
  else:
    examples = squad_examples.read_squad_tfds(d.tfds, source, d.tfds_data_dir)
  if not d.version_2_with_negative:
    bad = next((e for e in examples if not e.answers), None)
    if bad is not None:
      raise DataError(f'{bad.where}: no answer, but SQuAD 1.1 wants one per question; set '
                      'data.version_2_with_negative=true for SQuAD 2.0 data')
  return examples


def datasets(config, workdir: str, process_index: int = 0, process_count: int = 1):
  """Windows of the train questions (with labels) and of every eval set (with their examples)."""
  d = config.data  # its packing and mismatch policy were checked by resolve_config
  local, train_source, eval_sources = task_inputs.eval_sources(config)
  train = _read(config, train_source, local)
  evals = [(task_inputs.eval_set_name(i, s), _read(config, s, local))
           for i, s in enumerate(eval_sources)]
  texts = list(dict.fromkeys(e.context for e in train)) + [e.question for e in train]
  tokenizer = finetuning_data.finetuning_tokenizer(config, workdir, texts)
  shape = (int(d.max_seq_length), int(d.doc_stride), int(d.max_query_length))
  train_features = squad_features.build_features(tokenizer, train, *shape, labels=True,
                                                 mismatch=d.answer_start_mismatch)
  if not train_features.windows:
    raise DataError(f'no training question is left in {train_source}')
  eval_sets = []
  for name, examples in evals:
    features = squad_features.build_features(tokenizer, examples, *shape)
    eval_sets.append(finetuning_data.EvalSet(name, examples, features.arrays, features))
  data = finetuning_data.FinetuningData(config, tokenizer, train_features.arrays, eval_sets,
                                        WEIGHTS, process_index, process_count,
                                        {'decode': span_decoding.decode_options(d)},
                                        token_predictions=dict.fromkeys(
                                            ('start_logits', 'end_logits'),
                                            MASKED_LOGIT))
  data.stats['train'] = train_features.stats
  for s in eval_sets:
    data.stats[s.name] = s.extra.stats
  return data


def resolved_fields(config, data) -> dict:
  """Vocabulary size (the answer positions need no label set)."""
  return task_inputs.vocab_fields(config, data.tokenizer)


prepare_data = None  # local files and TFDS splits need no preparation


couples_examples = False  # each example's loss is its own
