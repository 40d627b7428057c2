"""Packed embedding gives what `Model.embed` gives each text alone, whatever the rows, the
pooling, the length limit and the order; evaluate's embedding goes through it."""

import warnings

import numpy as np
import pytest

from encoder.embedding import evaluate, packed
from encoder.errors import DataError
from tests.embedding.conftest import embed_one_at_a_time, make_texts


@pytest.mark.parametrize('pooling', ['mean', 'cls', 'last'])
def test_packed_equals_embed_of_each_text_alone(tiny_model, pooling):
  texts = make_texts(40)
  want = embed_one_at_a_time(tiny_model, texts, pooling=pooling, normalize=False)
  # 4 rows of 64 tokens a step: many texts to a row, several steps, a short last step.
  with pytest.warns(UserWarning, match='truncated'):
    got = packed.embed_packed(tiny_model, texts, pooling=pooling, normalize=False, rows=4)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_rows_length_limit_and_normalisation_change_nothing_but_what_they_say(tiny_model):
  texts = make_texts(25, seed=1)
  want = embed_one_at_a_time(tiny_model, texts, max_length=24)
  embedder = packed.PackedEmbedder(tiny_model, max_length=24, batch_tokens=100)
  got = embedder(texts)
  assert embedder.last_shape == (4, 24)  # rows = 100 // 24; the width is the limit itself
  assert embedder.truncated == sum(len(t.split()) > 22 for t in texts) > 0
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  unit = packed.embed_packed(tiny_model, texts, normalize=True, max_length=24, rows=1)
  np.testing.assert_allclose(unit, got / np.linalg.norm(got, axis=1, keepdims=True),
                             rtol=1e-5, atol=1e-5)


def test_short_texts_run_at_the_width_of_their_longest(tiny_model):
  embedder = packed.PackedEmbedder(tiny_model, batch_tokens=64)
  got = embedder(['a dog', 'the big red house by the river'])
  assert embedder.last_shape == (4, 16)  # 64 // 16 rows (the one step runs on 1)
  np.testing.assert_allclose(got, embed_one_at_a_time(
      tiny_model, ['a dog', 'the big red house by the river']), rtol=1e-5, atol=1e-5)
  assert embedder([]).shape == (0, tiny_model.model_config.hidden_size)


def test_bfloat16_is_close_to_float32(tiny_model):
  texts = make_texts(12, seed=2)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    full = packed.embed_packed(tiny_model, texts, normalize=True)
    half = packed.embed_packed(tiny_model, texts, normalize=True, dtype='bfloat16')
  assert (full * half).sum(1).min() > 0.99 and np.abs(full - half).max() > 0


def test_bad_settings_are_one_line_errors(tiny_model):
  for kwargs, message in ((dict(pooling='max'), 'pooling'), (dict(dtype='float16'), 'dtype'),
                          (dict(rows=0), 'positive'), (dict(max_length=2), 'no room')):
    with pytest.raises(DataError, match=message):
      packed.embed_packed(tiny_model, ['a dog'], **kwargs)
  with pytest.raises(DataError, match='not a string'):
    packed.embed_packed(tiny_model, ['a dog', 3])


def test_evaluate_embeds_as_before(tiny_model):
  """evaluate's embedding (now packed) equals the length-ordered `embed` it replaced."""
  texts = make_texts(30, seed=3)
  want = embed_one_at_a_time(tiny_model, texts)
  want /= np.linalg.norm(want, axis=1, keepdims=True)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    got = evaluate.embed_in_length_order(tiny_model, texts)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
