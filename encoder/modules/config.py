"""The model's shape: size presets and the frozen dataclass every module reads."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from encoder.errors import ConfigError

# (num_layers, hidden_size, num_heads) of the BERT family (Turc et al., 2019; Devlin et al., 2019).
SIZES = {
    'tiny': (2, 128, 2),
    'mini': (4, 256, 4),
    'small': (4, 512, 8),
    'medium': (8, 512, 8),
    'base': (12, 768, 12),
    'large': (24, 1024, 16),
}
ATTENTION_KINDS = ('bidirectional', 'causal')
NORMS = ('post', 'pre')
ACTIVATIONS = ('gelu', 'gelu_tanh', 'geglu')
DTYPES = ('float32', 'bfloat16')
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
  type_vocab_size: int = 2
  attention: str = 'bidirectional'
  attention_impl: str = 'explicit'  # never 'auto' here: `model_config` resolves it
  norm: str = 'post'
  activation: str = 'gelu'
  dtype: str = 'float32'
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  initializer_range: float = 0.02
  layer_norm_eps: float = 1e-12

  def __post_init__(self):
    for name, value, allowed in (('attention', self.attention, ATTENTION_KINDS),
                                 ('attention_impl', self.attention_impl, ATTENTION_IMPLS[1:]),
                                 ('norm', self.norm, NORMS),
                                 ('activation', self.activation, ACTIVATIONS),
                                 ('dtype', self.dtype, DTYPES)):
      if value not in allowed:
        raise ConfigError(f"model.{name}='{value}' is not one of {', '.join(allowed)}")
    if self.hidden_size % self.num_heads:
      raise ConfigError(f'model.hidden_size={self.hidden_size} is not divisible by '
                        f'model.num_heads={self.num_heads}')

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads


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


def model_config(model: Any, vocab_size: int | None = None, platform: str | None = None
                 ) -> ModelConfig:
  """Resolves `config.model` (a ConfigDict or dict) into a ModelConfig, before any tracing.

  The size preset fills layers/hidden/heads; any field set explicitly wins; the intermediate
  size defaults to 4 x hidden; the vocabulary defaults to `vocab_size` (the tokenizer's);
  `attention_impl=auto` becomes the implementation for `platform` (default: this process's
  JAX backend), so no module asks the backend while it is traced and a model can be built
  for (and lowered to) a platform other than the local one.
  """
  fields = dict(model)
  dropout = fields.get('attention_dropout_rate')
  fields['attention_impl'] = attention_impl(
      fields.get('attention_impl') or 'auto', platform or local_platform(),
      fields.get('dtype') or ModelConfig.dtype,
      ModelConfig.attention_dropout_rate if dropout is None else dropout)
  size = fields.pop('size', 'base')
  if size not in SIZES:
    raise ConfigError(f"model.size='{size}' is not one of {', '.join(SIZES)}")
  layers, hidden, heads = SIZES[size]
  preset = {'num_layers': layers, 'hidden_size': hidden, 'num_heads': heads}
  values = {k: v for k, v in fields.items() if v is not None}
  resolved = {**preset, **values}
  resolved.setdefault('intermediate_size', 4 * resolved['hidden_size'])
  if 'vocab_size' not in resolved:
    if vocab_size is None:
      raise ConfigError('model.vocab_size is unset and no tokenizer gives one')
    resolved['vocab_size'] = vocab_size
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
