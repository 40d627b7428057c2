"""The span QA model and loss: padding is never a start or an end; loss = mean of the two CEs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.tasks import span_qa
from tests.modules.helpers import random_inputs, tiny_config


def test_padding_logits_are_masked_and_real_ones_come_from_the_head():
  model = span_qa.BertForQuestionAnswering(tiny_config())
  ids, segments, mask = random_inputs(batch=2, seq=8)
  mask = mask.at[1, 5:].set(0)
  batch = {'input_ids': ids, 'segment_ids': segments, 'input_mask': mask}
  params = model.init(jax.random.key(0), batch)
  out = model.apply(params, batch)
  for side in ('start_logits', 'end_logits'):
    assert out[side].shape == (2, 8) and out[side].dtype == jnp.float32
    assert np.all(np.asarray(out[side])[1, 5:] == -1e9)
    assert np.all(np.abs(np.asarray(out[side])[0]) < 100)


def test_loss_is_the_mean_of_start_and_end_cross_entropies_over_weighted_windows():
  seq = 6
  real = np.zeros((3, seq), np.float32)
  real[:, 4:] = -1e9  # two padding positions per row
  start = jnp.asarray(real)  # uniform over 4 real positions: CE = log 4
  end = jnp.asarray(real).at[:, 2].set(50.0)  # all mass on position 2: CE ~ 0
  batch = {'start_positions': jnp.array([1, 0, 3]), 'end_positions': jnp.array([2, 2, 2]),
           'weight': jnp.array([1.0, 1.0, 0.0])}  # the last row is eval padding
  loss, sums = span_qa.loss_and_metrics({'start_logits': start, 'end_logits': end}, batch)
  assert float(loss) == pytest.approx(np.log(4) / 2, rel=1e-5)
  assert float(sums['count']) == 2.0 and float(sums['end_correct']) == 2.0
  metrics = span_qa.reduce_metrics(jax.device_get(sums))
  assert metrics['loss'] == pytest.approx(np.log(4) / 2, rel=1e-5)
  assert metrics['end_accuracy'] == 1.0
