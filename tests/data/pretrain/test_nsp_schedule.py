"""The scheduled NSP gradient weight: its values, the batch field that carries it, and that it
scales NSP's gradient into the encoder without changing the loss."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder.data.pretrain.nsp_schedule import nsp_weight_at
from encoder.data.pretrain.pretraining_data import build_pretraining_data
from encoder.errors import ConfigError
from encoder.tasks import pretraining
from tests.data.conftest import make_config


def _ramp(config, first=0.1, final=1.0, start=4, end=8):
  config.train.nsp_loss_weight = first
  config.train.nsp_loss_weight_final = final
  config.train.nsp_ramp_start, config.train.nsp_ramp_end = start, end
  return config


def test_weight_holds_then_moves_linearly_then_holds(corpus_dir, tmp_path):
  train = _ramp(make_config(corpus_dir, tmp_path)).train
  weights = [nsp_weight_at(train, s) for s in (0, 4, 5, 6, 8, 100)]
  np.testing.assert_allclose(weights, [0.1, 0.1, 0.325, 0.55, 1.0, 1.0])
  train.nsp_loss_weight_final = None  # no schedule: the constant weight
  assert nsp_weight_at(train, 100) == pytest.approx(0.1)


def test_train_batches_carry_the_weight_of_their_step(corpus_dir, tmp_path):
  config = _ramp(make_config(corpus_dir, tmp_path))
  data = build_pretraining_data(config, str(tmp_path / 'run'))
  for step, expected in ((0, 0.1), (6, 0.55), (9, 1.0)):
    batch = data.train_batch(step)
    assert batch['nsp_weight'].dtype == np.float32
    np.testing.assert_allclose(batch['nsp_weight'], np.full(16, expected, np.float32))
  assert all('nsp_weight' not in b for b in data.eval_batches(1))  # eval takes no gradient
  config.train.nsp_loss_weight_final = None
  plain = build_pretraining_data(config, str(tmp_path / 'run'))
  assert 'nsp_weight' not in plain.train_batch(6)
  for key, value in plain.train_batch(6).items():  # the rest of the batch is untouched
    np.testing.assert_array_equal(value, data.train_batch(6)[key])


def test_a_backwards_ramp_is_a_config_error(corpus_dir, tmp_path):
  config = _ramp(make_config(corpus_dir, tmp_path), start=8, end=4)
  with pytest.raises(ConfigError, match='nsp_ramp_start=8'):
    build_pretraining_data(config, str(tmp_path / 'run'))


@pytest.mark.parametrize('scale', [0.25, np.array([[0.25], [2.0]], np.float32)])
def test_scale_gradient_keeps_the_value_and_scales_the_gradient(scale):
  x = jnp.array([[1.5, -2.0], [0.5, 3.0]], jnp.float32)
  np.testing.assert_array_equal(pretraining.scale_gradient(x, scale), x)
  grad = jax.grad(lambda v: (pretraining.scale_gradient(v, scale) ** 2).sum())(x)
  np.testing.assert_allclose(grad, 2 * x * np.broadcast_to(scale, x.shape), rtol=1e-6)


@pytest.mark.slow  # ~25 s; scale_gradient's arithmetic is checked fast above
def test_the_batch_weight_scales_nsps_share_of_the_gradient(corpus_dir, tmp_path):
  """The gradient of MLM + NSP with the batch weight w is grad MLM + w * grad NSP in every
  parameter (the NSP head's too: Adam's normalisation, not the gradient, keeps its steps full
  size), while the loss itself is unweighted."""
  config = make_config(corpus_dir, tmp_path)
  config.model.size, config.model.dropout_rate = 'tiny', 0.0
  data = build_pretraining_data(config, str(tmp_path / 'run'))
  config.model.vocab_size = data.tokenizer.vocab_size
  model = pretraining.build_model(config)
  batch = {k: jnp.asarray(v) for k, v in data.train_batch(0).items()}
  weighted = {**batch, 'nsp_weight': jnp.full(16, 0.3)}
  params = nn.unbox(model.init(jax.random.key(0), batch)['params'])

  def term(which, b):
    def loss(p):
      _, sums = pretraining.loss_and_metrics(model.apply({'params': p}, b), b)
      return {'mlm': sums['mlm_loss'] / sums['mlm_count'],
              'nsp': sums['nsp_loss'] / sums['seq_count']}[which]
    return loss

  def total(b):
    return lambda p: pretraining.loss_and_metrics(model.apply({'params': p}, b), b)[0]

  mlm, nsp = jax.grad(term('mlm', batch))(params), jax.grad(term('nsp', batch))(params)
  both = jax.grad(total(weighted))(params)
  jax.tree.map(lambda a, m, n: np.testing.assert_allclose(a, m + 0.3 * n, rtol=2e-4, atol=1e-7),
               both, mlm, nsp)
  assert float(jnp.abs(nsp['encoder']['layer_0']['attention']['query']['kernel']).max()) > 0
  np.testing.assert_allclose(total(weighted)(params), total(batch)(params), rtol=1e-7)
