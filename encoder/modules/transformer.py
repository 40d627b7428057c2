"""Encoder block, encoder stack and [CLS] pooler. Shape letters: see `encoder.modules`."""

from __future__ import annotations

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from encoder.modules.attention import SelfAttention, attention_mask
from encoder.modules.common import activation, dense, layer_norm
from encoder.modules.config import ModelConfig
from encoder.modules.embeddings import Embeddings

# Logical layouts of the activations the mesh strategy pins (no-ops elsewhere): the residual
# stream [b, s, m] and the MLP's hidden [b, s, f]. Pinning these few is enough for XLA to keep
# every activation split by batch rather than by the weights' fsdp split.
ACTIVATION = ('batch', 'length', 'embed')
ACTIVATION_MLP = ('batch', 'length', 'mlp')


class Mlp(nn.Module):
  """dense -> GELU -> dense; `geglu` gates the GELU with a second projection (Shazeer, 2020)."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    cfg = self.config
    if cfg.activation == 'geglu':
      gate = dense(cfg, cfg.intermediate_size, ('embed', 'mlp'), 'gate')(x)
      up = dense(cfg, cfg.intermediate_size, ('embed', 'mlp'), 'intermediate')(x)
      h = jax.nn.gelu(gate, approximate=False) * up
    else:
      h = activation(cfg.activation, dense(cfg, cfg.intermediate_size, ('embed', 'mlp'),
                                           'intermediate')(x))
    h = nn.with_logical_constraint(h, ACTIVATION_MLP)
    return dense(cfg, cfg.hidden_size, ('mlp', 'embed'), 'output')(h)


class EncoderBlock(nn.Module):
  """Attention and MLP sublayers with residuals; LayerNorm after each (BERT) or before (pre-LN)."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool = True,
               return_probs: bool = False) -> tuple[jax.Array, jax.Array | None]:
    cfg = self.config
    attention = SelfAttention(cfg, name='attention')
    attention_norm, mlp_norm = layer_norm(cfg, 'attention_norm'), layer_norm(cfg, 'mlp_norm')
    mlp = Mlp(cfg, name='mlp')
    drop = nn.Dropout(cfg.dropout_rate)

    def attend(h):
      return attention(h, mask, deterministic=deterministic, return_probs=return_probs)

    if cfg.norm == 'pre':
      a, probs = attend(attention_norm(x))
      x = x + drop(a, deterministic=deterministic)
      x = x + drop(mlp(mlp_norm(x)), deterministic=deterministic)
    else:
      a, probs = attend(x)
      x = attention_norm(x + drop(a, deterministic=deterministic))
      x = mlp_norm(x + drop(mlp(x), deterministic=deterministic))
    return x, probs


@flax.struct.dataclass
class EncoderOutput:
  sequence_output: jax.Array  # [b, s, m]
  pooled_output: jax.Array  # [b, m]: dense + tanh of the [CLS] position ([b, e, m]: of each
  #                           of `pool_positions`' e positions, a packed row's [CLS] tokens)
  attention_probs: tuple[jax.Array, ...] | None = None  # per layer [b, h, q, k]


class Encoder(nn.Module):
  """Embeddings, `num_layers` blocks (a final LayerNorm under pre-LN) and the pooler."""
  config: ModelConfig

  def setup(self):
    cfg = self.config
    self.embeddings = Embeddings(cfg)
    self.layers = [EncoderBlock(cfg, name=f'layer_{i}') for i in range(cfg.num_layers)]
    if cfg.norm == 'pre':
      self.final_norm = layer_norm(cfg, 'final_norm')
    self.pooler = dense(cfg, cfg.hidden_size, ('embed', 'embed_out'), 'pooler')

  def __call__(self, input_ids: jax.Array, segment_ids: jax.Array | None = None,
               input_mask: jax.Array | None = None, *,
               input_segmentation: jax.Array | None = None,
               input_positions: jax.Array | None = None,
               pool_positions: jax.Array | None = None, deterministic: bool = True,
               return_probs: bool = False) -> EncoderOutput:
    """`segment_ids` are BERT's sentence A/B ids. A packed row, several examples in one, also
    gives `input_segmentation` (each token's example id, 1, 2, ...; 0 = padding), whose
    examples attend only within themselves, and `input_positions` (positions restarting at
    each example's first token); without them a row is one example, positions 0, 1, ...
    `pool_positions` [b, e] pools each row at those e positions (every packed example's
    [CLS]) instead of position 0 alone."""
    cfg = self.config
    if input_ids.shape[-1] > cfg.max_position_embeddings:
      raise ValueError(f'sequence length {input_ids.shape[-1]} exceeds '
                       f'max_position_embeddings={cfg.max_position_embeddings}')
    if segment_ids is None:
      segment_ids = jnp.zeros_like(input_ids)
    if input_mask is None:
      input_mask = jnp.ones_like(input_ids)
    x = nn.with_logical_constraint(
        self.embeddings(input_ids, segment_ids, input_positions, deterministic=deterministic),
        ACTIVATION)
    mask = attention_mask(input_mask, cfg.attention, input_segmentation)
    all_probs = []
    for layer in self.layers:
      x, probs = layer(x, mask, deterministic=deterministic, return_probs=return_probs)
      x = nn.with_logical_constraint(x, ACTIVATION)
      all_probs.append(probs)
    if cfg.norm == 'pre':
      x = self.final_norm(x)
    if pool_positions is None:
      first = x[:, 0]
    else:
      first = jnp.take_along_axis(x, pool_positions[..., None].astype(jnp.int32), axis=1)
    pooled = jnp.tanh(self.pooler(first))
    return EncoderOutput(sequence_output=x, pooled_output=pooled,
                         attention_probs=tuple(all_probs) if return_probs else None)

  def word_embedding_table(self) -> jax.Array:
    """The [vocab, hidden] matrix the MLM head decodes through (weight tying)."""
    return self.embeddings.word_embeddings.embedding
