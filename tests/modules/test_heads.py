"""Heads: shapes, weight tying, and parameter counts against Hugging Face's BERT."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from encoder.config_schema import BERT_SIZES
from encoder.describe import count, parameter_shapes
from encoder.modules.config import ModelConfig
from encoder.modules.heads import (
  ClassificationHead,
  MlmHead,
  NspHead,
  SpanHead,
  TokenClassificationHead,
)
from encoder.tasks.pretraining import BertForPretraining
from tests.modules.helpers import random_inputs, tiny_config


def test_head_shapes():
  cfg = tiny_config()
  seq = jnp.ones((3, 8, cfg.hidden_size))
  pooled = jnp.ones((3, cfg.hidden_size))
  table = jnp.ones((cfg.vocab_size, cfg.hidden_size))
  key = jax.random.key(0)

  def run(head, *args):
    return head.apply(head.init(key, *args), *args)

  assert run(MlmHead(cfg), seq, table).shape == (3, 8, cfg.vocab_size)
  assert run(MlmHead(cfg), seq, table, jnp.zeros((3, 5), jnp.int32)).shape == (3, 5, 97)
  assert run(NspHead(cfg), pooled).shape == (3, 2)
  assert run(ClassificationHead(cfg, 3), pooled).shape == (3, 3)
  assert run(ClassificationHead(cfg, 1), pooled).shape == (3, 1)
  assert run(TokenClassificationHead(cfg, 9), seq).shape == (3, 8, 9)
  start, end = run(SpanHead(cfg), seq)
  assert start.shape == end.shape == (3, 8)
  assert start.dtype == jnp.float32


def pretraining_batch(cfg, batch=2, seq=8):
  ids, segments, mask = random_inputs(batch, seq, cfg.vocab_size)
  return {'input_ids': ids, 'segment_ids': segments, 'input_mask': mask,
          'masked_positions': jnp.array([[1, 3], [2, 5]]),
          'masked_ids': jnp.array([[3, 3], [3, 3]]),  # id 3 never occurs in the inputs (>= 5)
          'masked_weights': jnp.ones((2, 2)), 'nsp_label': jnp.array([0, 1])}


def test_mlm_decodes_through_the_word_embeddings():
  cfg = tiny_config(dropout_rate=0.0, attention_dropout_rate=0.0)
  model = BertForPretraining(cfg)
  batch = pretraining_batch(cfg)
  params = nn.unbox(model.init(jax.random.key(0), batch))['params']
  assert set(params['mlm']) == {'transform', 'transform_norm', 'output_bias'}

  def mlm_loss(p):
    logits = model.apply({'params': p}, batch)['mlm_logits']
    assert logits.shape == (2, 2, cfg.vocab_size)
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch['masked_ids']).mean()

  grads = jax.grad(mlm_loss)(params)
  table_grad = np.asarray(grads['encoder']['embeddings']['word_embeddings']['embedding'])
  # Row 3 is no input token, so its gradient can only come through the tied decoder.
  assert np.abs(table_grad[3]).max() > 1e-4
  assert np.abs(table_grad[4]).max() > 0  # every row gets the softmax's push-down


def bert_parameter_count(layers, hidden, heads, vocab, positions=512, segments=2):
  """BertForPreTraining's parameters written out from the architecture.

  Embeddings (word, position, segment, LayerNorm); per layer Q/K/V/output projections with
  bias, two LayerNorms, the two MLP denses (intermediate 4 x hidden); pooler; MLM transform,
  its LayerNorm and the output bias (decoder tied); NSP dense.
  """
  del heads  # heads split the hidden size; they add no parameters
  h, i = hidden, 4 * hidden
  embeddings = (vocab + positions + segments) * h + 2 * h
  layer = 4 * (h * h + h) + 2 * (2 * h) + (h * i + i) + (i * h + h)
  pooler = h * h + h
  mlm = h * h + h + 2 * h + vocab
  nsp = 2 * h + 2
  return embeddings + layers * layer + pooler + mlm + nsp


@pytest.mark.parametrize('size, hf_count', [
    # Golden counts of Hugging Face transformers' BertForPreTraining (an independent
    # implementation): sum(p.numel() for p in model.parameters()) with vocab 30522.
    ('base', 110_106_428), ('large', 336_226_108), ('tiny', 4_433_468)])
def test_parameter_count_matches_the_architecture_and_hugging_face(size, hf_count):
  layers, hidden, heads = BERT_SIZES[size]
  cfg = ModelConfig(vocab_size=30522, hidden_size=hidden, num_layers=layers, num_heads=heads,
                    intermediate_size=4 * hidden)
  batch = {k: jnp.zeros((1, 8) if k != 'nsp_label' else (1,), jnp.int32)
           for k in ('input_ids', 'segment_ids', 'input_mask', 'masked_positions', 'masked_ids',
                     'nsp_label')}
  batch['masked_weights'] = jnp.zeros((1, 8))
  n = count(parameter_shapes(BertForPretraining(cfg), batch))
  assert n == bert_parameter_count(layers, hidden, heads, 30522)
  assert n == hf_count


def test_nsp_weight_scales_the_nsp_gradient_and_leaves_the_loss_alone():
  from encoder.tasks import pretraining
  cfg = tiny_config(dropout_rate=0.0, attention_dropout_rate=0.0)
  batch = pretraining_batch(cfg)
  params = nn.unbox(BertForPretraining(cfg).init(jax.random.key(0), batch))['params']

  def nsp_grads(weight):
    model = BertForPretraining(cfg, nsp_weight=weight)

    def loss(p):
      out = model.apply({'params': p}, batch)
      return pretraining.loss_and_metrics(out, batch)[0], out['nsp_logits']
    (value, logits), grads = jax.value_and_grad(loss, has_aux=True)(params)
    return value, logits, grads

  value, logits, grads = nsp_grads(1.0)
  value_w, logits_w, grads_w = nsp_grads(0.25)
  assert float(value_w) == float(value)
  np.testing.assert_array_equal(logits_w, logits)
  # The NSP head sees the NSP term alone: its gradient shrinks by the weight ...
  np.testing.assert_allclose(grads_w['nsp_head']['dense']['kernel'],
                             0.25 * grads['nsp_head']['dense']['kernel'], rtol=1e-5)
  # ... and the MLM head none of it, so its gradient does not move.
  np.testing.assert_allclose(grads_w['mlm']['output_bias'], grads['mlm']['output_bias'],
                             rtol=1e-6)
