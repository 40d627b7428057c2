"""Small models and inputs for module tests, and what an attention layer ran."""

import contextlib
from unittest import mock

import jax
import jax.numpy as jnp

from encoder.modules import attention
from encoder.modules.attention_mask import AttentionMask
from encoder.modules.blockwise_attention import key_tiles_visited
from encoder.modules.config import ModelConfig
from encoder.modules.transformer import Encoder


def tiny_config(**overrides) -> ModelConfig:
  fields = dict(vocab_size=97, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                max_position_embeddings=16, dropout_rate=0.1, attention_dropout_rate=0.1)
  fields.update(overrides)
  return ModelConfig(**fields)


def random_inputs(batch=2, seq=8, vocab=97, seed=0):
  ids = jax.random.randint(jax.random.key(seed), (batch, seq), 5, vocab)
  segments = (jnp.arange(seq)[None, :] >= seq // 2).astype(jnp.int32).repeat(batch, 0)
  mask = jnp.ones((batch, seq), jnp.int32)
  return ids, segments, mask


def init_encoder(config: ModelConfig, seq=8):
  model = Encoder(config)
  ids, segments, mask = random_inputs(seq=seq, vocab=config.vocab_size)
  variables = model.init(jax.random.key(1), ids, segments, mask)
  return model, variables


@contextlib.contextmanager
def runs_forms(**expected: str):
  """Asserts that the attention layers traced inside the block ran `expected` forms, by layer
  kind: `runs_forms(global_='blockwise', local='blockwise')` (`global_`: a keyword).

  It records what `attention.layer_form` chose for each layer and which kernels the layer
  called, so a layer that fell back to another form (the explicit one for a short row, or
  blockwise for a mask splash refuses) fails the test that means to check the form, and so
  does a block that traced nothing (a jitted function compiled before it)."""
  expected = {kind.rstrip('_'): form for kind, form in expected.items()}
  chosen, called = [], []
  choose = attention.layer_form

  def recording_choice(cfg, mask, **kwargs):
    form = choose(cfg, mask, **kwargs)
    chosen.append(('local' if mask.window else 'global', form))
    return form

  def recording(name, kernel):
    def run(*args, **kwargs):
      called.append(name)
      return kernel(*args, **kwargs)
    return run

  with mock.patch.object(attention, 'layer_form', recording_choice), \
      mock.patch.object(attention, 'blockwise_attention',
                        recording('blockwise', attention.blockwise_attention)), \
      mock.patch.object(attention, 'splash_attention',
                        recording('splash', attention.splash_attention)):
    yield
  ran = {}
  for kind, form in chosen:
    ran.setdefault(kind, set()).add(form)
  assert ran == {kind: {form} for kind, form in expected.items()}, f'ran {ran}'
  kernels = [form for _, form in chosen if form in ('blockwise', 'splash')]
  assert sorted(called) == sorted(kernels), f'chose {kernels}, called {called}'


def blockwise_walk(mask: AttentionMask, block: int) -> tuple[str, int]:
  """How the blockwise kernel walks `mask`'s rows in blocks of `block`: ('one query block',
  'band' or 'query blocks'; the most key tiles a query block visits). What a test asserts so
  that its rows take the loop it means to check (several tiles), not a shorter one."""
  count, width = key_tiles_visited(mask, block)
  if count.shape[1] == 1:
    return 'one query block', int(count.max())
  return ('query blocks' if width == block else 'band'), int(count.max())
