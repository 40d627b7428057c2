"""Replaced-token detection (ELECTRA; Clark et al., 2020): a small MLM generator fills the masked
positions with samples, and the discriminator, the encoder kept afterwards, tells for every
real token whether it was replaced.

Both are `Encoder`s of the same family: the generator's width, heads and MLP are a fraction of
the discriminator's (`generator_config`), its depth the same. The embeddings are shared three
ways (`SHARINGS`): `shared`, ELECTRA's, one embedding block (tables and norm) that both read
and both losses train, the generator projecting it to its own width; `disentangled`,
DeBERTa-v3's gradient-disentangled sharing (He et al., 2021), where the discriminator reads the
shared word table through a stop-gradient plus a difference of its own (`word_embedding_delta`,
zero at the start), so only the generator's loss moves the shared table; `none`, a generator
with embeddings of its own.

Parameter groups (the checkpoint's layout): `encoder` (the discriminator, as every reader of a
run's encoder expects it), `discriminator_head`, `generator`, `generator_mlm`, and under
`disentangled` `word_embedding_delta`, which readers fold into the encoder's word table
(encoder.checkpoint_files.fold_embedding_delta).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from encoder.modules.config import EMBEDDING_SHARINGS, ModelConfig, check_generator_size
from encoder.modules.heads import MlmHead
from encoder.modules.layers import activation, dense, zeros_init
from encoder.modules.task_models import encoder_inputs
from encoder.modules.transformer import Encoder

SHARINGS = EMBEDDING_SHARINGS
# Held-out batches are corrupted with this key (no dropout key is given there), so every
# evaluation of a run, and the evaluations of runs at other settings, see the same draws.
EVAL_SAMPLE_SEED = 0
_SAMPLE_BLOCK = 128  # vocabulary entries per block of the two-level sampler


def generator_config(cfg: ModelConfig, fraction: float) -> ModelConfig:
  """The generator of discriminator `cfg`: `fraction` of its hidden size, heads and MLP width
  (at least one head; the head size kept even for rotary positions), the same depth and
  architecture, its embeddings `cfg.embedding_width` wide (the shared tables; projected to its
  width) and no pooler. ELECTRA-Small's generator at 1/4: 64 wide, 1 head, MLP 256; Base's at
  1/3: 256, 4 heads, 1,024."""
  check_generator_size(fraction)
  heads = max(1, round(cfg.num_heads * fraction))
  head_dim = cfg.hidden_size * fraction / heads
  head_dim = (max(2, 2 * round(head_dim / 2)) if cfg.position_embedding == 'rope'
              else max(1, round(head_dim)))
  return dataclasses.replace(
      cfg, hidden_size=heads * head_dim, num_heads=heads,
      intermediate_size=max(1, round(cfg.intermediate_size * fraction)),
      embedding_size=cfg.embedding_width, pooler='none')


def sample_tokens(key: jax.Array, logits: jax.Array) -> jax.Array:
  """One token id per row of `logits` [..., v], drawn from softmax(logits).

  The cumulative distribution is inverted in two levels: a block of 128 entries drawn by its
  mass, then an entry within it, two uniforms per row. `jax.random.categorical` draws a Gumbel
  per vocabulary entry instead: 2.6 M per masked row at ELECTRA-Small's batch, which took
  seconds a step on a 2-core CPU (docs/ablations.md). Nothing is differentiated here."""
  logits = jax.lax.stop_gradient(logits)
  *lead, v = logits.shape
  blocks = -(-v // _SAMPLE_BLOCK)
  weights = jnp.exp(logits - logits.max(-1, keepdims=True))
  weights = jnp.pad(weights, [(0, 0)] * len(lead) + [(0, blocks * _SAMPLE_BLOCK - v)])
  weights = weights.reshape(*lead, blocks, _SAMPLE_BLOCK)
  block_key, entry_key = jax.random.split(key)

  def pick(cumulative, k):
    """The first index whose cumulative weight exceeds a uniform draw of the total."""
    u = jax.random.uniform(k, (*lead, 1)) * cumulative[..., -1:]
    return jnp.minimum((cumulative <= u).sum(-1), cumulative.shape[-1] - 1)

  block = pick(jnp.cumsum(weights.sum(-1), -1), block_key)
  inside = jnp.take_along_axis(weights, block[..., None, None], axis=-2)[..., 0, :]
  entry = pick(jnp.cumsum(inside, -1), entry_key)
  return (block * _SAMPLE_BLOCK + entry).astype(jnp.int32)


def corrupt(input_ids: jax.Array, masked_positions: jax.Array, masked_ids: jax.Array,
            masked_weights: jax.Array, sampled: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(the discriminator's input: the row with each real prediction slot's sample written at its
  position, whether each token differs from the original row). A sample equal to the original
  token is not a replacement; padding slots (weight 0) write nothing."""
  rows = jnp.arange(input_ids.shape[0])[:, None]
  columns = jnp.where(masked_weights > 0, masked_positions, input_ids.shape[-1])  # out: dropped
  original = input_ids.at[rows, columns].set(masked_ids.astype(input_ids.dtype), mode='drop')
  corrupted = input_ids.at[rows, columns].set(sampled.astype(input_ids.dtype), mode='drop')
  return corrupted, corrupted != original


