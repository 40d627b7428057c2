"""Long rows end to end: a converted ModernBERT embeds an 8,000-token text with the blockwise
form exactly as the explicit form does, and a modern run takes rows of its whole context."""

import json
import os

import numpy as np
import pytest

import encoder
from encoder import configs
from encoder.convert import main as convert_main
from encoder.train.resolve import resolve_config
from tests.golden.smoke import GOLDEN


@pytest.fixture(scope='module')
def long_modernbert(tmp_path_factory) -> str:
  """tests/golden's random-weight ModernBERT (4 layers, width 32, a window of 8), converted,
  with its position limit raised to ModernBERT's 8,192: rotary positions have no table, so the
  same weights serve any length."""
  out = str(tmp_path_factory.mktemp('long') / 'work')
  assert convert_main(['--from-hf', os.path.join(GOLDEN, 'tiny_modernbert'), '--out', out]) == 0
  path = os.path.join(out, 'config.json')
  config = json.load(open(path))
  config['model']['max_position_embeddings'] = 8192
  json.dump(config, open(path, 'w'))
  return out


def text_of(model, tokens: int, seed: int = 0) -> str:
  """Random words from the model's vocabulary, as many as fit in `tokens` tokens."""
  rng = np.random.default_rng(seed)
  pieces = [model.tokenizer.id_to_token(int(i)).lstrip('Ġ▁#') for i in
            rng.integers(10, model.tokenizer.vocab_size, 2 * tokens)]
  words = [p for p in pieces if p.isalpha()]
  count = lambda n: int(model.tokenize([' '.join(words[:n])], 4 * tokens)[2].sum())
  lo, hi = 1, len(words)
  while lo < hi:  # the most words whose text is at most `tokens` tokens
    mid = (lo + hi + 1) // 2
    lo, hi = (mid, hi) if count(mid) <= tokens else (lo, mid - 1)
  return ' '.join(words[:lo])


@pytest.mark.parametrize('tokens', [1000, pytest.param(8000, marks=pytest.mark.slow)])
def test_embed_of_a_long_text_equals_the_explicit_form(long_modernbert, tokens):
  blockwise = encoder.load(long_modernbert)
  assert blockwise.model_config.attention_impl == 'blockwise'  # auto, on this CPU
  explicit = encoder.load(long_modernbert, attention_impl='explicit')
  text = text_of(blockwise, tokens)
  length = int(blockwise.tokenize([text], 8192)[2].sum())
  assert tokens - 10 < length <= tokens, length
  got, want = blockwise.embed([text]), explicit.embed([text])
  np.testing.assert_allclose(got, want, atol=1e-5)
  out = blockwise.encode([text]).sequence_output
  assert out.shape[1] >= length
  # Real positions only: a padding query's output is never read, and differs between forms.
  np.testing.assert_allclose(out[:, :length],
                             explicit.encode([text]).sequence_output[:, :length], atol=1e-5)


def modern(*overrides):
  config = configs.load_experiment('mlm_modern_base')
  configs.apply_overrides(config, list(overrides))
  return resolve_config(config)


def test_a_modern_run_takes_rows_of_its_whole_context():
  config = modern('data.max_seq_length=8192')
  assert (config.data.max_seq_length, config.model.max_position_embeddings) == (8192, 8192)
