"""Packed rows: an example packed with others gives exactly what it gives alone (outputs and
gradients), on the explicit and the XLA attention paths, bidirectional and causal."""

import jax
import numpy as np
import pytest

from encoder.modules.attention_mask import AttentionMask
from encoder.modules.transformer import Encoder
from tests.modules.helpers import tiny_config

SEQ = 20
LENGTHS = (5, 7, 3)  # three examples in one row of 20: 15 real tokens, 5 of padding
VOCAB = 97


def _examples(seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
  """(token ids, sentence A/B ids) of each example, random but for a [CLS]-like first id."""
  rng = np.random.default_rng(seed)
  out = []
  for n in LENGTHS:
    ids = rng.integers(5, VOCAB, n).astype(np.int32)
    ids[0] = 2
    out.append((ids, (np.arange(n) >= n // 2).astype(np.int32)))
  return out


def _packed(examples) -> dict:
  """One row holding every example: its ids, A/B ids, mask, example ids and positions."""
  row = {k: np.zeros((1, SEQ), np.int32) for k in
         ('input_ids', 'segment_ids', 'input_mask', 'input_segmentation', 'input_positions')}
  start = 0
  for k, (ids, segments) in enumerate(examples, 1):
    span = slice(start, start + len(ids))
    row['input_ids'][0, span], row['segment_ids'][0, span] = ids, segments
    row['input_mask'][0, span], row['input_segmentation'][0, span] = 1, k
    row['input_positions'][0, span] = np.arange(len(ids))
    start += len(ids)
  return row


def _alone(ids, segments) -> dict:
  row = {k: np.zeros((1, SEQ), np.int32) for k in ('input_ids', 'segment_ids', 'input_mask')}
  row['input_ids'][0, :len(ids)], row['segment_ids'][0, :len(ids)] = ids, segments
  row['input_mask'][0, :len(ids)] = 1
  return row


# ModernBERT's architecture at this size: RoPE restarting per example, a 4-token window on
# layer 1 (layer 0 global), no biases, GeGLU, mean pooling.
MODERN = dict(position_embedding='rope', local_window=4, global_every=2, use_bias=False,
              first_attention_norm=False, activation='geglu', type_vocab_size=0,
              pooler='none', pooling='mean')


def _model(impl: str, attention: str, norm: str, **fields):
  config = tiny_config(attention=attention, attention_impl=impl, norm=norm, dropout_rate=0.0,
                       attention_dropout_rate=0.0, max_position_embeddings=SEQ, **fields)
  model = Encoder(config)
  return model, model.init(jax.random.key(1), **_alone(*_examples()[0]))


def _loss(model, weights, span):
  """A loss on the outputs of the tokens in `span` only: its gradient reaches every parameter
  through that example alone."""
  def loss(variables, row):
    out = model.apply(variables, **row).sequence_output[0, span]
    return (out * weights).sum()
  return loss


@pytest.mark.parametrize('attention, arch', [('bidirectional', 'bert'), ('causal', 'bert'),
                                             ('bidirectional', 'modern')])
@pytest.mark.parametrize('impl', ['explicit', 'xla'])
def test_a_packed_example_equals_itself_alone(impl, attention, arch):
  # Pre-LN on the causal and modern cases, so both norm placements are covered.
  modern = MODERN if arch == 'modern' else {}
  model, variables = _model(impl, attention, 'post' if attention == 'bidirectional' and not modern
                            else 'pre', **modern)
  examples = _examples()
  packed = _packed(examples)
  out = model.apply(variables, **packed).sequence_output
  rng = np.random.default_rng(1)
  start = 0
  for ids, segments in examples:
    n = len(ids)
    alone = _alone(ids, segments)
    np.testing.assert_allclose(out[0, start:start + n],
                               model.apply(variables, **alone).sequence_output[0, :n],
                               rtol=1e-5, atol=1e-5)
    weights = rng.standard_normal((n, out.shape[-1])).astype(np.float32)
    grad_packed = jax.grad(_loss(model, weights, slice(start, start + n)))(variables, packed)
    grad_alone = jax.grad(_loss(model, weights, slice(0, n)))(variables, alone)
    for a, b in zip(jax.tree.leaves(grad_packed), jax.tree.leaves(grad_alone), strict=True):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    start += n


@pytest.mark.parametrize('impl', ['explicit', 'xla'])
def test_without_example_ids_a_row_is_one_example(impl):
  """The packing fields are optional: a row given none is attended as one padded example, and
  a row whose tokens all carry example id 1 with positions 0, 1, ... is the same row."""
  model, variables = _model(impl, 'bidirectional', 'post')
  ids, segments = _examples()[1]
  row = _alone(ids, segments)
  n = len(ids)
  one = {**row, 'input_segmentation': row['input_mask'].copy(),
         'input_positions': np.arange(SEQ, dtype=np.int32)[None]}
  np.testing.assert_allclose(model.apply(variables, **one).sequence_output[0, :n],
                             model.apply(variables, **row).sequence_output[0, :n],
                             rtol=1e-6, atol=1e-6)


def test_the_packed_mask_is_block_diagonal_and_padding_sees_only_padding():
  seg = np.array([[1, 1, 2, 2, 2, 0]])
  mask = np.asarray(AttentionMask(np.ones_like(seg), seg).dense())[0, 0]
  expected = seg[0][:, None] == seg[0][None, :]
  np.testing.assert_array_equal(mask, expected)
  causal = np.asarray(AttentionMask(np.ones_like(seg), seg, causal=True).dense())[0, 0]
  np.testing.assert_array_equal(causal, expected & np.tri(6, dtype=bool))
  assert causal.any(axis=1).all()  # no query is left without a key


@pytest.mark.parametrize('arch', ['bert', 'modern'])
def test_pool_positions_pool_each_packed_example_as_it_pools_alone(arch):
  """A packed row pooled at its examples' [CLS] positions (modern: over their tokens, mean
  pooling) gives each one's pooled output, as packed classification reads it; without
  `pool_positions` the pooler reads the row as one."""
  model, variables = _model('explicit', 'bidirectional', 'pre' if arch == 'modern' else 'post',
                            **(MODERN if arch == 'modern' else {}))
  examples = _examples()
  starts = np.cumsum([0, *LENGTHS[:-1]]).astype(np.int32)[None]
  pooled = model.apply(variables, **_packed(examples), pool_positions=starts).pooled_output
  assert pooled.shape == (1, len(examples), 32)
  for k, (ids, segments) in enumerate(examples):
    np.testing.assert_allclose(pooled[0, k],
                               model.apply(variables, **_alone(ids, segments)).pooled_output[0],
                               rtol=1e-5, atol=1e-5)
