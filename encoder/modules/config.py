"""The model's shape: size presets and the frozen dataclass every module reads.

Every difference between BERT (2019) and the modern encoders (ModernBERT, 2024; NeoBERT, 2025)
is a field here, so each can be swept alone: positions (`position_embedding`, `rope_theta`),
local/global attention (`local_window`, `global_every`), biases (`use_bias`), norms (`norm`,
`embedding_norm`, `first_attention_norm`, `layer_norm_eps`), the MLP (`activation`),
initialisation (`init`), and how heads read the encoder (`pooler`, `pooling`,
`classifier_head`). The defaults are BERT's; a `modern_*` size preset sets ModernBERT's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from encoder.errors import ConfigError

# (num_layers, hidden_size, num_heads) of the BERT family (Turc et al., 2019; Devlin et al., 2019).
BERT_SIZES = {
    'tiny': (2, 128, 2),
    'mini': (4, 256, 4),
    'small': (4, 512, 8),
    'medium': (8, 512, 8),
    'base': (12, 768, 12),
    'large': (24, 1024, 16),
}
# ModernBERT's architecture (Warner et al., 2024; transformers' ModernBertConfig): pre-LN with a
# final norm and no norm before layer 0 (the embedding norm just ran), no biases, GeGLU, RoPE
# (theta 160k on global layers, 10k on local ones), a 128-token window (64 each side) on every
# layer but each third (0, 3, 6, ...), no segment embeddings, no pooler, and a dense + GELU +
# norm before each fine-tuning classifier.
MODERN_ARCHITECTURE = {
    'norm': 'pre', 'first_attention_norm': False, 'embedding_norm': True, 'use_bias': False,
    'activation': 'geglu', 'position_embedding': 'rope', 'rope_theta': 160_000.0,
    'local_rope_theta': 10_000.0, 'local_window': 128, 'global_every': 3,
    'type_vocab_size': 0, 'max_position_embeddings': 8192, 'layer_norm_eps': 1e-5,
    'init': 'modern', 'pooler': 'none', 'pooling': 'cls', 'classifier_head': 'mlp'}
# ModernBERT-base and -large exactly; tiny and mini take BERT-tiny/mini's layers, width and
# heads with base's MLP ratio (1.5), their window scaled to the 64-128-token CPU sequences.
MODERN_SIZES = {
    'modern_tiny': dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=192,
                        local_window=32),
    'modern_mini': dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=384,
                        local_window=64),
    'modern_base': dict(num_layers=22, hidden_size=768, num_heads=12, intermediate_size=1152),
    'modern_large': dict(num_layers=28, hidden_size=1024, num_heads=16, intermediate_size=2624),
}
SIZES = (*BERT_SIZES, *MODERN_SIZES)
ATTENTION_KINDS = ('bidirectional', 'causal')
NORMS = ('post', 'pre')
ACTIVATIONS = ('gelu', 'gelu_tanh', 'geglu', 'swiglu')
DTYPES = ('float32', 'bfloat16')
POSITION_EMBEDDINGS = ('learned', 'rope', 'none')
INITS = ('bert', 'modern')
POOLERS = ('tanh', 'none')
POOLINGS = ('cls', 'mean')
CLASSIFIER_HEADS = ('linear', 'mlp')
# How attention is computed (the mathematics is the same): `explicit` forms the score matrix
# with einsums (probabilities and dropout available); `xla` and `cudnn` call
# `jax.nn.dot_product_attention` (plain XLA, or cuDNN's fused kernel on NVIDIA GPUs).
ATTENTION_IMPLS = ('auto', 'explicit', 'xla', 'cudnn')


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Hashable, so it can be a static field of Flax modules and jit."""
  vocab_size: int = 30522
  hidden_size: int = 768
  num_layers: int = 12
  num_heads: int = 12
  intermediate_size: int = 3072
  max_position_embeddings: int = 512
  type_vocab_size: int = 2  # 0: no segment embeddings (ModernBERT)
  attention: str = 'bidirectional'
  attention_impl: str = 'explicit'  # never 'auto' here: `model_config` resolves it
  norm: str = 'post'
  activation: str = 'gelu'
  dtype: str = 'float32'
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  initializer_range: float = 0.02
  layer_norm_eps: float = 1e-12
  # learned: a table of absolute positions (BERT); rope: rotary on Q and K (Su et al., 2021),
  # per example's positions in packed rows; none: no position information.
  position_embedding: str = 'learned'
  rope_theta: float = 10_000.0  # RoPE base of global layers
  local_rope_theta: float = 10_000.0  # ... and of local (windowed) layers
  # Local attention: a local layer's token sees keys at most local_window // 2 positions away
  # (ModernBERT's total window, 128 = 64 each side). Layer i is global when
  # i % global_every == 0 (ModernBERT: 0, 3, 6, ...); global_every=0: every layer local;
  # local_window=0: every layer global.
  local_window: int = 0
  global_every: int = 1
  use_bias: bool = True  # biases of dense layers and LayerNorms (ModernBERT: none)
  embedding_norm: bool = True  # LayerNorm after the embeddings
  first_attention_norm: bool = True  # pre-LN: normalise layer 0's input (ModernBERT does not)
  init: str = 'bert'  # bert: truncated normal, initializer_range; modern: ModernBERT's
  init_cutoff: float = 2.0  # modern: truncated at +-init_cutoff standard deviations
  pooler: str = 'tanh'  # tanh: dense + tanh of the pooled vector (BERT, NSP); none: the vector
  pooling: str = 'cls'  # the pooled vector: the [CLS] token's, or the mean of the real tokens
  classifier_head: str = 'linear'  # linear: dropout + dense; mlp: dense + act + norm first

  def __post_init__(self):
    for name, value, allowed in (('attention', self.attention, ATTENTION_KINDS),
                                 ('attention_impl', self.attention_impl, ATTENTION_IMPLS[1:]),
                                 ('norm', self.norm, NORMS),
                                 ('activation', self.activation, ACTIVATIONS),
                                 ('dtype', self.dtype, DTYPES),
                                 ('position_embedding', self.position_embedding,
                                  POSITION_EMBEDDINGS),
                                 ('init', self.init, INITS),
                                 ('pooler', self.pooler, POOLERS),
                                 ('pooling', self.pooling, POOLINGS),
                                 ('classifier_head', self.classifier_head, CLASSIFIER_HEADS)):
      if value not in allowed:
        raise ConfigError(f"model.{name}='{value}' is not one of {', '.join(allowed)}")
    if self.hidden_size % self.num_heads:
      raise ConfigError(f'model.hidden_size={self.hidden_size} is not divisible by '
                        f'model.num_heads={self.num_heads}')
    if self.position_embedding == 'rope' and self.head_dim % 2:
      raise ConfigError(f'model.position_embedding=rope needs an even head size '
                        f'(hidden_size / num_heads = {self.head_dim})')
    for name in ('local_window', 'global_every', 'type_vocab_size'):
      if getattr(self, name) < 0:
        raise ConfigError(f'model.{name}={getattr(self, name)} must be >= 0')
    if self.local_window % 2:
      raise ConfigError(f'model.local_window={self.local_window} is the total window '
                        '(ModernBERT: 128 = 64 each side): give an even number')

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads

  def is_local(self, layer: int) -> bool:
    """Layer `layer` attends within the window (False: to the whole row)."""
    if not self.local_window:
      return False
    return self.global_every == 0 or layer % self.global_every != 0


