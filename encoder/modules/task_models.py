"""The fine-tuning models: the encoder with one task head each, as Flax modules.

The tasks (`encoder.tasks.classification`, `tagging`, `span_qa`) train these, and
`encoder.load(...).classify/tag/answer` runs the same modules on the trained parameters, so a
head, its pooling and its masking are defined once; they live here, beside the encoder, so that
inference imports no training code (optax, the data readers). Parameter names come from the
attribute names below (`encoder`, `classifier`, `tagger`, `span`): they are the checkpoint's
layout.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from encoder.modules.config import ModelConfig
from encoder.modules.heads import ClassificationHead, SpanHead, TokenClassificationHead
from encoder.modules.pooling import pool
from encoder.modules.transformer import Encoder

PACKING_FIELDS = ('input_segmentation', 'input_positions')
MASKED_LOGIT = -1e9  # the span logit of padding: never a start or an end


def encoder_inputs(batch: dict) -> dict:
  """The encoder's arguments from a batch: BERT's three fields, and a packed batch's example
  ids and restarting positions when it has them."""
  inputs = {k: batch[k] for k in ('input_ids', 'segment_ids', 'input_mask')}
  inputs.update({k: batch[k] for k in PACKING_FIELDS if k in batch})
  return inputs


def target_scale(data) -> dict:
  """A regression head's output scale from a run's `data` section (a dict or ConfigDict):
  the training targets' mean and standard deviation when `data.standardize_targets` recorded
  them, else 0 and 1 (the head predicts the target itself)."""
  mean, std = data.get('target_mean'), data.get('target_std')
  return {'target_mean': float(mean or 0.0), 'target_std': float(std or 1.0)}


class BertForClassification(nn.Module):
  """The pooled output (per `pooling` and `pooler`; a packed row pools each example at its
  `cls_positions`) -> the classification head: {'logits': [batch, num_labels]}, or
  [rows, slots, num_labels] for packed rows.

  A regression head (num_labels 1) outputs `target_mean + target_std * head`, in the targets'
  own units: with standardised targets the head learns a unit-scale quantity that starts at
  the mean, and inference, evaluation and an export see plain scores."""
  config: ModelConfig
  num_labels: int
  target_mean: float = 0.0
  target_std: float = 1.0

  def setup(self):
    self.encoder = Encoder(self.config)
    self.classifier = ClassificationHead(self.config, self.num_labels)

  def __call__(self, batch: dict, *, deterministic: bool = True) -> dict:
    out = self.encoder(**encoder_inputs(batch), pool_positions=batch.get('cls_positions'),
                       deterministic=deterministic)
    logits = self.classifier(out.pooled_output, deterministic=deterministic)
    if self.num_labels == 1:
      logits = self.target_mean + self.target_std * logits
    return {'logits': logits}


class BertForTagging(nn.Module):
  """Every token's output -> the token head: {'logits': [batch, seq, num_labels]}."""
  config: ModelConfig
  num_labels: int

  def setup(self):
    self.encoder = Encoder(self.config)
    self.tagger = TokenClassificationHead(self.config, self.num_labels)

  def __call__(self, batch: dict, *, deterministic: bool = True) -> dict:
    out = self.encoder(**encoder_inputs(batch), deterministic=deterministic)
    return {'logits': self.tagger(out.sequence_output, deterministic=deterministic)}


class BertForQuestionAnswering(nn.Module):
  """Every token's output -> the span head: {'start_logits', 'end_logits'}, [batch, seq] each,
  MASKED_LOGIT at padding."""
  config: ModelConfig

  def setup(self):
    self.encoder = Encoder(self.config)
    self.span = SpanHead(self.config)

  def __call__(self, batch: dict, *, deterministic: bool = True) -> dict:
    out = self.encoder(**encoder_inputs(batch), deterministic=deterministic)
    start, end = self.span(out.sequence_output)
    real = batch['input_mask'] > 0
    return {'start_logits': jnp.where(real, start, MASKED_LOGIT),
            'end_logits': jnp.where(real, end, MASKED_LOGIT)}


class BertForEmbedding(nn.Module):
  """A bi-encoder: each role's texts (`anchor`, `positive`, and `negative` [batch, k, seq])
  through the same encoder, pooled by `pooling` over sequence_output (not the pooled output,
  whose tanh layer served NSP): {role: [batch, hidden]} ([batch, k, hidden] for negatives).
  Unnormalised: the loss normalises (and truncates, for Matryoshka dimensions)."""
  config: ModelConfig
  pooling: str = 'mean'

  def setup(self):
    self.encoder = Encoder(self.config)

  def embed(self, ids: jnp.ndarray, mask: jnp.ndarray, deterministic: bool) -> jnp.ndarray:
    lead = ids.shape[:-1]
    ids, mask = ids.reshape(-1, ids.shape[-1]), mask.reshape(-1, mask.shape[-1])
    # An absent text (a missing hard negative: no tokens) attends to its first position, so
    # its vector is finite (the loss ignores it; a NaN would still poison the gradients).
    mask = jnp.asarray(mask).at[:, 0].set(1)
    out = self.encoder(input_ids=ids, segment_ids=jnp.zeros_like(ids), input_mask=mask,
                       deterministic=deterministic)
    pooled = pool(out.sequence_output, mask, self.pooling)
    return pooled.reshape(*lead, pooled.shape[-1])

  def __call__(self, batch: dict, *, deterministic: bool = True) -> dict:
    out = {}
    for role in ('anchor', 'positive', 'negative'):
      ids = batch.get(f'{role}_ids')
      if ids is not None and ids.size:
        out[role] = self.embed(ids, batch[f'{role}_mask'], deterministic)
    return out