class DiscriminatorHead(nn.Module):
  """dense -> activation -> dense to one logit per token (> 0: replaced), as ELECTRA's
  `discriminator_predictions`. Gated MLPs use GELU here, as the MLM head does."""
  config: ModelConfig

  @nn.compact
  def __call__(self, sequence: jax.Array) -> jax.Array:
    cfg = self.config
    act = 'gelu' if cfg.activation in ('geglu', 'swiglu') else cfg.activation
    h = activation(act, dense(cfg, cfg.hidden_size, ('embed', 'embed_out'), 'dense')(sequence))
    logit = dense(cfg, 1, ('embed_out', None), 'prediction', role='final', use_bias=True)(h)
    return logit[..., 0].astype(jnp.float32)


def eval_sample_key(input_ids: jax.Array) -> jax.Array:
  """The key an evaluation samples with: EVAL_SAMPLE_SEED's folded with a checksum of the
  rows, so an evaluation is repeatable (the same rows, the same replacements at every step)
  while its batches draw independently of one another (one fixed key would give every batch
  the same uniforms at each (row, slot), correlating the held-out estimate across batches)."""
  ids = input_ids.astype(jnp.uint32)
  weights = jnp.arange(1, ids.size + 1, dtype=jnp.uint32).reshape(ids.shape) * jnp.uint32(
      2654435761)  # Knuth's multiplicative hash: a row's order matters, not only its tokens
  return jax.random.fold_in(jax.random.key(EVAL_SAMPLE_SEED), jnp.sum(ids * weights))


class ElectraForPretraining(nn.Module):
  """The generator, its samples and the discriminator, in one pass (see the module docstring).

  Returns the generator's logits at the masked positions (`mlm_logits`, [b, p, v]), the
  discriminator's per token (`rtd_logits`, [b, s]) and which tokens were replaced
  (`replaced`, [b, s], bool). Samples are drawn with a key from the `dropout` stream (the
  train step's key, folded by Flax with this module's path and call count) and, where none is
  given (evaluation), with `eval_sample_key`'s.
  """
  config: ModelConfig  # the discriminator's
  generator_config: ModelConfig
  sharing: str = 'shared'

  def setup(self):
    if self.sharing not in SHARINGS:  # the config's own check (check_electra) says it in words
      raise ValueError(f'sharing={self.sharing!r} is not one of {SHARINGS}')
    self.encoder = Encoder(self.config)
    self.discriminator_head = DiscriminatorHead(self.config)
    self.generator = Encoder(self.generator_config)
    self.generator_mlm = MlmHead(self.generator_config)
    if self.sharing == 'disentangled':
      cfg = self.config
      self.word_embedding_delta = self.param(
          'word_embedding_delta', zeros_init(('vocab', 'embed')),
          (cfg.vocab_size, cfg.embedding_width), jnp.float32)

  def __call__(self, batch: dict, *, deterministic: bool = True) -> dict:
    inputs = encoder_inputs(batch)
    if self.sharing == 'none':
      generated = self.generator(**inputs, deterministic=deterministic)
      table = self.generator.word_embedding_table()
    else:
      embedded = self.encoder.embed(inputs['input_ids'], inputs['segment_ids'],
                                    inputs.get('input_positions'), deterministic=deterministic)
      generated = self.generator(**inputs, deterministic=deterministic, embedded=embedded)
      table = self.encoder.word_embedding_table()
    mlm_logits = self.generator_mlm(generated.sequence_output, table, batch['masked_positions'])
    key = (self.make_rng('dropout') if self.has_rng('dropout')
           else eval_sample_key(batch['input_ids']))
    corrupted, replaced = corrupt(batch['input_ids'], batch['masked_positions'],
                                  batch['masked_ids'], batch['masked_weights'],
                                  sample_tokens(key, mlm_logits))
    delta = self.word_embedding_delta if self.sharing == 'disentangled' else None
    judged = self.encoder(**{**inputs, 'input_ids': corrupted}, deterministic=deterministic,
                          word_delta=delta)
    return {'mlm_logits': mlm_logits, 'replaced': replaced,
            'rtd_logits': self.discriminator_head(judged.sequence_output)}
