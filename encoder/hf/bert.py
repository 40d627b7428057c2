"""Hugging Face BERT (BertModel, BertForMaskedLM, BertForPreTraining, and the fine-tuned
BertFor{SequenceClassification,TokenClassification,QuestionAnswering}) <-> our post-LN encoder.

Pure numpy, no torch. HF `nn.Linear` stores weights as [out, in]; our Dense kernels are
[in, out], and our attention projections are DenseGeneral kernels [hidden, heads, head_dim]
(Q/K/V) and [heads, head_dim, hidden] (output), so the mapping is transposes and reshapes only.
The tokenizer is WordPiece (vocab.txt, lower-casing from tokenizer_config.json).
"""

from __future__ import annotations

import os

import numpy as np

from encoder import storage
from encoder.configs import nested_get, nested_set
from encoder.data.tokenizer import WordPieceTokenizer, load_tokenizer
from encoder.errors import CheckpointError
from encoder.hf import heads
from encoder.hf.family import Family, read_json, reading_fields

HF_ACTIVATIONS = {'gelu': 'gelu', 'gelu_new': 'gelu_tanh', 'gelu_pytorch_tanh': 'gelu_tanh'}
OUR_ACTIVATIONS = {'gelu': 'gelu', 'gelu_tanh': 'gelu_new'}

# (our path, HF name without the 'bert.' prefix, kind). Kinds: 'dense' transposes a Linear,
# 'vector'/'table' copy, 'qkv' and 'out' also split the heads.
_EMBEDDINGS = [
    ('encoder/embeddings/word_embeddings/embedding', 'embeddings.word_embeddings.weight', 'table'),
    ('encoder/embeddings/position_embeddings/embedding', 'embeddings.position_embeddings.weight',
     'table'),
    ('encoder/embeddings/segment_embeddings/embedding', 'embeddings.token_type_embeddings.weight',
     'table'),
    ('encoder/embeddings/norm/scale', 'embeddings.LayerNorm.weight', 'vector'),
    ('encoder/embeddings/norm/bias', 'embeddings.LayerNorm.bias', 'vector'),
]
_POOLER = [('encoder/pooler/kernel', 'pooler.dense.weight', 'dense'),
           ('encoder/pooler/bias', 'pooler.dense.bias', 'vector')]
# The MLM and NSP heads live outside the 'bert.' prefix in HF's BertForPreTraining.
_MLM = [('mlm/transform/kernel', 'cls.predictions.transform.dense.weight', 'dense'),
        ('mlm/transform/bias', 'cls.predictions.transform.dense.bias', 'vector'),
        ('mlm/transform_norm/scale', 'cls.predictions.transform.LayerNorm.weight', 'vector'),
        ('mlm/transform_norm/bias', 'cls.predictions.transform.LayerNorm.bias', 'vector'),
        ('mlm/output_bias', 'cls.predictions.bias', 'vector')]
_NSP = [('nsp_head/dense/kernel', 'cls.seq_relationship.weight', 'dense'),
        ('nsp_head/dense/bias', 'cls.seq_relationship.bias', 'vector')]
# A fine-tuned head is one Linear outside the 'bert.' prefix, our head's last dense
# (encoder.modules.heads): `classifier` on the pooled output (SequenceClassification) or on
# every token (TokenClassification), `qa_outputs` [2, hidden] on every token, start logits
# first as in our span head. Only SequenceClassification has a pooler: the other two build
# their BertModel with add_pooling_layer=False.
_HEAD_LINEAR = {'classification': 'classifier', 'tagging': 'classifier', 'span_qa': 'qa_outputs'}
HEAD_ARCHITECTURES = heads.architectures('Bert')


def task_entries(task: str) -> list[tuple[str, str, str]]:
  group, linear = heads.GROUPS[task], _HEAD_LINEAR[task]
  return [(f'{group}/dense/kernel', f'{linear}.weight', 'dense'),
          (f'{group}/dense/bias', f'{linear}.bias', 'vector')]


