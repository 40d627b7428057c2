"""The frozen dataclass every module reads, built from a config's model section.

Every difference between BERT (2019) and the modern encoders (ModernBERT, 2024; NeoBERT, 2025)
is a field here, so each can be swept alone: positions (`position_embedding`, `rope_theta`),
local/global attention (`local_window`, `global_every`), biases (`use_bias`), norms (`norm`,
`embedding_norm`, `first_attention_norm`, `layer_norm_eps`), the MLP (`activation`),
initialisation (`init`), and how heads read the encoder (`pooler`, `pooling`,
`classifier_head`). The fields, their defaults (BERT's) and the size presets (a `modern_*` one
sets ModernBERT's) are in encoder/config_schema.py; this module adds the checks and the
attention implementation each platform runs.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Any

from encoder import config_schema
from encoder.errors import ConfigError

ATTENTION_KINDS = ('bidirectional', 'causal')
NORMS = ('post', 'pre')
ACTIVATIONS = ('gelu', 'gelu_tanh', 'geglu', 'swiglu')
DTYPES = ('float32', 'bfloat16')
POSITION_EMBEDDINGS = ('learned', 'rope', 'none')
INITS = ('bert', 'modern')
POOLERS = ('tanh', 'none')
# electra.embedding_sharing: what the generator and discriminator share (modules/electra.py)
EMBEDDING_SHARINGS = ('shared', 'disentangled', 'none')
POOLINGS = ('cls', 'mean')
CLASSIFIER_HEADS = ('linear', 'mlp')
# How attention is computed (the mathematics is the same): `explicit` forms the score matrix
# with einsums (probabilities and dropout available); `xla` and `cudnn` call
# `jax.nn.dot_product_attention` (plain XLA, or cuDNN's fused kernel on NVIDIA GPUs);
# `blockwise` is the online softmax over only the key blocks the mask reaches (plain JAX);
# `splash` is Pallas's TPU kernel. encoder/modules/attention.py picks per layer.
ATTENTION_IMPLS = ('auto', 'explicit', 'xla', 'cudnn', 'blockwise', 'splash')


# BERT-base's fields as the schema holds them: the dataclass's defaults, for modules built by hand.
BASE = config_schema.fill_model({'vocab_size': config_schema.data_section().vocab_size})


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Hashable, so it can be a static field of Flax modules and jit. The defaults are BERT-base's
  (config_schema.py): a config gives every field (`model_config`)."""
  vocab_size: int = BASE['vocab_size']
  hidden_size: int = BASE['hidden_size']
  num_layers: int = BASE['num_layers']
  num_heads: int = BASE['num_heads']
  intermediate_size: int = BASE['intermediate_size']
  max_position_embeddings: int = BASE['max_position_embeddings']
  type_vocab_size: int = BASE['type_vocab_size']  # 0: no segment embeddings (ModernBERT)
  # Factorized embeddings: tables this wide, projected to hidden_size (ELECTRA-Small's 128 for
  # 256); 0: hidden_size, no projection (BERT).
  embedding_size: int = BASE['embedding_size']
  attention: str = BASE['attention']
  attention_impl: str = 'explicit'  # never 'auto' here: `model_config` resolves it
  attention_block_size: int = 256  # the blockwise form's tile of keys (see attention.py)
  remat: bool = False  # recompute each layer's activations in the backward pass
  # Pallas kernels (splash) in interpret mode: set by `model_config` off TPU, never by a config.
  pallas_interpret: bool = False
  norm: str = BASE['norm']
  activation: str = BASE['activation']
  dtype: str = BASE['dtype']
  dropout_rate: float = BASE['dropout_rate']
  attention_dropout_rate: float = BASE['attention_dropout_rate']
  initializer_range: float = BASE['initializer_range']
  layer_norm_eps: float = BASE['layer_norm_eps']
  # learned: a table of absolute positions (BERT); rope: rotary on Q and K (Su et al., 2021),
  # per example's positions in packed rows; none: no position information.
  position_embedding: str = BASE['position_embedding']
  rope_theta: float = BASE['rope_theta']  # RoPE base of global layers
  local_rope_theta: float = BASE['local_rope_theta']  # ... and of local (windowed) layers
  # Local attention: a local layer's token sees keys at most local_window // 2 positions away
  # (ModernBERT's total window, 128 = 64 each side). Layer i is global when
  # i % global_every == 0 (ModernBERT: 0, 3, 6, ...); global_every=0: every layer local;
  # local_window=0: every layer global.
  local_window: int = BASE['local_window']
  global_every: int = BASE['global_every']
  use_bias: bool = BASE['use_bias']  # biases of dense layers and LayerNorms (ModernBERT: none)
  embedding_norm: bool = BASE['embedding_norm']  # LayerNorm after the embeddings
  # pre-LN: normalise layer 0's input (ModernBERT does not)
  first_attention_norm: bool = BASE['first_attention_norm']
  init: str = BASE['init']  # bert: truncated normal, initializer_range; modern: ModernBERT's
  init_cutoff: float = BASE['init_cutoff']  # modern: truncated at +-init_cutoff deviations
  pooler: str = BASE['pooler']  # tanh: dense + tanh of the pooled vector (BERT, NSP) | none
  pooling: str = BASE['pooling']  # cls: the [CLS] token's vector | mean of the real tokens'
  classifier_head: str = BASE['classifier_head']  # linear: dropout + dense | mlp: + act, norm

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
    if self.attention_block_size < 1:
      raise ConfigError(f'model.attention_block_size={self.attention_block_size} must be >= 1')
    for name in ('local_window', 'global_every', 'type_vocab_size', 'embedding_size'):
      if getattr(self, name) < 0:
        raise ConfigError(f'model.{name}={getattr(self, name)} must be >= 0')
    if self.local_window % 2:
      raise ConfigError(f'model.local_window={self.local_window} is the total window '
                        '(ModernBERT: 128 = 64 each side): give an even number')

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads

  @property
  def embedding_width(self) -> int:
    """The embedding tables' width: `embedding_size`, or the hidden size when it is 0."""
    return self.embedding_size or self.hidden_size

  def is_local(self, layer: int) -> bool:
    """Layer `layer` attends within the window (False: to the whole row)."""
    if not self.local_window:
      return False
    return self.global_every == 0 or layer % self.global_every != 0


