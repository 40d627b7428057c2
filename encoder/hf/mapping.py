"""Parameter names and shapes: Hugging Face BERT (PyTorch layout) <-> our Flax tree.

Pure numpy, no torch: `hf_to_ours` and `ours_to_hf` are exact inverses (transposes and
reshapes only), so a round trip is bitwise. HF `nn.Linear` stores weights as [out, in]; our
Dense kernels are [in, out], and our attention projections are DenseGeneral kernels
[hidden, heads, head_dim] (Q/K/V) and [heads, head_dim, hidden] (output).
"""

from __future__ import annotations

import numpy as np

from encoder.configs import nested_get, nested_set
from encoder.errors import CheckpointError

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


def _layer_entries(i: int) -> list[tuple[str, str, str]]:
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
  return _EMBEDDINGS + [e for i in range(num_layers) for e in _layer_entries(i)]


def _to_ours(array: np.ndarray, kind: str, num_heads: int) -> np.ndarray:
  if kind in ('dense', 'qkv', 'out'):
    array = array.T
  if kind == 'qkv':  # [hidden, heads * head_dim] -> [hidden, heads, head_dim]
    return array.reshape(array.shape[0], num_heads, -1)
  if kind == 'qkv_bias':
    return array.reshape(num_heads, -1)
  if kind == 'out':  # [heads * head_dim, hidden] -> [heads, head_dim, hidden]
    return array.reshape(num_heads, -1, array.shape[-1])
  return array


def _to_hf(array: np.ndarray, kind: str) -> np.ndarray:
  if kind == 'qkv':
    array = array.reshape(array.shape[0], -1)
  elif kind == 'qkv_bias':
    array = array.reshape(-1)
  elif kind == 'out':
    array = array.reshape(-1, array.shape[-1])
  if kind in ('dense', 'qkv', 'out'):
    array = array.T
  return np.ascontiguousarray(array, dtype=np.float32)


def hf_to_ours(tensors: dict[str, np.ndarray], num_layers: int, num_heads: int
               ) -> tuple[dict, list[str]]:
  """HF state dict (any of BertModel / BertForMaskedLM / BertForPreTraining) -> our params.

  Returns the tree and the names of what the HF model did not have (the pooler, MLM, NSP);
  heads are written only when all of their tensors are present.
  """
  prefix = 'bert.' if 'bert.embeddings.word_embeddings.weight' in tensors else ''
  if prefix + 'embeddings.word_embeddings.weight' not in tensors:
    raise CheckpointError('the safetensors file has no embeddings.word_embeddings.weight: it is '
                          'not a BERT checkpoint')
  params, absent = {}, []
  groups = [('encoder', encoder_entries(num_layers), prefix), ('pooler', _POOLER, prefix),
            ('mlm', _MLM, ''), ('nsp_head', _NSP, '')]
  for group, entries, group_prefix in groups:
    names = [group_prefix + hf for _, hf, _ in entries]
    if group == 'mlm' and 'cls.predictions.bias' not in tensors:
      names[-1] = 'cls.predictions.decoder.bias'  # some exports keep only the decoder's alias
    missing = [n for n in names if n not in tensors]
    if group == 'encoder' and missing:
      raise CheckpointError(f"the checkpoint lacks '{missing[0]}': num_hidden_layers in its "
                            'config.json does not match its weights')
    if missing:
      absent.append(group)
      continue
    for (ours, _, kind), name in zip(entries, names, strict=True):
      value = _to_ours(np.asarray(tensors[name], np.float32), kind, num_heads)
      nested_set(params, ours.split('/'), value)
  return params, absent


def ours_to_hf(params: dict, num_layers: int) -> tuple[dict[str, np.ndarray], str]:
  """Our params -> (HF tensors, architecture), BertForPreTraining when both heads exist.

  The MLM decoder is tied to the word embeddings, so its weight is written as HF itself saves
  a tied model: `cls.predictions.decoder.weight` omitted, `cls.predictions.bias` its bias.
  """
  has_mlm, has_nsp = 'mlm' in params, 'nsp_head' in params
  architecture = ('BertForPreTraining' if has_mlm and has_nsp else
                  'BertForMaskedLM' if has_mlm else 'BertModel')
  prefix = '' if architecture == 'BertModel' else 'bert.'
  entries = [(o, prefix + h, k) for o, h, k in encoder_entries(num_layers) + _POOLER]
  if has_mlm:
    entries += _MLM
  if has_nsp and architecture == 'BertForPreTraining':
    entries += _NSP
  tensors = {}
  for ours, name, kind in entries:
    value = nested_get(params, ours.split('/'))
    if value is None:
      raise CheckpointError(f"the checkpoint lacks '{ours}': it is not a complete BERT model")
    tensors[name] = _to_hf(np.asarray(value), kind)
  return tensors, architecture