def layer_entries(i: int) -> list[tuple[str, str, str]]:
  ours, hf = f'encoder/layer_{i}', f'encoder.layer.{i}'
  entries = []
  for name in ('query', 'key', 'value'):
    entries += [(f'{ours}/attention/{name}/kernel', f'{hf}.attention.self.{name}.weight', 'qkv'),
                (f'{ours}/attention/{name}/bias', f'{hf}.attention.self.{name}.bias', 'qkv_bias')]
  return entries + [
      (f'{ours}/attention/out/kernel', f'{hf}.attention.output.dense.weight', 'out'),
      (f'{ours}/attention/out/bias', f'{hf}.attention.output.dense.bias', 'vector'),
      (f'{ours}/attention_norm/scale', f'{hf}.attention.output.LayerNorm.weight', 'vector'),
      (f'{ours}/attention_norm/bias', f'{hf}.attention.output.LayerNorm.bias', 'vector'),
      (f'{ours}/mlp/intermediate/kernel', f'{hf}.intermediate.dense.weight', 'dense'),
      (f'{ours}/mlp/intermediate/bias', f'{hf}.intermediate.dense.bias', 'vector'),
      (f'{ours}/mlp/output/kernel', f'{hf}.output.dense.weight', 'dense'),
      (f'{ours}/mlp/output/bias', f'{hf}.output.dense.bias', 'vector'),
      (f'{ours}/mlp_norm/scale', f'{hf}.output.LayerNorm.weight', 'vector'),
      (f'{ours}/mlp_norm/bias', f'{hf}.output.LayerNorm.bias', 'vector'),
  ]


def encoder_entries(num_layers: int) -> list[tuple[str, str, str]]:
  """Every encoder parameter except the pooler, which BertForMaskedLM lacks."""
  return _EMBEDDINGS + [e for i in range(num_layers) for e in layer_entries(i)]


def to_ours(array: np.ndarray, kind: str, num_heads: int) -> np.ndarray:
  if kind in ('dense', 'qkv', 'out'):
    array = array.T
  if kind == 'qkv':  # [hidden, heads * head_dim] -> [hidden, heads, head_dim]
    return array.reshape(array.shape[0], num_heads, -1)
  if kind == 'qkv_bias':
    return array.reshape(num_heads, -1)
  if kind == 'out':  # [heads * head_dim, hidden] -> [heads, head_dim, hidden]
    return array.reshape(num_heads, -1, array.shape[-1])
  return array


def to_hf(array: np.ndarray, kind: str) -> np.ndarray:
  if kind == 'qkv':
    array = array.reshape(array.shape[0], -1)
  elif kind == 'qkv_bias':
    array = array.reshape(-1)
  elif kind == 'out':
    array = array.reshape(-1, array.shape[-1])
  if kind in ('dense', 'qkv', 'out'):
    array = array.T
  return np.ascontiguousarray(array, dtype=np.float32)