# The fields an `init_from` run dictates: its weights only fit an encoder of its own shape and
# architecture (dtype, dropout and the attention implementation stay the new run's choice).
ARCHITECTURE_FIELDS = ('size', *(f.name for f in dataclasses.fields(ModelConfig)
                                 if f.name not in ('attention_impl', 'dtype', 'dropout_rate',
                                                   'attention_dropout_rate')))


def local_platform() -> str:
  """This process's JAX platform, with ROCm told apart from CUDA (both report 'gpu')."""
  platform = jax.default_backend()
  if platform == 'gpu':
    client = getattr(jax.devices()[0], 'client', None)
    if 'rocm' in str(getattr(client, 'platform_version', '')).lower():
      return 'rocm'
  return platform


def attention_impl(requested: str, platform: str, dtype: str, dropout_rate: float) -> str:
  """`model.attention_impl`, with `auto` made concrete for `platform` (cpu, gpu/cuda, tpu).

  auto: explicit on CPU (no fused kernel there, and the explicit form measured faster than
  the XLA one); xla on TPU; cudnn on an NVIDIA GPU for bfloat16 without attention dropout
  (the fused kernel has neither dropout nor probabilities); explicit otherwise.
  """
  if requested not in ATTENTION_IMPLS:
    raise ConfigError(f"model.attention_impl='{requested}' is not one of "
                      f"{', '.join(ATTENTION_IMPLS)}")
  nvidia = platform in ('gpu', 'cuda')
  if requested == 'cudnn' and not nvidia:
    raise ConfigError(f"model.attention_impl='cudnn' needs an NVIDIA GPU (this is {platform}): "
                      "use auto, explicit or xla")
  if requested != 'auto':
    return requested
  if platform == 'tpu':
    return 'xla'
  if nvidia and dtype == 'bfloat16' and not dropout_rate:
    return 'cudnn'
  return 'explicit'


