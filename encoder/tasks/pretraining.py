"""MLM + NSP pretraining: the model, its loss and the metric sums the trainer reduces."""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from encoder.data.pretrain import masking, pretraining_data
from encoder.modules.config import ModelConfig, model_config
from encoder.modules.heads import MlmHead, NspHead
from encoder.modules.task_models import encoder_inputs
from encoder.modules.transformer import Encoder
from encoder.tasks.task_inputs import vocab_fields


class BertForPretraining(nn.Module):
  """Encoder + tied MLM head (+ NSP head unless `nsp=False`).

  `nsp_weight` scales the NSP term's gradient, as a loss weight would, while the NSP logits,
  loss and metrics stay as they are (the reported `loss` is still `mlm_loss + nsp_loss`, so runs
  at different weights compare).
  """
  config: ModelConfig
  nsp: bool = True
  nsp_weight: float = 1.0

  def setup(self):
    self.encoder = Encoder(self.config)
    self.mlm = MlmHead(self.config)
    if self.nsp:
      self.nsp_head = NspHead(self.config)

  def __call__(self, batch: dict, *, deterministic: bool = True) -> dict:
    out = self.encoder(**encoder_inputs(batch), deterministic=deterministic)
    result = {'mlm_logits': self.mlm(out.sequence_output, self.encoder.word_embedding_table(),
                                     batch.get('masked_positions'))}
    if self.nsp:
      logits = self.nsp_head(out.pooled_output)
      if 'nsp_weight' in batch:  # scheduled: rides on the batch (data/pretrain/nsp_schedule.py)
        logits = scale_gradient(logits, batch['nsp_weight'][:, None])
      elif self.nsp_weight != 1.0:
        logits = scale_gradient(logits, float(self.nsp_weight))
      result['nsp_logits'] = logits
    return result


def scale_gradient(x: jax.Array, scale) -> jax.Array:
  """The identity, whose gradient is multiplied by `scale` (a float, or an array that
  broadcasts against `x`): a loss weight that leaves the loss's value alone. The value is
  exactly `x`, since `x - stop_gradient(x)` is exactly zero."""
  frozen = jax.lax.stop_gradient(x)
  return frozen + scale * (x - frozen)


def build_model(config) -> BertForPretraining:
  """The task's model from the experiment config (its `model` group resolved already)."""
  return BertForPretraining(model_config(config.model, config.data.vocab_size),
                            nsp=bool(config.data.nsp),
                            nsp_weight=float(config.train.nsp_loss_weight))


def dummy_batch(config, batch_size: int = 1) -> dict:
  """Zeros of the batch's shapes, for initialisation and shape inference."""
  seq = config.data.max_seq_length
  preds = max_predictions(config)
  return {
      'input_ids': jnp.zeros((batch_size, seq), jnp.int32),
      'segment_ids': jnp.zeros((batch_size, seq), jnp.int32),
      'input_mask': jnp.ones((batch_size, seq), jnp.int32),
      'masked_positions': jnp.zeros((batch_size, preds), jnp.int32),
      'masked_ids': jnp.zeros((batch_size, preds), jnp.int32),
      'masked_weights': jnp.zeros((batch_size, preds), jnp.float32),
      'nsp_label': jnp.zeros((batch_size,), jnp.int32),
      **packed_inputs(config, batch_size),
  }


def packed_inputs(config, batch_size: int) -> dict:
  """The two packing fields a `data.packing=documents` batch carries (each row one example
  here), so shapes traced from the dummy batch match the real ones."""
  if config.data.packing != 'documents':
    return {}
  shape = (batch_size, config.data.max_seq_length)
  return {'input_segmentation': jnp.ones(shape, jnp.int32),
          'input_positions': jnp.broadcast_to(jnp.arange(shape[1], dtype=jnp.int32), shape)}


def max_predictions(config) -> int:
  """The width of the masked_* fields of a train batch (masking.max_predictions)."""
  return masking.max_predictions(config.data)