class Bert(Family):
  """BERT as transformers defines it: post-LN, learned absolute positions, segment embeddings,
  a tanh pooler, the MLM and NSP heads of BertForPreTraining, and the fine-tuned heads."""

  name = 'BERT'
  architectures = ('BertModel', 'BertForMaskedLM', 'BertForPreTraining')
  param_groups = ('encoder', 'mlm', 'nsp_head')
  head_architectures = HEAD_ARCHITECTURES

  def recognises(self, hf: dict) -> bool:
    return hf.get('model_type', 'bert') == 'bert'

  def model_fields(self, hf: dict) -> dict:
    if hf.get('position_embedding_type', 'absolute') != 'absolute':
      raise CheckpointError(f"position_embedding_type '{hf['position_embedding_type']}' is not "
                            'supported: our embeddings are learned absolute positions')
    if hf.get('is_decoder') or hf.get('add_cross_attention'):
      raise CheckpointError('decoder BERT (is_decoder / add_cross_attention) is not supported: '
                            'our model is an encoder')
    act = hf.get('hidden_act', 'gelu')
    if not isinstance(act, str) or act not in HF_ACTIVATIONS:
      raise CheckpointError(f"hidden_act '{act}' is not supported (known: "
                            f"{', '.join(HF_ACTIVATIONS)})")
    with reading_fields('BERT'):
      fields = {'num_layers': int(hf['num_hidden_layers']), 'hidden_size': int(hf['hidden_size']),
                'num_heads': int(hf['num_attention_heads']),
                'intermediate_size': int(hf['intermediate_size']),
                'vocab_size': int(hf['vocab_size']),
                'max_position_embeddings': int(hf.get('max_position_embeddings', 512)),
                'type_vocab_size': int(hf.get('type_vocab_size', 2)),
                'activation': HF_ACTIVATIONS[act],
                'layer_norm_eps': float(hf.get('layer_norm_eps', 1e-12)),
                'initializer_range': float(hf.get('initializer_range', 0.02)),
                'dropout_rate': float(hf.get('hidden_dropout_prob', 0.1)),
                'attention_dropout_rate': float(hf.get('attention_probs_dropout_prob', 0.1))}
    sizes = ('num_layers', 'hidden_size', 'num_heads', 'intermediate_size', 'vocab_size',
             'max_position_embeddings', 'type_vocab_size')
    bad = next((k for k in sizes if fields[k] < 1), None)
    if bad:
      raise CheckpointError(f'the config.json gives {bad}={fields[bad]}: sizes must be positive')
    if fields['hidden_size'] % fields['num_heads']:
      raise CheckpointError(f"hidden_size={fields['hidden_size']} is not divisible by "
                            f"num_attention_heads={fields['num_heads']}")
    return fields

  def read_tokenizer(self, hf_dir: str) -> WordPieceTokenizer:
    """vocab.txt, lower-cased unless tokenizer_config.json says do_lower_case=false."""
    if not storage.isfile(os.path.join(hf_dir, 'vocab.txt')):
      raise CheckpointError(f"'{hf_dir}' has no vocab.txt: only WordPiece BERT tokenizers "
                            'convert')
    tok_config_path = os.path.join(hf_dir, 'tokenizer_config.json')
    tok_config = read_json(tok_config_path) if storage.exists(tok_config_path) else {}
    lower_case = tok_config.get('do_lower_case')
    tokenizer = load_tokenizer(os.path.join(hf_dir, 'vocab.txt'),
                               True if lower_case is None else bool(lower_case))
    assert isinstance(tokenizer, WordPieceTokenizer)
    return tokenizer

  def hf_to_ours(self, tensors: dict[str, np.ndarray], fields: dict, task: str | None = None
                 ) -> tuple[dict, list[str]]:
    """Any of BertModel / BertForMaskedLM / BertForPreTraining; the pooler, MLM and NSP head
    are each optional. With `task`, its head is required (and for SequenceClassification the
    pooler it reads)."""
    num_heads = fields['num_heads']
    prefix = 'bert.' if 'bert.embeddings.word_embeddings.weight' in tensors else ''
    if prefix + 'embeddings.word_embeddings.weight' not in tensors:
      raise CheckpointError('the safetensors file has no embeddings.word_embeddings.weight: it '
                            'is not a BERT checkpoint')
    params, absent = {}, []
    groups = [('encoder', encoder_entries(fields['num_layers']), prefix),
              ('pooler', _POOLER, prefix), ('mlm', _MLM, ''), ('nsp_head', _NSP, '')]
    if task:
      groups.append((task, task_entries(task), ''))
    for group, entries, group_prefix in groups:
      names = [group_prefix + hf for _, hf, _ in entries]
      if group == 'mlm' and 'cls.predictions.bias' not in tensors:
        names[-1] = 'cls.predictions.decoder.bias'  # some exports keep only the decoder's alias
      missing = [n for n in names if n not in tensors]
      if group == 'encoder' and missing:
        raise CheckpointError(f"the checkpoint lacks '{missing[0]}': num_hidden_layers in its "
                              'config.json does not match its weights')
      if missing and (group == task or (group == 'pooler' and task == 'classification')):
        raise CheckpointError(f"the checkpoint lacks '{missing[0]}', which its config.json's "
                              f'{HEAD_ARCHITECTURES[task]} has')
      if missing:
        absent.append(group)
        continue
      for (ours, _, kind), name in zip(entries, names, strict=True):
        value = to_ours(np.asarray(tensors[name], np.float32), kind, num_heads)
        nested_set(params, ours.split('/'), value)
    return params, absent

  def data_fields(self, params: dict, tokenizer: WordPieceTokenizer) -> dict:
    """NSP stays on when the checkpoint has its head, or neither head (a BertModel, which
    BERT pretrained with both)."""
    return {'lower_case': tokenizer.lower_case,
            'nsp': 'nsp_head' in params or 'mlm' not in params}

  def writes(self, cfg, task: str | None = None) -> bool:
    return cfg.position_embedding != 'rope'

  def refusal(self, cfg, task: str | None = None) -> str | None:
    """Besides the encoder: the tanh pooler where a head reads it (pretraining's NSP,
    SequenceClassification, which pools the [CLS] token), and a head of one dense layer."""
    pools = task in (None, 'classification')
    for bad, why in ((True, encoder_refusal(cfg)),
                     (cfg.embedding_width != cfg.hidden_size,
                      f'factorized embeddings (model.embedding_size={cfg.embedding_size})'),
                     (pools and cfg.pooler != 'tanh', f'model.pooler={cfg.pooler}'),
                     (task == 'classification' and cfg.pooling != 'cls',
                      f"model.pooling={cfg.pooling} (BertForSequenceClassification reads the "
                      "[CLS] token's pooled output; a run fine-tuned with "
                      '--config.model.pooling=cls exports)'),
                     (task is not None and cfg.classifier_head != 'linear',
                      f'model.classifier_head={cfg.classifier_head} (its heads are one '
                      'Linear)')):
      if bad and why:
        return why
    return None

  def ours_to_hf(self, params: dict, cfg, task: str | None = None
                 ) -> tuple[dict[str, np.ndarray], str]:
    """`task`'s head class for a fine-tuned run; else BertForPreTraining when both pretraining
    heads exist, BertForMaskedLM with the MLM head only, else BertModel. The MLM decoder is
    tied to the word embeddings, so it is written as HF itself saves a tied model:
    `cls.predictions.decoder.weight` omitted, `cls.predictions.bias` its bias."""
    if task:
      return self._head_to_hf(params, cfg, task), HEAD_ARCHITECTURES[task]
    has_mlm, has_nsp = 'mlm' in params, 'nsp_head' in params
    if has_mlm and has_nsp and cfg.pooling != 'cls':
      raise CheckpointError(f"Hugging Face's BertForPreTraining cannot express "
                            f'model.pooling={cfg.pooling} (its NSP head reads the [CLS] token; '
                            "this model's reads the tokens' mean): this model does not convert")
    architecture = ('BertForPreTraining' if has_mlm and has_nsp else
                    'BertForMaskedLM' if has_mlm else 'BertModel')
    prefix = '' if architecture == 'BertModel' else 'bert.'
    entries = [(o, prefix + h, k) for o, h, k in encoder_entries(cfg.num_layers) + _POOLER]
    if has_mlm:
      entries += _MLM
    if has_nsp and architecture == 'BertForPreTraining':
      entries += _NSP
    return tensors_of(params, entries), architecture

  def _head_to_hf(self, params: dict, cfg, task: str) -> dict[str, np.ndarray]:
    """The encoder under 'bert.' (with the pooler only where the class has one) and the head."""
    encoder = encoder_entries(cfg.num_layers) + (_POOLER if task == 'classification' else [])
    return tensors_of(params, [(o, 'bert.' + h, k) for o, h, k in encoder] + task_entries(task))

  def hf_config(self, cfg, tokenizer, architecture: str) -> dict:

    return {
        'architectures': [architecture], 'model_type': 'bert', 'vocab_size': cfg.vocab_size,
        'hidden_size': cfg.hidden_size, 'num_hidden_layers': cfg.num_layers,
        'num_attention_heads': cfg.num_heads, 'intermediate_size': cfg.intermediate_size,
        'hidden_act': OUR_ACTIVATIONS[cfg.activation],
        'hidden_dropout_prob': float(cfg.dropout_rate),
        'attention_probs_dropout_prob': float(cfg.attention_dropout_rate),
        'max_position_embeddings': cfg.max_position_embeddings,
        'type_vocab_size': cfg.type_vocab_size, 'initializer_range': cfg.initializer_range,
        'layer_norm_eps': cfg.layer_norm_eps, 'pad_token_id': int(tokenizer.pad_id),
        'position_embedding_type': 'absolute', 'tie_word_embeddings': True}