def preset(size: str) -> dict:
  """The fields `model.size` fills: BERT's shape (the architecture fields keep their BERT
  defaults), or ModernBERT's shape and architecture."""
  if size in BERT_SIZES:
    layers, hidden, heads = BERT_SIZES[size]
    return {'num_layers': layers, 'hidden_size': hidden, 'num_heads': heads}
  if size in MODERN_SIZES:
    return {**MODERN_ARCHITECTURE, **MODERN_SIZES[size]}
  raise ConfigError(f"model.size='{size}' is not one of {', '.join(SIZES)}")


def model_config(model: Any, vocab_size: int | None = None, platform: str | None = None
                 ) -> ModelConfig:
  """Resolves `config.model` (a ConfigDict or dict) into a ModelConfig, before any tracing.

  The size preset fills what is unset (None): layers/hidden/heads, and for `modern_*` every
  architecture field; any field set explicitly wins; the intermediate size defaults to
  4 x hidden; the vocabulary defaults to `vocab_size` (the tokenizer's);
  `attention_impl=auto` becomes the implementation for `platform` (default: this process's
  JAX backend), so no module asks the backend while it is traced and a model can be built
  for (and lowered to) a platform other than the local one.
  """
  fields = dict(model)
  values = {k: v for k, v in fields.items() if v is not None}
  resolved = {**preset(values.pop('size', 'base')), **values}
  resolved.setdefault('intermediate_size', 4 * resolved['hidden_size'])
  if 'vocab_size' not in resolved:
    if vocab_size is None:
      raise ConfigError('model.vocab_size is unset and no tokenizer gives one')
    resolved['vocab_size'] = vocab_size
  resolved['attention_impl'] = attention_impl(
      resolved.get('attention_impl') or 'auto', platform or local_platform(),
      resolved.get('dtype') or ModelConfig.dtype,
      resolved.get('attention_dropout_rate', ModelConfig.attention_dropout_rate))
  known = {f.name for f in dataclasses.fields(ModelConfig)}
  unknown = sorted(set(resolved) - known)
  if unknown:
    raise ConfigError(f"unknown model field(s): {', '.join(unknown)}")
  return ModelConfig(**resolved)


def resolved_fields(model: Any, vocab_size: int | None = None) -> dict:
  """`config.model` with every field the preset or a default fills written out, so a saved
  config.json states the architecture in numbers (what `encoder.load` rebuilds from).
  `attention_impl` stays as asked: it is a choice of the machine, not of the model, so a
  checkpoint trained on a GPU with `auto` loads on a CPU with that machine's choice."""
  resolved = dataclasses.asdict(model_config(model, vocab_size))
  resolved['attention_impl'] = dict(model).get('attention_impl') or 'auto'
  return {'size': dict(model).get('size', 'base'), **resolved}
