"""Hugging Face ModernBERT (ModernBertModel, ModernBertForMaskedLM, and the fine-tuned
ModernBertFor{SequenceClassification,TokenClassification,QuestionAnswering}) <-> our pre-LN
encoder.

Pure numpy, no torch. ModernBERT is our encoder with `model.size=modern_*`'s architecture:
pre-LN without layer 0's attention norm, RoPE, local/global layers, GeGLU (or SwiGLU), no
segment embeddings and no pooler. Its fused kernels split into ours: `Wqkv` [3 h d, m] into
query/key/value [m, h, d]; `Wi` [2 f, m] into our `gate` (its first half, the one the GELU
sees) and `intermediate` (the second). `hf_to_ours` and `ours_to_hf` are exact inverses
(transposes, reshapes and slices), so a round trip is bitwise. The tokenizer is the
byte-level BPE of tokenizer.json.

A config field we do not reproduce is refused in one line naming it: a model converted
anyway would silently compute something else.
"""

from __future__ import annotations

import os

import numpy as np

from encoder import storage
from encoder.configs import nested_get, nested_set
from encoder.data.tokenizer import JsonTokenizer, load_tokenizer
from encoder.errors import CheckpointError, EncoderError
from encoder.hf import heads
from encoder.hf.family import Family, reading_fields

MODEL_TYPE = 'modernbert'
# ModernBERT's `hidden_activation` of its gated MLP -> ours.
ACTIVATIONS = {'gelu': 'geglu', 'silu': 'swiglu', 'swish': 'swiglu'}
OUR_ACTIVATIONS = {'geglu': 'gelu', 'swiglu': 'silu'}
_BIAS_FLAGS = ('attention_bias', 'mlp_bias', 'norm_bias', 'classifier_bias')
_LAYER_TYPES = ('full_attention', 'sliding_attention')
_THETAS = {'full_attention': ('global_rope_theta', 160_000.0),
           'sliding_attention': ('local_rope_theta', 10_000.0)}


def _refuse(field: str, value, why: str) -> CheckpointError:
  return CheckpointError(f'ModernBERT config field {field}={value!r} {why}: this model does not '
                         'convert')


def layer_types(hf: dict, num_layers: int) -> list[str]:
  """The config's layer types: `layer_types`, else (older configs) a global layer every
  `global_attn_every_n_layers` counted from 0, as transformers derives them."""
  types = hf.get('layer_types')
  if types is None:
    every = hf.get('global_attn_every_n_layers', 3)
    if not isinstance(every, int) or every < 1:
      raise _refuse('global_attn_every_n_layers', every, 'is not a positive integer')
    return ['sliding_attention' if i % every else 'full_attention' for i in range(num_layers)]
  if (not isinstance(types, list) or len(types) != num_layers
      or any(t not in _LAYER_TYPES for t in types)):
    raise _refuse('layer_types', types, f'is not {num_layers} of {", ".join(_LAYER_TYPES)}')
  return types


def window_fields(types: list[str], local_attention: int) -> dict:
  """(local_window, global_every) that give exactly `types`, or a refusal naming layer_types."""
  n = len(types)
  if 'sliding_attention' not in types:
    return {'local_window': 0, 'global_every': 1}
  pattern = {'local_window': int(local_attention)}
  if 'full_attention' not in types:
    return {**pattern, 'global_every': 0}
  for every in range(2, n + 1):
    if types == ['sliding_attention' if i % every else 'full_attention' for i in range(n)]:
      return {**pattern, 'global_every': every}
  raise _refuse('layer_types', types, 'has no global layer every N layers counted from 0, '
                'which is the pattern model.global_every expresses')


def _rope_theta(hf: dict, layer_type: str) -> float:
  every_type = hf.get('rope_parameters') or {}
  params = (every_type.get(layer_type) or {}) if isinstance(every_type, dict) else None
  if not isinstance(params, dict):
    raise _refuse('rope_parameters', every_type, f'has no object for {layer_type}')
  rope_type = params.get('rope_type', 'default')
  if rope_type != 'default':
    raise _refuse(f'rope_parameters.{layer_type}.rope_type', rope_type,
                  'is a RoPE scaling we do not reproduce (only default RoPE)')
  legacy, default = _THETAS[layer_type]
  return float(params.get('rope_theta', hf.get(legacy, default)))