def encoder_refusal(cfg) -> str | None:
  """What of our encoder `cfg` BERT's layers cannot express (its embeddings' width and the
  heads aside: ELECTRA's layers are BERT's over factorized embeddings), or None."""
  for bad, why in ((cfg.norm == 'pre', 'pre-LN (model.norm=pre)'),
                   (cfg.activation in ('geglu', 'swiglu'),
                    f'a gated MLP (model.activation={cfg.activation})'),
                   (cfg.attention == 'causal', 'causal attention'),
                   (cfg.position_embedding != 'learned',
                    f'model.position_embedding={cfg.position_embedding}'),
                   (cfg.local_window > 0 and any(cfg.is_local(i) for i in range(cfg.num_layers)),
                    'local attention (model.local_window)'),
                   (not cfg.use_bias, 'bias-free layers (model.use_bias=false)'),
                   (not cfg.embedding_norm, 'no embedding norm (model.embedding_norm=false)'),
                   (cfg.type_vocab_size == 0, 'no segment embeddings (model.type_vocab_size=0)')):
    if bad:
      return why
  return None


def tensors_of(params: dict, entries: list[tuple[str, str, str]]) -> dict[str, np.ndarray]:
  tensors = {}
  for ours, name, kind in entries:
    value = nested_get(params, ours.split('/'))
    if value is None:
      raise CheckpointError(f"the checkpoint lacks '{ours}': it is not a complete BERT model")
    tensors[name] = to_hf(np.asarray(value), kind)
  return tensors


FAMILY = Bert()
