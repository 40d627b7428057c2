"""A numpy float64 forward pass of Hugging Face's BertForPreTraining, read from its state dict.

Written from HF's modelling code, not ours, so checking an exported model against it (torch-free)
tests our export's names, layouts and config; the golden logits from torch check this file.
"""

from __future__ import annotations

import math

import numpy as np


def _gelu(x: np.ndarray, act: str) -> np.ndarray:
  if act == 'gelu':
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * w + b


def forward(tensors: dict, config: dict, input_ids, token_type_ids, attention_mask
            ) -> tuple[np.ndarray, np.ndarray]:
  """(prediction_logits [b, s, vocab], seq_relationship_logits [b, 2])."""
  t = {k: np.asarray(v, np.float64) for k, v in tensors.items()}
  eps, act = config['layer_norm_eps'], config['hidden_act']
  heads = config['num_attention_heads']

  def linear(x, name):
    return x @ t[name + '.weight'].T + t[name + '.bias']

  def norm(x, name):
    return _norm(x, t[name + '.weight'], t[name + '.bias'], eps)

  seq = input_ids.shape[1]
  x = (t['bert.embeddings.word_embeddings.weight'][input_ids]
       + t['bert.embeddings.position_embeddings.weight'][:seq][None]
       + t['bert.embeddings.token_type_embeddings.weight'][token_type_ids])
  x = norm(x, 'bert.embeddings.LayerNorm')
  bias = np.where(attention_mask[:, None, None, :] > 0, 0.0, -1e30)
  for i in range(config['num_hidden_layers']):
    p = f'bert.encoder.layer.{i}.'

    def split(h):
      return h.reshape(h.shape[0], seq, heads, -1).transpose(0, 2, 1, 3)

    q, k, v = (split(linear(x, p + f'attention.self.{n}')) for n in ('query', 'key', 'value'))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]) + bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
    x = norm(x + linear(context, p + 'attention.output.dense'), p + 'attention.output.LayerNorm')
    h = _gelu(linear(x, p + 'intermediate.dense'), act)
    x = norm(x + linear(h, p + 'output.dense'), p + 'output.LayerNorm')
  h = norm(_gelu(linear(x, 'cls.predictions.transform.dense'), act),
           'cls.predictions.transform.LayerNorm')
  decoder = t.get('cls.predictions.decoder.weight', t['bert.embeddings.word_embeddings.weight'])
  mlm = h @ decoder.T + t['cls.predictions.bias']
  pooled = np.tanh(linear(x[:, 0], 'bert.pooler.dense'))
  return mlm, linear(pooled, 'cls.seq_relationship')