def _norm(ours: str, hf: str, use_bias: bool) -> list[tuple[str, str]]:
  pairs = [(f'{ours}/scale', f'{hf}.weight')]
  return pairs + [(f'{ours}/bias', f'{hf}.bias')] if use_bias else pairs


def _plain_entries(num_layers: int, use_bias: bool) -> list[tuple[str, str, str]]:
  """(our path, HF name without 'model.', kind) of every tensor that maps one to one:
  'table'/'vector' copy, 'dense' transposes a Linear, 'out' also splits the heads."""
  entries = [('encoder/embeddings/word_embeddings/embedding', 'embeddings.tok_embeddings.weight',
              'table')]
  entries += [(o, h, 'vector') for o, h in _norm('encoder/embeddings/norm', 'embeddings.norm',
                                                 use_bias)]
  for i in range(num_layers):
    ours, hf = f'encoder/layer_{i}', f'layers.{i}'
    if i > 0:
      entries += [(o, h, 'vector') for o, h in _norm(f'{ours}/attention_norm',
                                                     f'{hf}.attn_norm', use_bias)]
    entries += [(o, h, 'vector') for o, h in _norm(f'{ours}/mlp_norm', f'{hf}.mlp_norm',
                                                   use_bias)]
    entries.append((f'{ours}/attention/out/kernel', f'{hf}.attn.Wo.weight', 'out'))
    entries.append((f'{ours}/mlp/output/kernel', f'{hf}.mlp.Wo.weight', 'dense'))
    if use_bias:
      entries += [(f'{ours}/attention/out/bias', f'{hf}.attn.Wo.bias', 'vector'),
                  (f'{ours}/mlp/output/bias', f'{hf}.mlp.Wo.bias', 'vector')]
  return entries + [(o, h, 'vector') for o, h in _norm('encoder/final_norm', 'final_norm',
                                                      use_bias)]


def _transform_entries(group: str, use_bias: bool) -> list[tuple[str, str, str]]:
  """ModernBertPredictionHead (`head.`, outside the 'model.' prefix: dense, GELU, norm; its
  biases are classifier_bias and norm_bias, which model_fields ties to use_bias) -> our
  head's transform and transform_norm."""
  entries = [(f'{group}/transform/kernel', 'head.dense.weight', 'dense')]
  if use_bias:
    entries.append((f'{group}/transform/bias', 'head.dense.bias', 'vector'))
  return entries + [(o, h, 'vector') for o, h in _norm(f'{group}/transform_norm', 'head.norm',
                                                      use_bias)]


def _head_entries(use_bias: bool) -> list[tuple[str, str, str]]:
  """The MLM head; its decoder weight is the embeddings."""
  return _transform_entries('mlm', use_bias) + [('mlm/output_bias', 'decoder.bias', 'vector')]


def _task_entries(task: str, use_bias: bool) -> list[tuple[str, str, str]]:
  """A fine-tuned head, the same names for the three classes: the prediction head, then
  `classifier` (a Linear with a bias whatever classifier_bias says, as our head's last dense;
  [2, hidden] for question answering, start logits first as in our span head)."""
  group = heads.GROUPS[task]
  return _transform_entries(group, use_bias) + [
      (f'{group}/dense/kernel', 'classifier.weight', 'dense'),
      (f'{group}/dense/bias', 'classifier.bias', 'vector')]


