"""Multi-head self-attention over the full score matrix, masked by padding or packed examples
(and causally, for ablations).

Shape letters: see `encoder.modules`.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from encoder.modules import matmul
from encoder.modules.config import ModelConfig
from encoder.modules.layers import compute_dtype, truncated_normal, zeros_init
from encoder.modules.rotary import apply_rope


def attention_mask(input_mask: jax.Array, kind: str,
                   segmentation: jax.Array | None = None, window: int = 0) -> jax.Array:
  """Boolean [batch, 1, query (or 1), key] mask: True where a query may attend to a key.

  Unpacked (`segmentation` None): every query (padding queries too) attends to every real
  key. Packed: `segmentation` is each token's example id within its row (t5x's
  `*_segmentation`; 0 = padding), and the mask is block-diagonal: a token attends only to the
  tokens of its own example, and padding only to padding. `causal` further keeps only keys at
  or before the query. Padding queries' outputs are never read; they attend to something
  rather than produce all-masked rows. `window` > 0 (a local layer's total window) further
  keeps only keys at most window // 2 positions from the query, as ModernBERT's sliding
  window does (|q - k| <= 64 for its 128).
  """
  if segmentation is None:
    keys = input_mask.astype(bool)[:, None, None, :]
  else:
    keys = (segmentation[:, :, None] == segmentation[:, None, :])[:, None]
  seq = input_mask.shape[-1]
  if kind == 'causal':
    keys = keys & jnp.tril(jnp.ones((seq, seq), bool))[None, None]
  if window:
    index = jnp.arange(seq)
    keys = keys & (jnp.abs(index[:, None] - index[None, :]) <= window // 2)[None, None]
  return keys


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


class SelfAttention(nn.Module):
  """Q/K/V and output projections (biases unless `use_bias` is off), rotary positions on Q and
  K when given, scaled dot-product, dropout on the probabilities.

  Q, K and V are one matmul against their three kernels stacked ([m, 3, h, d]): one larger
  product keeps the CPU's matmul units busier than three, and the backward pass sums the
  three input gradients inside that one product instead of adding three.

  `config.attention_impl` (made concrete by `model_config`, never by asking the backend here)
  picks how scores are formed: `explicit` computes them with einsums in the [b, h, s, d] layout
  (float32 softmax); `xla` calls `jax.nn.dot_product_attention` with no implementation named,
  which is plain XLA (no fused kernel); `cudnn` asks it for cuDNN's fused kernel (NVIDIA GPUs
  only). Only the explicit form returns probabilities or drops them out, so it is taken
  whenever either is needed, whatever the implementation asked.
  """
  config: ModelConfig

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, rope=None, deterministic: bool = True,
               return_probs: bool = False) -> tuple[jax.Array, jax.Array | None]:
    """`mask`: `attention_mask(...)`, made once per forward pass by the encoder (a local
    layer's with its band). `rope`: (cos, sin) [b, s, d] from `rotary.rope_tables`, or None."""
    cfg = self.config
    dtype = compute_dtype(cfg)
    params = [_Projection(cfg, name=name)() for name in ('query', 'key', 'value')]
    kernel = jnp.stack([k for k, _ in params], axis=1).astype(dtype)  # [m, 3, h, d]
    qkv = matmul.dot_general(x.astype(dtype), kernel, (((2,), (0,)), ((), ())))
    if cfg.use_bias:
      qkv = qkv + jnp.stack([b for _, b in params]).astype(dtype)  # [3, h, d]
    dropout_active = not deterministic and cfg.attention_dropout_rate > 0
    probs = None
    if cfg.attention_impl == 'explicit' and deterministic and not return_probs:
      context = _normalized_late(qkv, mask, rope, cfg.head_dim, dtype)
    elif return_probs or dropout_active or cfg.attention_impl == 'explicit':
      # [b, h, s, d] each, taken apart by a split rather than by unpacking: the gradient of an
      # unpack is three pads of the [3, b, h, s, d] gradient and two adds, that of a split one
      # concatenate (MiniLM's SST-2 step at length 32: -4 to -5%, docs/performance.md).
      query, key, value = (t[0] for t in jnp.split(qkv.transpose(2, 0, 3, 1, 4), 3, axis=0))
      if rope is not None:
        cos, sin = (t[:, None] for t in rope)
        query, key = apply_rope(query, cos, sin), apply_rope(key, cos, sin)
      scores = jnp.einsum('bhqd,bhkd->bhqk', query, key) / jnp.sqrt(cfg.head_dim).astype(dtype)
      scores = jnp.where(mask, scores.astype(jnp.float32), jnp.finfo(jnp.float32).min)
      probs = jax.nn.softmax(scores, axis=-1)
      dropped = nn.Dropout(cfg.attention_dropout_rate)(probs, deterministic=deterministic)
      context = jnp.einsum('bhqk,bhkd->bqhd', dropped.astype(dtype), value)
    else:
      query, key, value = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [b, s, h, d] each
      if rope is not None:
        cos, sin = (t[:, :, None] for t in rope)
        query, key = apply_rope(query, cos, sin), apply_rope(key, cos, sin)
      # cuDNN takes a mask only as a bias of the scores' own shape: [b, 1, q, k], not the
      # [b, 1, 1, k] that broadcasts; any mask (padding anywhere, causal) stays exact. Packed
      # rows come as the same mask: dot_product_attention's query/key_seq_lengths describe
      # one example per row, so they cannot say where packed examples begin. A local layer's
      # band travels in the mask too: cuDNN's sliding window is one-sided (causal) only.
      context = jax.nn.dot_product_attention(
          query, key, value, mask=jnp.broadcast_to(mask, (x.shape[0], 1, x.shape[1], x.shape[1])),
          implementation=cfg.attention_impl)
    out_kernel, out_bias = _Projection(cfg, into_heads=False, name='out')()
    out = matmul.dot_general(context, out_kernel.astype(dtype), (((2, 3), (0, 1)), ((), ())))
    if out_bias is not None:
      out = out + out_bias.astype(dtype)
    return out, probs


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