def loss_denominators(batch: dict) -> dict:
  """What each loss term is averaged over. The train step sums these over microbatches and
  devices first, so the loss (and gradient) is the same however the batch is split."""
  return {'mlm': batch['masked_weights'].astype(jnp.float32).sum(),
          'nsp': jnp.asarray(batch['input_ids'].shape[0], jnp.float32)}


def loss_and_metrics(outputs: dict, batch: dict,
                     denominators: dict | None = None) -> tuple[jax.Array, dict]:
  """This batch's share of the loss, plus metric *sums and counts* (divided once, when logged).

  The MLM loss is the mean cross-entropy over real masked predictions (`masked_weights`), the
  NSP loss the mean over sequences, as BERT's; `denominators` are the global counts.
  """
  if denominators is None:
    denominators = loss_denominators(batch)
  weights = batch['masked_weights'].astype(jnp.float32)
  mlm_xent = optax.softmax_cross_entropy_with_integer_labels(outputs['mlm_logits'],
                                                             batch['masked_ids'])
  mlm_loss_sum = (mlm_xent * weights).sum()
  loss = mlm_loss_sum / jnp.maximum(denominators['mlm'], 1.0)
  mlm_correct = is_top(outputs['mlm_logits'], batch['masked_ids']) * weights
  sums = {'mlm_loss': mlm_loss_sum, 'mlm_accuracy': mlm_correct.sum(), 'mlm_count': weights.sum(),
          'seq_count': jnp.asarray(batch['input_ids'].shape[0], jnp.float32)}
  if 'nsp_logits' in outputs:
    nsp_xent = optax.softmax_cross_entropy_with_integer_labels(outputs['nsp_logits'],
                                                               batch['nsp_label'])
    loss = loss + nsp_xent.sum() / denominators['nsp']
    sums['nsp_loss'] = nsp_xent.sum()
    nsp_correct = outputs['nsp_logits'].argmax(-1) == batch['nsp_label']
    sums['nsp_accuracy'] = nsp_correct.sum().astype(jnp.float32)
  return loss, sums


def is_top(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """Whether the label's logit is the largest: argmax == label but for exact ties.

  An argmax over the vocabulary is a variadic (value, index) reduction that XLA:CPU runs
  several times slower than a max, which the cross-entropy's logsumexp computes anyway.
  """
  label_logit = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
  return label_logit >= logits.max(-1)


def reduce_metrics(sums: dict) -> dict:
  """Metric sums (over steps and devices) -> the reported means, with perplexity.

  `loss` is `mlm_loss + nsp_loss`, each averaged over the whole window, which for a one-step
  window is exactly the objective the step minimised.
  """
  sums = {k: float(v) for k, v in sums.items()}
  mlm_count, seq_count = max(sums['mlm_count'], 1.0), max(sums['seq_count'], 1.0)
  result = {'mlm_loss': sums['mlm_loss'] / mlm_count,
            'mlm_accuracy': sums['mlm_accuracy'] / mlm_count}
  result['perplexity'] = math.exp(min(result['mlm_loss'], 50.0))
  result['loss'] = result['mlm_loss']
  if 'nsp_loss' in sums:
    result['nsp_loss'] = sums['nsp_loss'] / seq_count
    result['nsp_accuracy'] = sums['nsp_accuracy'] / seq_count
    result['loss'] += result['nsp_loss']
  return result


def datasets(config, workdir: str, process_index: int = 0, process_count: int = 1):
  """The corpus pipeline: `.tokenizer`, `.train_iterator(state)`, `.eval_batches(n)`, `.stats`."""
  return pretraining_data.build_pretraining_data(config, workdir, process_index=process_index,
                                process_count=process_count)


def prepare_data(config, workdir: str, process_index: int = 0) -> None:
  """Before any barrier: process 0 prepares the corpus (which may take hours), the others wait
  for its manifest with data.prepare_timeout_s, not in a collective that could time out first."""
  pretraining_data.ensure_prepared(config, workdir, process_index)


def resolved_fields(config, data) -> dict:
  """Vocabulary size, from the tokenizer."""
  return vocab_fields(config, data.tokenizer)


# No per-example predictions: every pretraining metric is a sum the eval step returns.
predict = evaluate = write_predictions = None


couples_examples = False  # each example's loss is its own
