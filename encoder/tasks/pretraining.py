"""MLM + NSP pretraining: the model, its loss and the metric sums the trainer reduces."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from encoder.modules.config import ModelConfig
from encoder.modules.heads import MlmHead, NspHead
from encoder.modules.transformer import Encoder

METRICS = ('loss', 'mlm_loss', 'mlm_accuracy', 'nsp_loss', 'nsp_accuracy')


class BertForPretraining(nn.Module):
  """Encoder + tied MLM head (+ NSP head unless `nsp=False`)."""
  config: ModelConfig
  nsp: bool = True

  def setup(self):
    self.encoder = Encoder(self.config)
    self.mlm = MlmHead(self.config)
    if self.nsp:
      self.nsp_head = NspHead(self.config)

  def __call__(self, batch: dict, *, deterministic: bool = True) -> dict:
    out = self.encoder(batch['input_ids'], batch['segment_ids'], batch['input_mask'],
                       deterministic=deterministic)
    result = {'mlm_logits': self.mlm(out.sequence_output, self.encoder.word_embedding_table(),
                                     batch.get('masked_positions'))}
    if self.nsp:
      result['nsp_logits'] = self.nsp_head(out.pooled_output)
    return result


def build_model(config) -> BertForPretraining:
  """The task's model from the experiment config (its `model` group resolved already)."""
  from encoder.modules.config import model_config
  return BertForPretraining(model_config(config.model, config.data.vocab_size),
                            nsp=bool(config.data.nsp))


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
  }


def max_predictions(config) -> int:
  given = config.data.max_predictions_per_seq
  return given if given is not None else round(config.data.max_seq_length * config.data.mask_rate)


def loss_and_metrics(outputs: dict, batch: dict) -> tuple[jax.Array, dict]:
  """Mean loss for the gradient, plus metric *sums and counts* (divided once, when logged).

  The MLM loss is the mean over real masked predictions (`masked_weights`), as BERT's.
  """
  weights = batch['masked_weights'].astype(jnp.float32)
  mlm_xent = optax.softmax_cross_entropy_with_integer_labels(outputs['mlm_logits'],
                                                             batch['masked_ids'])
  mlm_correct = (outputs['mlm_logits'].argmax(-1) == batch['masked_ids']) * weights
  num_masked = weights.sum()
  mlm_loss_sum = (mlm_xent * weights).sum()
  loss = mlm_loss_sum / jnp.maximum(num_masked, 1.0)
  num_sequences = jnp.asarray(batch['input_ids'].shape[0], jnp.float32)
  sums = {'mlm_loss': mlm_loss_sum, 'mlm_accuracy': mlm_correct.sum(),
          'mlm_count': num_masked, 'seq_count': num_sequences}
  if 'nsp_logits' in outputs:
    nsp_xent = optax.softmax_cross_entropy_with_integer_labels(outputs['nsp_logits'],
                                                               batch['nsp_label'])
    loss = loss + nsp_xent.mean()
    sums['nsp_loss'] = nsp_xent.sum()
    sums['nsp_accuracy'] = (outputs['nsp_logits'].argmax(-1) == batch['nsp_label']).sum().astype(
        jnp.float32)
  sums['loss'] = loss * num_sequences  # so the reduced `loss` is the mean of per-batch losses
  return loss, sums


def reduce_metrics(sums: dict) -> dict:
  """Metric sums (over steps and devices) -> the reported means, with perplexity."""
  sums = {k: float(v) for k, v in sums.items()}
  mlm_count, seq_count = max(sums['mlm_count'], 1.0), max(sums['seq_count'], 1.0)
  result = {'loss': sums['loss'] / seq_count,
            'mlm_loss': sums['mlm_loss'] / mlm_count,
            'mlm_accuracy': sums['mlm_accuracy'] / mlm_count}
  result['perplexity'] = float(jnp.exp(min(result['mlm_loss'], 50.0)))
  if 'nsp_loss' in sums:
    result['nsp_loss'] = sums['nsp_loss'] / seq_count
    result['nsp_accuracy'] = sums['nsp_accuracy'] / seq_count
  return result