class ModernBert(Family):
  """ModernBERT as transformers defines it; a field it has that we do not reproduce is refused
  in one line naming it."""

  name = 'ModernBERT'
  head_architectures = heads.architectures('ModernBert')
  architectures = ('ModernBertModel', 'ModernBertForMaskedLM')
  param_groups = ('encoder', 'mlm')

  def recognises(self, hf: dict) -> bool:
    return hf.get('model_type') == MODEL_TYPE

  def model_fields(self, hf: dict) -> dict:
    if hf.get('rope_scaling'):
      raise _refuse('rope_scaling', hf['rope_scaling'], 'is a RoPE scaling we do not reproduce')
    act = hf.get('hidden_activation', 'gelu')
    if not isinstance(act, str) or act not in ACTIVATIONS:
      raise _refuse('hidden_activation', act, f'is not one of {", ".join(ACTIVATIONS)}')
    if hf.get('classifier_activation', 'gelu') != 'gelu':
      raise _refuse('classifier_activation', hf['classifier_activation'],
                    "is not 'gelu' (our heads' activation for a gated MLP)")
    biases = {k: bool(hf.get(k, False)) for k in _BIAS_FLAGS}
    if len(set(biases.values())) > 1:
      field = next(k for k in _BIAS_FLAGS if biases[k] != biases['attention_bias'])
      raise _refuse(field, biases[field], f"differs from attention_bias={biases['attention_bias']}"
                    ' (our model.use_bias is one switch for all of them)')
    if not hf.get('decoder_bias', True):
      raise _refuse('decoder_bias', False, 'drops the MLM decoder bias our head has')
    if not hf.get('tie_word_embeddings', True):
      raise _refuse('tie_word_embeddings', False, 'unties the decoder; ours is the embeddings')
    with reading_fields('ModernBERT'):
      hidden, heads = int(hf['hidden_size']), int(hf['num_attention_heads'])
      num_layers = int(hf['num_hidden_layers'])
      if hf.get('head_dim') not in (None, hidden // max(heads, 1)):
        raise _refuse('head_dim', hf['head_dim'], 'is not hidden_size / num_attention_heads')
      fields = {
          'num_layers': num_layers, 'hidden_size': hidden, 'num_heads': heads,
          'intermediate_size': int(hf['intermediate_size']), 'vocab_size': int(hf['vocab_size']),
          'max_position_embeddings': int(hf.get('max_position_embeddings', 8192)),
          'type_vocab_size': 0, 'norm': 'pre', 'first_attention_norm': False,
          'embedding_norm': True, 'use_bias': biases['attention_bias'],
          'activation': ACTIVATIONS[act], 'position_embedding': 'rope',
          'rope_theta': _rope_theta(hf, 'full_attention'),
          'local_rope_theta': _rope_theta(hf, 'sliding_attention'),
          **window_fields(layer_types(hf, num_layers), int(hf.get('local_attention', 128))),
          'layer_norm_eps': float(hf.get('norm_eps', 1e-5)),
          'initializer_range': float(hf.get('initializer_range', 0.02)),
          'init': 'modern', 'init_cutoff': float(hf.get('initializer_cutoff_factor') or 2.0),
          'pooler': 'none', 'pooling': hf.get('classifier_pooling', 'cls'),
          'classifier_head': 'mlp',
          # Dropout is a training choice (our residual-branch rate stands for ModernBERT's MLP
          # and embedding rates); inference does not see it.
          'dropout_rate': float(hf.get('mlp_dropout', 0.0)),
          'attention_dropout_rate': float(hf.get('attention_dropout', 0.0))}
    if fields['pooling'] not in ('cls', 'mean'):
      raise _refuse('classifier_pooling', fields['pooling'], "is not 'cls' or 'mean'")
    if fields['local_window'] % 2:
      raise _refuse('local_attention', fields['local_window'], 'is odd (a window of w keys '
                    'each side is 2 w)')
    sizes = ('num_layers', 'hidden_size', 'num_heads', 'intermediate_size', 'vocab_size')
    bad = next((k for k in sizes if fields[k] < 1), None)
    if bad:
      raise CheckpointError(f'the config.json gives {bad}={fields[bad]}: sizes must be positive')
    if hidden % heads or (hidden // heads) % 2:
      raise CheckpointError(f'hidden_size={hidden} / num_attention_heads={heads} is not an even '
                            'integer head size (RoPE rotates pairs)')
    return fields

  def read_tokenizer(self, hf_dir: str) -> JsonTokenizer:
    path = os.path.join(hf_dir, 'tokenizer.json')
    if not storage.isfile(path):
      raise CheckpointError(f"'{hf_dir}' has no tokenizer.json: a ModernBERT directory has one")
    try:
      tokenizer = load_tokenizer(path)
    except EncoderError as e:
      raise CheckpointError(str(e)) from None
    assert isinstance(tokenizer, JsonTokenizer)
    return tokenizer

  def hf_to_ours(self, tensors: dict[str, np.ndarray], fields: dict, task: str | None = None
                 ) -> tuple[dict, list[str]]:
    """ModernBertModel or ModernBertForMaskedLM; the MLM head is optional, and its decoder
    weight, when saved, must equal the token embeddings. With `task`, its head is required
    (and there is no MLM head: both are `head.`)."""
    prefix = 'model.' if 'model.embeddings.tok_embeddings.weight' in tensors else ''
    if prefix + 'embeddings.tok_embeddings.weight' not in tensors:
      raise CheckpointError('the safetensors file has no embeddings.tok_embeddings.weight: it is '
                            'not a ModernBERT checkpoint')
    layers, heads, f = fields['num_layers'], fields['num_heads'], fields['intermediate_size']
    use_bias = fields['use_bias']

    def get(name: str) -> np.ndarray:
      if name not in tensors:
        raise CheckpointError(f"the checkpoint lacks '{name}': its config.json does not match its "
                              'weights')
      return np.asarray(tensors[name], np.float32)

    params: dict = {}

    def put(path: str, value: np.ndarray) -> None:
      nested_set(params, path.split('/'), value)

    for ours, hf, kind in _plain_entries(layers, use_bias):
      value = get(prefix + hf)
      if kind == 'dense':
        value = value.T
      elif kind == 'out':  # [m, h d] -> [h, d, m]
        value = value.T.reshape(heads, -1, value.shape[0])
      put(ours, value)
    for i in range(layers):
      ours, hf = f'encoder/layer_{i}', f'{prefix}layers.{i}'
      qkv = get(f'{hf}.attn.Wqkv.weight').T  # [m, 3 h d]
      qkv = qkv.reshape(qkv.shape[0], 3, heads, -1)
      wi = get(f'{hf}.mlp.Wi.weight').T  # [m, 2 f]
      for j, name in enumerate(('query', 'key', 'value')):
        put(f'{ours}/attention/{name}/kernel', qkv[:, j])
      put(f'{ours}/mlp/gate/kernel', wi[:, :f])
      put(f'{ours}/mlp/intermediate/kernel', wi[:, f:])
      if use_bias:
        qkv_bias = get(f'{hf}.attn.Wqkv.bias').reshape(3, heads, -1)
        wi_bias = get(f'{hf}.mlp.Wi.bias')
        for j, name in enumerate(('query', 'key', 'value')):
          put(f'{ours}/attention/{name}/bias', qkv_bias[j])
        put(f'{ours}/mlp/gate/bias', wi_bias[:f])
        put(f'{ours}/mlp/intermediate/bias', wi_bias[f:])
    if task:
      for ours, hf, kind in _task_entries(task, use_bias):
        value = get(hf)
        put(ours, value.T if kind == 'dense' else value)
      return params, ['mlm']
    head = _head_entries(use_bias)
    if any(hf not in tensors for _, hf, _ in head):
      return params, ['mlm']
    decoder = tensors.get('decoder.weight')
    embeddings = tensors[prefix + 'embeddings.tok_embeddings.weight']
    if decoder is not None and not np.array_equal(decoder, embeddings):
      raise CheckpointError('decoder.weight differs from the token embeddings: our MLM decoder is '
                            'tied to them')
    for ours, hf, kind in head:
      value = get(hf)
      put(ours, value.T if kind == 'dense' else value)
    return params, []

  def data_fields(self, params: dict, tokenizer: JsonTokenizer) -> dict:
    """ModernBERT pretrains with MLM alone."""
    return {'nsp': False}

  def writes(self, cfg, task: str | None = None) -> bool:
    return cfg.position_embedding == 'rope'

  def refusal(self, cfg, task: str | None = None) -> str | None:
    """Besides the encoder, a fine-tuned head must have the prediction head before its Linear
    (model.classifier_head=mlp); its pooling (cls or mean) is classifier_pooling's."""
    wanted = {'norm': 'pre', 'first_attention_norm': False, 'embedding_norm': True,
              'position_embedding': 'rope', 'type_vocab_size': 0, 'pooler': 'none',
              'attention': 'bidirectional'}
    for field, value in wanted.items():
      if getattr(cfg, field) != value:
        return f'model.{field}={getattr(cfg, field)!r} (ModernBERT: {value!r})'
    if cfg.activation not in OUR_ACTIVATIONS:
      return f'model.activation={cfg.activation!r} (ModernBERT: geglu or swiglu)'
    if cfg.embedding_width != cfg.hidden_size:
      return f'factorized embeddings (model.embedding_size={cfg.embedding_size})'
    if task and cfg.classifier_head != 'mlp':
      return (f"model.classifier_head={cfg.classifier_head!r} (ModernBERT's heads: 'mlp', a "
              'dense, GELU and norm before the classifier)')
    return None

  def ours_to_hf(self, params: dict, cfg, task: str | None = None
                 ) -> tuple[dict[str, np.ndarray], str]:
    """`task`'s head class for a fine-tuned run; else ModernBertForMaskedLM with an MLM head
    (its tied decoder weight omitted, as transformers saves it), else ModernBertModel."""
    has_mlm = 'mlm' in params and not task
    prefix = 'model.' if has_mlm or task else ''

    def get(path: str) -> np.ndarray:
      value = nested_get(params, path.split('/'))
      if value is None:
        raise CheckpointError(f"the checkpoint lacks '{path}': it is not a complete model")
      return np.asarray(value, np.float32)

    tensors = {}
    for ours, hf, kind in _plain_entries(cfg.num_layers, cfg.use_bias):
      value = get(ours)
      if kind == 'out':
        value = value.reshape(-1, value.shape[-1]).T
      elif kind == 'dense':
        value = value.T
      tensors[prefix + hf] = value
    for i in range(cfg.num_layers):
      ours, hf = f'encoder/layer_{i}', f'{prefix}layers.{i}'
      qkv = np.stack([get(f'{ours}/attention/{n}/kernel') for n in ('query', 'key', 'value')], 1)
      tensors[f'{hf}.attn.Wqkv.weight'] = qkv.reshape(qkv.shape[0], -1).T
      tensors[f'{hf}.mlp.Wi.weight'] = np.concatenate(
          [get(f'{ours}/mlp/gate/kernel'), get(f'{ours}/mlp/intermediate/kernel')], 1).T
      if cfg.use_bias:
        tensors[f'{hf}.attn.Wqkv.bias'] = np.concatenate(
            [get(f'{ours}/attention/{n}/bias').reshape(-1) for n in ('query', 'key', 'value')])
        tensors[f'{hf}.mlp.Wi.bias'] = np.concatenate(
            [get(f'{ours}/mlp/gate/bias'), get(f'{ours}/mlp/intermediate/bias')])
    head = (_task_entries(task, cfg.use_bias) if task else
            _head_entries(cfg.use_bias) if has_mlm else [])
    for ours, hf, kind in head:
      value = get(ours)
      tensors[hf] = value.T if kind == 'dense' else value
    tensors = {k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()}
    architecture = (self.head_architectures[task] if task else
                    'ModernBertForMaskedLM' if has_mlm else 'ModernBertModel')
    return tensors, architecture

  def hf_config(self, cfg, tokenizer, architecture: str) -> dict:
    types = ['sliding_attention' if cfg.is_local(i) else 'full_attention'
             for i in range(cfg.num_layers)]
    ids = {name: int(tokenizer.token_to_id(token)) for name, token in
           (('pad_token_id', '[PAD]'), ('bos_token_id', '[CLS]'), ('cls_token_id', '[CLS]'),
            ('eos_token_id', '[SEP]'), ('sep_token_id', '[SEP]'))}
    return {
        'architectures': [architecture], 'model_type': MODEL_TYPE, 'vocab_size': cfg.vocab_size,
        'hidden_size': cfg.hidden_size, 'intermediate_size': cfg.intermediate_size,
        'num_hidden_layers': cfg.num_layers, 'num_attention_heads': cfg.num_heads,
        'hidden_activation': OUR_ACTIVATIONS[cfg.activation],
        'max_position_embeddings': cfg.max_position_embeddings,
        'initializer_range': cfg.initializer_range, 'initializer_cutoff_factor': cfg.init_cutoff,
        'norm_eps': cfg.layer_norm_eps, **{k: cfg.use_bias for k in _BIAS_FLAGS},
        'decoder_bias': True, 'tie_word_embeddings': True, 'classifier_activation': 'gelu',
        'classifier_pooling': cfg.pooling, 'layer_types': types,
        'local_attention': cfg.local_window or 128,  # unused when every layer is global
        'rope_parameters': {
            'full_attention': {'rope_type': 'default', 'rope_theta': cfg.rope_theta},
            'sliding_attention': {'rope_type': 'default', 'rope_theta': cfg.local_rope_theta}},
        'mlp_dropout': float(cfg.dropout_rate), 'embedding_dropout': float(cfg.dropout_rate),
        'classifier_dropout': float(cfg.dropout_rate),  # our heads drop out at dropout_rate
        'attention_dropout': float(cfg.attention_dropout_rate), **ids}


FAMILY = ModernBert()