# The fields an `init_from` run dictates: its weights only fit an encoder of its own shape and
# architecture (dtype, dropout and the attention implementation stay the new run's choice).
ARCHITECTURE_FIELDS = ('size', *(f.name for f in dataclasses.fields(ModelConfig)
                                 if f.name not in ('attention_impl', 'dtype', 'dropout_rate',
                                                   'attention_dropout_rate',
                                                   'attention_block_size', 'remat',
                                                   'pallas_interpret')))


# The platform models are built for inside `building_for` (None: this process's backend).
_BUILD_PLATFORM: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    'build_platform', default=None)


@contextlib.contextmanager
def building_for(platform: str):
  """Models configured inside take `attention_impl=auto` (and splash's interpret mode) for
  `platform` instead of this process's backend: `--compile_for` builds on a CPU host the model
  a TPU or a GPU would build, and compiles that (encoder/train/compile_report.py)."""
  token = _BUILD_PLATFORM.set(platform)
  try:
    yield
  finally:
    _BUILD_PLATFORM.reset(token)


def local_platform() -> str:
  """This process's JAX platform, with ROCm told apart from CUDA (both report 'gpu')."""
  import jax  # lazy: the config is read and checked (launch.py --print_config) without JAX
  platform = jax.default_backend()
  if platform == 'gpu':
    client = getattr(jax.devices()[0], 'client', None)
    if 'rocm' in str(getattr(client, 'platform_version', '')).lower():
      return 'rocm'
  return platform


