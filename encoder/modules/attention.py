"""Multi-head self-attention: one module, several forms of the same mathematics behind
`model.attention_impl`, all reading one mask description (`AttentionMask`: padding, packed
examples, causal, a local window).

- explicit: the whole [b, h, q, k] score matrix, masked (probabilities and dropout; what
  attention maps plot);
- blockwise: the online softmax over only the key blocks the mask reaches
  (encoder/modules/blockwise_attention.py), in plain JAX on every backend;
- splash: Pallas's TPU kernel (encoder/modules/splash_attention.py);
- cudnn: cuDNN's fused kernel on NVIDIA GPUs, through `jax.nn.dot_product_attention`;
- xla: `jax.nn.dot_product_attention` with no implementation named (plain XLA).

Which form a layer runs is `layer_form`: a function of the config and of what the layer is
given (its window, packed rows, active dropout, a request for probabilities), never of the
backend, so a model lowers for any platform from any other.

Shape letters: see `encoder.modules`.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from encoder.modules import matmul
from encoder.modules.attention_mask import AttentionMask
from encoder.modules.blockwise_attention import blockwise_attention
from encoder.modules.config import ModelConfig
from encoder.modules.layers import compute_dtype, truncated_normal, zeros_init
from encoder.modules.rotary import apply_rope
from encoder.modules.splash_attention import splash_attention, splash_takes


class _Projection(nn.Module):
  """A kernel between the hidden axis and the (heads, head_dim) axes, and its bias (None when
  `use_bias` is off), created but not applied: [m, h, d] for Q, K and V (`into_heads`),
  [h, d, m] for the output.

  They are the parameters `nn.DenseGeneral` would make under the same name (same shapes, axes,
  initial values), so checkpoints and the Hugging Face mapping see `query`, `key`, `value` and
  `out` as before, while `SelfAttention` multiplies by Q, K and V at once. DenseGeneral itself
  is not used: its initialiser reshapes a logically boxed kernel, which fails once the mesh
  strategy's logical-axis rules are in context.
  """
  config: ModelConfig
  into_heads: bool = True

  @nn.compact
  def __call__(self) -> tuple[jax.Array, jax.Array | None]:
    cfg = self.config
    heads, hidden = (cfg.num_heads, cfg.head_dim), cfg.hidden_size
    if self.into_heads:  # x [b, s, m] @ [m, h, d]
      shape, axes, flat = (hidden, *heads), ('embed', 'heads', 'kv'), (hidden, np.prod(heads))
      bias_shape, bias_axes = heads, ('heads', 'kv')
    else:  # context [b, s, h, d] @ [h, d, m]
      shape, axes, flat = (*heads, hidden), ('heads', 'kv', 'embed'), (np.prod(heads), hidden)
      bias_shape, bias_axes = (hidden,), ('embed',)

    draw = truncated_normal(cfg, 'in' if self.into_heads else 'out')

    def init(key, full_shape, dtype=jnp.float32):
      # DenseGeneral draws its kernel as [in, out] and reshapes; so do we, for equal values.
      return draw(key, tuple(int(n) for n in flat), dtype).reshape(full_shape)

    kernel = self.param('kernel', nn.with_logical_partitioning(init, axes), shape, jnp.float32)
    if not cfg.use_bias:
      return kernel, None
    bias = self.param('bias', zeros_init(bias_axes), bias_shape, jnp.float32)
    return kernel, bias


def layer_form(cfg: ModelConfig, mask: AttentionMask, *, dropout: bool, probs: bool,
               training: bool = True) -> str:
  """The form a layer with `mask` runs: `cfg.attention_impl`, or what stands in for it where
  its kernel cannot take the layer's mask, dropout or dtype.

  Probabilities (attention maps) come only from the explicit form. A row of at most one
  block gives blockwise nothing to skip: it takes the explicit form (its values exactly);
  so does a forward pass alone (`training` False) of up to two blocks, where the explicit
  form's inference path still wins (modern_mini at 512 tokens: 18.0k tokens/s against
  16.0k; at 1,024 blockwise leads, 17.4k against 7.0k: docs/performance.md).
  cuDNN (through `jax.nn.dot_product_attention`) takes padding as key lengths, causal
  masking, and 16-bit inputs, but neither dropout nor a two-sided window nor packed rows:
  those layers run blockwise. Splash takes segment ids, local and causal masks, but no
  dropout and no head size under 64 (`splash_takes`). xla keeps its behaviour: the explicit
  form when dropping out.
  """
  impl = cfg.attention_impl
  if probs or impl == 'explicit':
    return 'explicit'
  if impl == 'xla':
    return 'explicit' if dropout else 'xla'
  if impl == 'cudnn' and not (dropout or mask.window or mask.packed or cfg.dtype == 'float32'):
    return 'cudnn'
  if impl == 'splash' and not dropout and splash_takes(cfg.head_dim):
    return 'splash'
  explicit_up_to = cfg.attention_block_size * (1 if training else 2)
  return 'explicit' if mask.length <= explicit_up_to else 'blockwise'


def forms_by_layer_kind(cfg: ModelConfig, length: int, *, packed: bool,
                        training: bool) -> dict[str, str]:
  """{'global': form, 'local': form (if any layer is local)} of rows of `length` tokens: what
  `layer_form` picks for this model's layers, for the run's log."""
  ones = jnp.asarray(np.ones((1, length), np.int32))
  mask = AttentionMask(ones, ones if packed else None, causal=cfg.attention == 'causal')
  dropout = training and cfg.attention_dropout_rate > 0
  forms = {'global': layer_form(cfg, mask, dropout=dropout, probs=False, training=training)}
  if any(cfg.is_local(i) for i in range(cfg.num_layers)):
    forms['local'] = layer_form(cfg, mask.with_window(cfg.local_window), dropout=dropout,
                                probs=False, training=training)
  return forms


class SelfAttention(nn.Module):
  """Q/K/V and output projections (biases unless `use_bias` is off), rotary positions on Q and
  K when given, scaled dot-product in the form `layer_form` picks, dropout on the
  probabilities.

  Q, K and V are one matmul against their three kernels stacked ([m, 3, h, d]): one larger
  product keeps the CPU's matmul units busier than three, and the backward pass sums the
  three input gradients inside that one product instead of adding three.
  """
  config: ModelConfig

  @nn.compact
  def __call__(self, x: jax.Array, mask: AttentionMask, *, rope=None,
               deterministic: bool = True,
               return_probs: bool = False) -> tuple[jax.Array, jax.Array | None]:
    """`mask`: what each query may see (a local layer's with its window). `rope`: (cos, sin)
    [b, s, d] from `rotary.rope_tables`, or None."""
    cfg = self.config
    dtype = compute_dtype(cfg)
    params = [_Projection(cfg, name=name)() for name in ('query', 'key', 'value')]
    kernel = jnp.stack([k for k, _ in params], axis=1).astype(dtype)  # [m, 3, h, d]
    bias = jnp.stack([b for _, b in params]) if cfg.use_bias else None  # [3, h, d]
    qkv = matmul.dot_general(x.astype(dtype), kernel, (((2,), (0,)), ((), ())), bias=bias)
    dropout = not deterministic and cfg.attention_dropout_rate > 0
    form = layer_form(cfg, mask, dropout=dropout, probs=return_probs,
                      training=not deterministic)
    probs = None
    if form == 'explicit' and deterministic and not return_probs:
      context = _normalized_late(qkv, mask.dense(), rope, cfg.head_dim, dtype)
    elif form == 'explicit':
      # [b, h, s, d] each, taken apart by a split rather than by unpacking: the gradient of an
      # unpack is three pads of the [3, b, h, s, d] gradient and two adds, that of a split one
      # concatenate (MiniLM's SST-2 step at length 32: -4 to -5%, docs/performance.md).
      query, key, value = (t[0] for t in jnp.split(qkv.transpose(2, 0, 3, 1, 4), 3, axis=0))
      if rope is not None:
        cos, sin = (t[:, None] for t in rope)
        query, key = apply_rope(query, cos, sin), apply_rope(key, cos, sin)
      scores = jnp.einsum('bhqd,bhkd->bhqk', query, key) / jnp.sqrt(cfg.head_dim).astype(dtype)
      scores = jnp.where(mask.dense(), scores.astype(jnp.float32), jnp.finfo(jnp.float32).min)
      probs = jax.nn.softmax(scores, axis=-1)
      dropped = nn.Dropout(cfg.attention_dropout_rate)(probs, deterministic=deterministic)
      context = jnp.einsum('bhqk,bhkd->bqhd', dropped.astype(dtype), value)
    else:
      query, key, value = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [b, s, h, d] each
      if rope is not None:
        cos, sin = (t[:, :, None] for t in rope)
        query, key = apply_rope(query, cos, sin), apply_rope(key, cos, sin)
      context = self._fused_or_blockwise(form, query, key, value, mask, dropout)
    out_kernel, out_bias = _Projection(cfg, into_heads=False, name='out')()
    out = matmul.dot_general(context, out_kernel.astype(dtype), (((2, 3), (0, 1)), ((), ())),
                             bias=out_bias)
    return out, probs

  def _fused_or_blockwise(self, form: str, query, key, value, mask: AttentionMask,
                          dropout: bool) -> jax.Array:
    """The context [b, s, h, d] of the forms that never form the score matrix here."""
    cfg = self.config
    if form == 'blockwise':
      return blockwise_attention(
          query, key, value, mask, block=cfg.attention_block_size,
          dropout_rate=cfg.attention_dropout_rate if dropout else 0.0,
          dropout_rng=self.make_rng('dropout') if dropout else None)
    if form == 'splash':
      return splash_attention(query, key, value, mask, interpret=cfg.pallas_interpret)
    if form == 'cudnn':
      # Padding as key lengths (rows are right-padded): every query, padding ones too,
      # attends to its row's real keys, as the explicit form's mask says.
      lengths = (mask.input_mask != 0).sum(axis=-1).astype(jnp.int32)
      return jax.nn.dot_product_attention(query, key, value, is_causal=mask.causal,
                                          key_value_seq_lengths=lengths,
                                          implementation='cudnn')
    # xla: a mask of the scores' own shape, [b, 1, q, k] (not the [b, 1, 1, k] that
    # broadcasts), as jax.nn.dot_product_attention takes any mask.
    b, s = mask.input_mask.shape
    return jax.nn.dot_product_attention(
        query, key, value, mask=jnp.broadcast_to(mask.dense(), (b, 1, s, s)),
        implementation='xla')


def _normalized_late(qkv, mask, rope, head_dim: int, dtype):
  """The explicit attention of a deterministic pass (evaluation, inference), [b, s, h, d]:
  the softmax's division moved after the product with V, the mask added as a bias, and the
  two products in float32 whatever the compute dtype.

  Why: on XLA:CPU the [b, h, q, k] score tensor is the expensive part, and this form reads
  it in two fused passes (max, then exp with its sum feeding the product) instead of
  softmax's three plus a masked select: at all-MiniLM-L6-v2's shape (32 x 256 tokens, 12
  heads) 26-30 ms a layer against 148-158, its whole forward pass 20% faster
  (docs/embeddings.md). The small batched products run as fast in float32 as in bfloat16
  there, and more exactly. The values differ from the training form's by rounding only
  (7e-7 in float32); training keeps that form, whose gradient and probabilities
  (return_probs, dropout) this one does not give.
  """
  qkv = qkv.astype(jnp.float32)
  query, key, value = (t[0] for t in jnp.split(qkv.transpose(2, 0, 3, 1, 4), 3, axis=0))
  if rope is not None:
    cos, sin = (t[:, None].astype(jnp.float32) for t in rope)
    query, key = apply_rope(query, cos, sin), apply_rope(key, cos, sin)
  scores = jnp.einsum('bhqd,bhkd->bhqk', query, key) / np.float32(np.sqrt(head_dim))
  # A masked key's score sinks by 1e30: its weight is exp(-1e30) = 0 exactly, and a query
  # with no key (an all-padding row) averages every key uniformly, as softmax would.
  scores = scores + jnp.where(mask, 0.0, -1e30).astype(jnp.float32)
  weights = jnp.exp(scores - scores.max(axis=-1, keepdims=True))
  context = jnp.einsum('bhqk,bhkd->bhqd', weights, value) / weights.sum(axis=-1)[..., None]
  return context.astype(dtype).transpose(0, 2, 1, 3)
