"""Token classification (NER): a tag for every word, entity-level F1 as conlleval.

Words are split into sub-tokens with the alignment kept; a word's tag sits on its first
sub-token, and the other sub-tokens (and [CLS], [SEP], padding) carry weight 0, so they count in
neither the loss nor decoding. Tags are read as IOB2 or IOB1 and normalised to IOB2 (the same
entities by conlleval's reading), so the model always learns one scheme. Eval metrics:
entity-level `precision`, `recall`, `f1` (micro, conlleval rules) and `f1_<TYPE>` per type.
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import optax

from encoder.data.finetune import file_readers, finetuning_data, packing, tfds_examples
from encoder.modules.config import model_config
from encoder.modules.task_models import BertForTagging
from encoder.tasks import conlleval, task_inputs

log = logging.getLogger('encoder')
WEIGHTS = ('label_weights',)


def num_labels(config) -> int:
  """data.num_labels, else the size of data.labels, else 9 (CoNLL-2003's, before reading)."""
  names = task_inputs.given_names(config)
  return config.data.num_labels or (len(names) if names else 9)


def build_model(config) -> BertForTagging:
  return BertForTagging(model_config(config.model, config.data.vocab_size), num_labels(config))


def dummy_batch(config, batch_size: int = 1) -> dict:
  shape = (batch_size, config.data.max_seq_length)
  return {**task_inputs.dummy_inputs(config, batch_size), 'labels': jnp.zeros(shape, jnp.int32),
          'label_weights': jnp.zeros(shape, jnp.float32)}


def loss_denominators(batch: dict) -> dict:
  return {'tokens': batch['label_weights'].astype(jnp.float32).sum()}


def loss_and_metrics(outputs: dict, batch: dict,
                     denominators: dict | None = None) -> tuple[jax.Array, dict]:
  """Mean cross-entropy over words (their first sub-tokens), plus word accuracy sums."""
  if denominators is None:
    denominators = loss_denominators(batch)
  weights = batch['label_weights'].astype(jnp.float32)
  xent = optax.softmax_cross_entropy_with_integer_labels(outputs['logits'], batch['labels'])
  correct = (outputs['logits'].argmax(-1) == batch['labels']) * weights
  sums = {'loss': (xent * weights).sum(), 'correct': correct.sum(), 'count': weights.sum()}
  return sums['loss'] / jnp.maximum(denominators['tokens'], 1.0), sums


def reduce_metrics(sums: dict) -> dict:
  count = max(float(sums['count']), 1.0)
  return {'loss': float(sums['loss']) / count, 'accuracy': float(sums['correct']) / count}


def predict(outputs: dict, batch: dict) -> dict:
  return {'tags': outputs['logits'].argmax(-1).astype(jnp.int32)}


def word_tags(tag_ids: np.ndarray, positions: np.ndarray, num_words: int, names: list[str]
              ) -> list[str]:
  """Each word's predicted tag, read at its first sub-token; words cut by truncation get 'O'."""
  tags = [names[int(t)] for t in tag_ids[positions]]
  return tags + ['O'] * (num_words - len(tags))


def evaluate(data, predictions: dict) -> tuple[dict, dict]:
  """Entity scores of every eval set against the full gold tags, and records with words, gold
  and predicted tags (IOB2) per sentence."""
  names = data.info['labels']
  results, records = {}, {}
  for s, offset, n in task_inputs.eval_slices(data, len(predictions['tags'])):
    examples = s.examples[:n]
    pred = [word_tags(row, pos, len(e.words), names) for row, pos, e in
            zip(predictions['tags'][offset:offset + n], s.extra[:n], examples, strict=True)]
    gold = [e.tags for e in examples]
    scores = conlleval.entity_scores(gold, pred)
    suffix = task_inputs.metric_suffix(s.name)
    results.update({f'{k}{suffix}': scores[k] for k in ('precision', 'recall', 'f1')})
    results.update({f'f1_{kind}{suffix}': v['f1'] for kind, v in scores['per_type'].items()})
    records[s.name] = [{'text': ' '.join(e.words), 'words': e.words, 'gold': g, 'prediction': p}
                       for e, g, p in zip(examples, gold, pred, strict=True)]
  return results, records


def tag_names(sentences, given: list[str] | None) -> list[str]:
  """The tag set: data.labels if given, else 'O' then B-/I- of every type in the train set."""
  if given:
    return given
  kinds = sorted({t[2:] for s in sentences for t in s.tags if t != 'O'})
  return ['O'] + [f'{p}-{k}' for k in kinds for p in ('B', 'I')]


def _read(config, source: str, local: bool, train: bool = False) -> list:
  d = config.data
  if local:
    column = d.tag_column
    if column is None:  # found from the file: the column of IOB tags
      column = file_readers.find_tag_column(source, int(d.token_column))
      log.info('%s: tags from column %d (set data.tag_column to choose)', source, column)
    sentences = file_readers.read_conll(source, int(d.token_column), int(column))
    file_readers.check_iob_tags(source, sentences, int(column), train)
  else:
    sentences = tfds_examples.read_tagging(d.tfds, source, d.tfds_data_dir)
  for s in sentences:
    s.tags = conlleval.to_iob2(s.tags)
  return sentences


def datasets(config, workdir: str, process_index: int = 0, process_count: int = 1):
  """Reads, tags and encodes the sentences; packed rows (`data.packing=examples`) need nothing
  of their own here, as labels and weights are per token."""
  d = config.data
  packing.packing_mode(config)  # a bad value fails before anything is written
  local, train_source, eval_sources = task_inputs.eval_sources(config)
  train = _read(config, train_source, local, train=True)
  names = tag_names(train, task_inputs.given_names(config))
  evals = [(task_inputs.eval_set_name(i, s), _read(config, s, local))
           for i, s in enumerate(eval_sources)]
  tokenizer = finetuning_data.finetuning_tokenizer(config, workdir,
                                                   [' '.join(s.words) for s in train])

  def encode(sentences):
    arrays, positions = finetuning_data.encode_words(tokenizer, [s.words for s in sentences],
                                                     int(d.max_seq_length))
    labels = np.zeros_like(arrays['input_ids'])
    weights = np.zeros(labels.shape, np.float32)
    for i, (s, pos) in enumerate(zip(sentences, positions, strict=True)):
      ids = task_inputs.label_ids(s.tags, [s.where] * len(s.tags), names)
      labels[i, pos], weights[i, pos] = ids[:len(pos)], 1.0
    _report_cut_words(sentences, positions, int(d.max_seq_length))
    return {**arrays, 'labels': labels, 'label_weights': weights}, positions

  eval_sets = []
  for name, sentences in evals:
    arrays, positions = encode(sentences)
    eval_sets.append(finetuning_data.EvalSet(name, sentences, arrays, positions))
  return finetuning_data.FinetuningData(config, tokenizer, encode(train)[0], eval_sets, WEIGHTS,
                                        process_index, process_count, {'labels': names},
                                        token_predictions={'tags': 0})


def _report_cut_words(sentences, positions, max_len: int) -> None:
  """Says how many labelled words truncation leaves out (not trained on; 'O' in eval, so they
  still count against recall): labels are never dropped silently."""
  cut = [(s, len(s.words) - len(pos)) for s, pos in zip(sentences, positions, strict=True)
         if len(pos) < len(s.words)]
  if cut:
    total = sum(len(s.words) for s in sentences)
    log.warning(
        'warning: %d of %d words (in %d sentences, first at %s) lie past data.max_seq_length=%d '
        "sub-tokens: they are not trained on, and are predicted 'O' in eval",
        sum(n for _, n in cut), total, len(cut), cut[0][0].where, max_len)


def resolved_fields(config, data) -> dict:
  """Vocabulary size, and the tag set."""
  return {**task_inputs.vocab_fields(config, data.tokenizer),
          **task_inputs.label_fields(config, data.info['labels'], 'tags')}


write_predictions = None  # the evaluator's JSONL predictions are all there is


prepare_data = None  # local files and TFDS splits need no preparation


couples_examples = False  # each example's loss is its own