def attention_impl(requested: str, platform: str, dtype: str, dropout_rate: float) -> str:
  """`model.attention_impl`, with `auto` made concrete for `platform` (cpu, gpu/cuda, tpu).

  auto: splash on TPU; cudnn on an NVIDIA GPU; blockwise elsewhere (CPU, ROCm). Each layer
  then runs that form where its kernel takes the layer's mask, dropout and dtype, and the
  blockwise one where not (`attention.layer_form`); a row of one block runs the explicit
  form, which blockwise equals there. `dtype` and `dropout_rate` are the run's: kept in the
  signature so a platform rule may read them.
  """
  if requested not in ATTENTION_IMPLS:
    raise ConfigError(f"model.attention_impl='{requested}' is not one of "
                      f"{', '.join(ATTENTION_IMPLS)}")
  nvidia = platform in ('gpu', 'cuda')
  if requested == 'cudnn' and not nvidia:
    raise ConfigError(f"model.attention_impl='cudnn' needs an NVIDIA GPU (this is {platform}): "
                      "use auto, explicit or xla")
  del dtype, dropout_rate  # read per layer by attention.layer_form
  if requested != 'auto':
    return requested
  if platform == 'tpu':
    return 'splash'
  if nvidia:
    return 'cudnn'
  return 'blockwise'


def model_config(model: Any, vocab_size: int | None = None, platform: str | None = None
                 ) -> ModelConfig:
  """`config.model` (a ConfigDict or dict; a resolved config's is complete) as a ModelConfig,
  before any tracing: unset preset fields filled as `config_schema.fill_model` fills them, the
  vocabulary from `vocab_size` (the tokenizer's) while the data has not answered it, and
  `attention_impl=auto` made the implementation for `platform` (default: the one
  `building_for` names, else this process's JAX backend), so no module asks the backend while
  it is traced and a model can be built for (and lowered to) a platform other than the local
  one."""
  resolved = config_schema.fill_model(model)
  if 'vocab_size' not in resolved:
    if vocab_size is None:
      raise ConfigError('model.vocab_size is unset and no tokenizer gives one')
    resolved['vocab_size'] = vocab_size
  resolved.pop('size')
  unknown = sorted(set(resolved) - {f.name for f in dataclasses.fields(ModelConfig)})
  if unknown:
    raise ConfigError(f"unknown model field(s): {', '.join(unknown)}")
  platform = platform or _BUILD_PLATFORM.get() or local_platform()
  resolved['attention_impl'] = attention_impl(
      resolved['attention_impl'], platform, resolved['dtype'],
      resolved['attention_dropout_rate'])
  # Off TPU, splash runs as Pallas interprets it (exact, slow: what the tests check).
  resolved['pallas_interpret'] = resolved['attention_impl'] == 'splash' and platform != 'tpu'
  return ModelConfig(**resolved)


def checked(model: Any) -> None:
  """Refuses what ModelConfig refuses in `config.model`, without asking JAX for a platform
  (`attention_impl` as a name only: whether `cudnn` runs is the machine's to say)."""
  fields = config_schema.fill_model(model)
  fields.pop('size')
  if fields['attention_impl'] not in ATTENTION_IMPLS:
    raise ConfigError(f"model.attention_impl='{fields['attention_impl']}' is not one of "
                      f"{', '.join(ATTENTION_IMPLS)}")
  unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(ModelConfig)})
  if unknown:
    raise ConfigError(f"unknown model field(s): {', '.join(unknown)}")
  ModelConfig(**{**fields, 'vocab_size': fields.get('vocab_size') or 1,
                 'attention_impl': 'explicit'})


def check_generator_size(fraction: float) -> None:
  """Refuses an ELECTRA generator that is not a fraction of its discriminator."""
  if not 0.0 < float(fraction) <= 1.0:
    raise ConfigError(f'electra.generator_size={fraction}: give a fraction of the '
                      "discriminator's width in (0, 1] (ELECTRA: 1/4 to 1/3)")


def check_electra(electra: Any, nsp: bool) -> None:
  """Refuses, in one line each, the `electra` settings the model cannot take (without JAX:
  `launch.py --print_config` and the trainer's resolve call it before anything is written)."""
  if electra.embedding_sharing not in EMBEDDING_SHARINGS:
    raise ConfigError(f"electra.embedding_sharing='{electra.embedding_sharing}' is not one of "
                      f"{', '.join(EMBEDDING_SHARINGS)}")
  check_generator_size(electra.generator_size)
  if not float(electra.discriminator_weight) >= 0.0:
    raise ConfigError(f'electra.discriminator_weight={electra.discriminator_weight} must be >= 0')
  if nsp:
    raise ConfigError('ELECTRA has no next-sentence head: set data.nsp=false')
