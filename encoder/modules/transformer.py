"""Encoder block, encoder stack and pooler. Shape letters: see `encoder.modules`."""

from __future__ import annotations

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from encoder.modules.attention import SelfAttention
from encoder.modules.attention_mask import AttentionMask
from encoder.modules.config import ModelConfig
from encoder.modules.embeddings import Embeddings
from encoder.modules.layers import activation, dense, layer_norm
from encoder.modules.pooling import pool
from encoder.modules.rotary import rope_tables

# Logical layouts of the activations the mesh strategy pins (no-ops elsewhere): the residual
# stream [b, s, m] and the MLP's hidden [b, s, f]. Pinning these few is enough for XLA to keep
# every activation split by batch rather than by the weights' fsdp split.
ACTIVATION = ('batch', 'length', 'embed')
ACTIVATION_MLP = ('batch', 'length', 'mlp')


class Mlp(nn.Module):
  """dense -> GELU -> dense; `geglu` / `swiglu` gate the GELU / SiLU of one projection with a
  second (Shazeer, 2020), as ModernBERT / NeoBERT do."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    cfg = self.config
    up = dense(cfg, cfg.intermediate_size, ('embed', 'mlp'), 'intermediate')
    if cfg.activation in ('geglu', 'swiglu'):
      gate = dense(cfg, cfg.intermediate_size, ('embed', 'mlp'), 'gate')(x)
      gate = (jax.nn.gelu(gate, approximate=False) if cfg.activation == 'geglu'
              else jax.nn.silu(gate))
      h = gate * up(x)
    else:
      h = activation(cfg.activation, up(x))
    h = nn.with_logical_constraint(h, ACTIVATION_MLP)
    return dense(cfg, cfg.hidden_size, ('mlp', 'embed'), 'output', role='out')(h)


class EncoderBlock(nn.Module):
  """Attention and MLP sublayers with residuals; LayerNorm after each (BERT) or before (pre-LN).

  `normalize_input=False` drops a pre-LN block's attention norm (ModernBERT's layer 0, whose
  input the embedding norm has just normalised).
  """
  config: ModelConfig
  normalize_input: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, mask: AttentionMask, rope=None, deterministic: bool = True,
               return_probs: bool = False) -> tuple[jax.Array, jax.Array | None]:
    cfg = self.config
    attention = SelfAttention(cfg, name='attention')
    pre_norm = cfg.norm == 'pre'
    attention_norm = (layer_norm(cfg, 'attention_norm')
                      if self.normalize_input or not pre_norm else lambda h: h)
    mlp_norm = layer_norm(cfg, 'mlp_norm')
    mlp = Mlp(cfg, name='mlp')
    drop = nn.Dropout(cfg.dropout_rate)

    def attend(h):
      return attention(h, mask, rope=rope, deterministic=deterministic,
                       return_probs=return_probs)

    if pre_norm:
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
  pooled_output: jax.Array  # [b, m]: the pooled vector (the [CLS] token's or the mean of the
  #                           real tokens' per `pooling`), through dense + tanh unless
  #                           `pooler=none` ([b, e, m]: per packed example of `pool_positions`)
  attention_probs: tuple[jax.Array, ...] | None = None  # per layer [b, h, q, k]


class Encoder(nn.Module):
  """Embeddings, `num_layers` blocks (a final LayerNorm under pre-LN) and the pooler."""
  config: ModelConfig

  def setup(self):
    cfg = self.config
    self.embeddings = Embeddings(cfg)
    if cfg.embedding_width != cfg.hidden_size:  # factorized embeddings (ELECTRA): projected up
      self.embedding_projection = dense(cfg, cfg.hidden_size, (None, 'embed'),
                                        'embedding_projection')
    # model.remat: each block's activations recomputed in the backward pass, not kept (the
    # flags that shape the trace are static arguments: positions 4 and 5 with self at 0).
    block = nn.remat(EncoderBlock, static_argnums=(4, 5)) if cfg.remat else EncoderBlock
    self.layers = [block(cfg, normalize_input=i > 0 or cfg.first_attention_norm,
                         name=f'layer_{i}') for i in range(cfg.num_layers)]
    if cfg.norm == 'pre':
      self.final_norm = layer_norm(cfg, 'final_norm')
    if cfg.pooler == 'tanh':
      self.pooler = dense(cfg, cfg.hidden_size, ('embed', 'embed_out'), 'pooler')

  def __call__(self, input_ids: jax.Array, segment_ids: jax.Array | None = None,
               input_mask: jax.Array | None = None, *,
               input_segmentation: jax.Array | None = None,
               input_positions: jax.Array | None = None,
               pool_positions: jax.Array | None = None, deterministic: bool = True,
               return_probs: bool = False, embedded: jax.Array | None = None,
               word_delta: jax.Array | None = None) -> EncoderOutput:
    """`segment_ids` are BERT's sentence A/B ids. A packed row, several examples in one, also
    gives `input_segmentation` (each token's example id, 1, 2, ...; 0 = padding), whose
    examples attend only within themselves, and `input_positions` (positions restarting at
    each example's first token, for learned and rotary positions alike); without them a row
    is one example, positions 0, 1, ... `pool_positions` [b, e] pools each row's e packed
    examples (at their [CLS] tokens, or over their tokens under `pooling=mean`) instead of
    the row as one.

    `embedded` ([b, s, embedding_width]) replaces this encoder's own embeddings: an ELECTRA
    generator reads the discriminator's (`embed`); `word_delta` is passed to `Embeddings`."""
    cfg = self.config
    if cfg.position_embedding == 'learned' and input_ids.shape[-1] > cfg.max_position_embeddings:
      raise ValueError(f'sequence length {input_ids.shape[-1]} exceeds '
                       f'max_position_embeddings={cfg.max_position_embeddings}')
    if segment_ids is None:
      segment_ids = jnp.zeros_like(input_ids)
    if input_mask is None:
      input_mask = jnp.ones_like(input_ids)
    if embedded is None:
      embedded = self.embeddings(input_ids, segment_ids, input_positions,
                                 deterministic=deterministic, word_delta=word_delta)
    if cfg.embedding_width != cfg.hidden_size:
      embedded = self.embedding_projection(embedded)
    x = nn.with_logical_constraint(embedded, ACTIVATION)
    masks, ropes = self._layer_inputs(input_mask, input_segmentation, input_positions)
    all_probs = []
    for i, layer in enumerate(self.layers):
      kind = 'local' if cfg.is_local(i) else 'global'
      x, probs = layer(x, masks[kind], ropes[kind], deterministic, return_probs)
      x = nn.with_logical_constraint(x, ACTIVATION)
      all_probs.append(probs)
    if cfg.norm == 'pre':
      x = self.final_norm(x)
    pooled = pool(x, input_mask, cfg.pooling, input_segmentation, pool_positions)
    if cfg.pooler == 'tanh':
      pooled = jnp.tanh(self.pooler(pooled))
    return EncoderOutput(sequence_output=x, pooled_output=pooled,
                         attention_probs=tuple(all_probs) if return_probs else None)

  def _layer_inputs(self, input_mask, segmentation, positions) -> tuple[dict, dict]:
    """What global and local layers may attend to, and their rotary tables (made once per
    pass)."""
    cfg = self.config
    mask = AttentionMask(input_mask, segmentation, causal=cfg.attention == 'causal')
    masks = {'global': mask, 'local': mask.with_window(cfg.local_window)}
    ropes = {'global': None, 'local': None}
    if cfg.position_embedding == 'rope':
      if positions is None:
        positions = jnp.arange(input_mask.shape[-1])[None, :]
      ropes = {kind: rope_tables(positions, cfg.head_dim, theta) for kind, theta in
               (('global', cfg.rope_theta), ('local', cfg.local_rope_theta))}
    return masks, ropes

  def embed(self, input_ids: jax.Array, segment_ids: jax.Array | None = None,
            positions: jax.Array | None = None, *, deterministic: bool = True) -> jax.Array:
    """This encoder's embeddings of the ids ([b, s, embedding_width], before any projection):
    what a model sharing them (ELECTRA's generator) reads as `embedded`."""
    if segment_ids is None:
      segment_ids = jnp.zeros_like(input_ids)
    return self.embeddings(input_ids, segment_ids, positions, deterministic=deterministic)

  def word_embedding_table(self) -> jax.Array:
    """The [vocab, embedding_width] matrix the MLM head decodes through (weight tying)."""
    return self.embeddings.word_embeddings.embedding
