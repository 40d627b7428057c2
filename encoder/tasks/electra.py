"""Replaced-token detection (ELECTRA; Clark et al., 2020): the model, its loss and its metrics.

The data are pretraining's (encoder.tasks.pretraining: the same corpora, rows, packing and
masks; ELECTRA's masking is a data setting, `config_schema.electra_config`), the model
`modules.electra.ElectraForPretraining`. The loss is the generator's MLM loss (mean over the
masked predictions) plus `electra.discriminator_weight` times the discriminator's (binary
cross-entropy, mean over every real token), both formed from sums over the global batch as
every task's are. Metrics: the generator's MLM loss and accuracy (`gen_mlm_*`, at the masked
positions), the discriminator's loss and accuracy over real tokens, its precision and recall on
the replaced ones (`disc_*`), and the share of real tokens replaced (`replaced_fraction`: a
generator that guesses right replaces less).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax

from encoder.modules.config import check_electra, model_config
from encoder.modules.electra import ElectraForPretraining, generator_config
from encoder.tasks import with_loss_settings
from encoder.tasks.pretraining import (
    datasets,
    dummy_batch,
    is_top,
    prepare_data,
    resolved_fields,
)

__all__ = ['bind', 'build_model', 'datasets', 'dummy_batch', 'loss_and_metrics',
           'loss_denominators', 'prepare_data', 'reduce_metrics', 'resolved_fields']


def check(config) -> None:
  """Refuses, in one line each, the `electra` settings the model cannot take."""
  check_electra(config.electra, config.data.nsp)


def build_model(config) -> ElectraForPretraining:
  """The generator and discriminator from the resolved config (`model` is the
  discriminator's)."""
  check(config)
  discriminator = model_config(config.model, config.data.vocab_size)
  return ElectraForPretraining(
      discriminator, generator_config(discriminator, float(config.electra.generator_size)),
      config.electra.embedding_sharing)


def bind(config):
  """The task with the discriminator's loss weight bound into its loss and its reported
  `loss` (the step calls both without the run's config)."""
  check(config)
  weight = float(config.electra.discriminator_weight)
  task = with_loss_settings(globals(), loss_and_metrics, discriminator_weight=weight)
  task.reduce_metrics = lambda sums: reduce_metrics(sums, discriminator_weight=weight)
  return task


def loss_denominators(batch: dict) -> dict:
  """The masked predictions (the generator's loss) and the real tokens (the
  discriminator's), summed by the step over microbatches and devices."""
  return {'mlm': batch['masked_weights'].astype(jnp.float32).sum(),
          'tokens': batch['input_mask'].astype(jnp.float32).sum()}


def loss_and_metrics(outputs: dict, batch: dict, denominators: dict | None = None, *,
                     discriminator_weight: float) -> tuple[jax.Array, dict]:
  """This batch's share of `gen MLM + discriminator_weight x disc`, and metric sums."""
  if denominators is None:
    denominators = loss_denominators(batch)
  weights = batch['masked_weights'].astype(jnp.float32)
  xent = optax.softmax_cross_entropy_with_integer_labels(outputs['mlm_logits'],
                                                         batch['masked_ids'])
  mlm_sum = (xent * weights).sum()
  real = batch['input_mask'].astype(jnp.float32)
  replaced = outputs['replaced'].astype(jnp.float32) * real
  bce = optax.sigmoid_binary_cross_entropy(outputs['rtd_logits'], replaced)
  disc_sum = (bce * real).sum()
  loss = (mlm_sum / jnp.maximum(denominators['mlm'], 1.0)
          + discriminator_weight * disc_sum / jnp.maximum(denominators['tokens'], 1.0))
  predicted = (outputs['rtd_logits'] > 0).astype(jnp.float32) * real
  sums = {'gen_mlm_loss': mlm_sum,
          'gen_mlm_correct': (is_top(outputs['mlm_logits'], batch['masked_ids']) * weights).sum(),
          'mlm_count': weights.sum(), 'disc_loss': disc_sum, 'token_count': real.sum(),
          'disc_correct': ((predicted == replaced) * real).sum(),
          'replaced_count': replaced.sum(), 'predicted_count': predicted.sum(),
          'true_positives': (predicted * replaced).sum()}
  return loss, sums


def reduce_metrics(sums: dict, *, discriminator_weight: float) -> dict:
  """Metric sums (over steps and devices) -> the reported values. `loss` is the objective,
  `gen_mlm_loss + discriminator_weight x disc_loss`, each averaged over the window; precision
  is 0 where nothing was predicted replaced, recall 0 where nothing was replaced."""
  s = {k: float(v) for k, v in sums.items()}
  masked, tokens = max(s['mlm_count'], 1.0), max(s['token_count'], 1.0)
  result = {'gen_mlm_loss': s['gen_mlm_loss'] / masked,
            'gen_mlm_accuracy': s['gen_mlm_correct'] / masked,
            'disc_loss': s['disc_loss'] / tokens, 'disc_accuracy': s['disc_correct'] / tokens,
            'disc_precision': s['true_positives'] / max(s['predicted_count'], 1.0),
            'disc_recall': s['true_positives'] / max(s['replaced_count'], 1.0),
            'replaced_fraction': s['replaced_count'] / tokens}
  result['gen_perplexity'] = math.exp(min(result['gen_mlm_loss'], 50.0))
  result['loss'] = result['gen_mlm_loss'] + discriminator_weight * result['disc_loss']
  return result


# No per-example predictions: every metric is a sum the eval step returns.
predict = evaluate = write_predictions = None

couples_examples = False  # each example's loss is its own
