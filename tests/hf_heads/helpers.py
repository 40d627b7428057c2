"""Tiny fine-tuned workdirs of both families for the head conversion tests: our task models
initialised at random, with noise on every parameter (zero biases and unit norm scales would
hide a wrong mapping), written as a run's workdir, with no training and no torch."""

from __future__ import annotations

import os

import flax.linen as nn
import jax
import numpy as np

from encoder import config_schema, convert
from encoder.hf.family import read_json
from encoder.modules.config import model_config
from encoder.modules.task_models import (
  BertForClassification,
  BertForQuestionAnswering,
  BertForTagging,
)
from tests.golden.smoke import GOLDEN

DIRS = {'bert': os.path.join(GOLDEN, 'tiny_bert'),
        'modern': os.path.join(GOLDEN, 'tiny_modernbert')}
# kind -> (task, label names: None for regression and QA, head outputs)
KINDS = {'classification': ('classification', ['negative', 'neutral', 'positive'], 3),
         'regression': ('classification', None, 1),
         'tagging': ('tagging', ['O', 'B-PER', 'I-PER', 'B-LOC', 'I-LOC'], 5),
         'span_qa': ('span_qa', None, 2)}
TEXTS = ['The bank approved the loan quickly.', ('Is Paris the capital?', 'Paris is the '
         'capital of France.'), 'A dog ran through the city at night while the cat sat.']
WORDS = [['Paris', 'is', 'the', 'capital', 'of', 'France', '.'], ['A', 'dog', 'ran', 'home']]


def fields(arch: str, **changes) -> dict:
  """Our model fields of the tiny Hugging Face model of `arch` ('bert' | 'modern')."""
  return {**convert.model_fields(read_json(os.path.join(DIRS[arch], 'config.json'))), **changes}


def task_module(task: str, model_fields: dict, num_labels: int):
  cfg = model_config(model_fields)
  if task == 'span_qa':
    return BertForQuestionAnswering(cfg)
  return (BertForClassification if task == 'classification' else BertForTagging)(cfg, num_labels)


def random_params(task: str, model_fields: dict, num_labels: int, seed: int = 0) -> dict:
  """The task model's parameter tree as the trainer makes it, every leaf perturbed."""
  ids = np.zeros((1, 4), np.int32)
  batch = {'input_ids': ids, 'segment_ids': ids, 'input_mask': ids + 1}
  params = nn.unbox(task_module(task, model_fields, num_labels).init(
      jax.random.key(seed), batch))['params']
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda x: (np.asarray(x) + 0.1 * rng.standard_normal(x.shape)).astype(
      np.float32), params)


def fine_tuned_workdir(path: str, arch: str, kind: str, **model_changes) -> str:
  """A workdir of a fine-tuned `kind` run (KINDS) of `arch`'s tiny model, as encoder.load and
  --to-hf read it: the schema's fine-tuning config with the labels, the tokenizer, params."""
  task, names, num_labels = KINDS[kind]
  model = fields(arch, **model_changes)
  config = config_schema.finetuning_config('test', task)
  if task == 'span_qa':
    config = config_schema.span_qa(config)
    config.data.update({'max_seq_length': 64, 'doc_stride': 24, 'max_query_length': 12})
  config.init_from = ''
  config.model.update(model)
  config.data.labels = ','.join(names) if names else None
  config.data.num_labels = num_labels if task != 'span_qa' else None
  config.data.max_seq_length = min(config.data.max_seq_length, model['max_position_embeddings'])
  config.data.tokenizer = os.path.join(path, 'tokenizer')
  family = convert.family_of(read_json(os.path.join(DIRS[arch], 'config.json')))
  tokenizer = family.read_tokenizer(DIRS[arch])
  config.data.vocab_size = tokenizer.vocab_size
  convert.write_workdir(path, config, tokenizer, random_params(task, model, num_labels))
  return path
