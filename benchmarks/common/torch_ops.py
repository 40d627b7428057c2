"""Sorting `torch.profiler` events into benchmarks/step_profile.py's categories: by the op and
the ops around it (an `aten::mul` inside `aten::native_dropout` is dropout, anything inside the
`step_profile/optimizer` record_function the update)."""

from __future__ import annotations

import re

_TORCH_LEAF = {
    'aten::mm': 'matmul: dense layers', 'aten::addmm': 'matmul: dense layers',
    'aten::bmm': 'matmul: attention', 'aten::baddbmm': 'matmul: attention',
    'aten::bernoulli_': 'dropout: random bits', 'aten::uniform_': 'dropout: random bits',
    'aten::gelu': 'GELU', 'aten::gelu_backward': 'GELU',
    'aten::native_layer_norm': 'LayerNorm', 'aten::native_layer_norm_backward': 'LayerNorm',
    'aten::_softmax': 'softmax + mask', 'aten::_softmax_backward_data': 'softmax + mask',
    'aten::_safe_softmax': 'softmax + mask',
    'aten::embedding_dense_backward': 'embeddings', 'aten::index_select': 'embeddings',
    'aten::embedding': 'embeddings', 'aten::index_add_': 'embeddings',
    'aten::copy_': 'transposes / copies', 'aten::clone': 'transposes / copies',
    'aten::contiguous': 'transposes / copies', 'aten::cat': 'transposes / copies',
    'aten::_to_copy': 'transposes / copies',
    'aten::sum': 'bias grads (reductions)',
}
# The ancestor that decides, nearest first: dropout, softmax, the loss, GELU, LayerNorm.
_TORCH_ANCESTOR = [
    ('native_dropout', 'dropout: apply'), ('NativeDropoutBackward', 'dropout: apply'),
    ('aten::dropout', 'dropout: apply'),
    ('softmax', 'softmax + mask'), ('SoftmaxBackward', 'softmax + mask'),
    ('cross_entropy', 'loss'), ('nll_loss', 'loss'), ('NllLoss', 'loss'),
    ('LogSoftmax', 'loss'), ('log_softmax', 'loss'),
    ('embedding', 'embeddings'), ('Embedding', 'embeddings'),
    ('layer_norm', 'LayerNorm'), ('LayerNorm', 'LayerNorm'), ('gelu', 'GELU'), ('Gelu', 'GELU'),
]
_TORCH_OVERHEAD = re.compile(r'^(aten::(view|t|transpose|expand|permute|reshape|_reshape_alias|'
                             r'as_strided|empty|empty_strided|empty_like|zeros|detach|alias|'
                             r'select|slice|unsqueeze|squeeze|split|to|result_type|resolve_\w+|'
                             r'_unsafe_view|unflatten|flatten|lift_fresh|numel|size|stride|'
                             r'is_nonzero|item|_local_scalar_dense)$|autograd::|\w+Backward\d|'
                             r'step_profile/|AccumulateGrad|torch::autograd)')


def torch_category(event) -> str:
  name, chain, parent = event.name, [], event.cpu_parent
  while parent is not None:
    chain.append(parent.name)
    parent = parent.cpu_parent
  if 'step_profile/optimizer' in chain or name == 'step_profile/optimizer':
    return 'optimizer (clip, AdamW)'
  if name in ('aten::bernoulli_', 'aten::uniform_'):
    return 'dropout: random bits'
  if name in ('aten::bmm', 'aten::baddbmm'):
    return 'matmul: attention'
  for anc in [name, *chain]:
    for key, category in _TORCH_ANCESTOR:
      if key in anc and not _TORCH_OVERHEAD.match(name):
        return category
    if 'scaled_dot_product' in anc and not _TORCH_OVERHEAD.match(name):
      if name in ('aten::mul', 'aten::div', 'aten::add'):  # scaling q and k
        return 'bias, residual, other elementwise'
      return _TORCH_LEAF.get(name, 'softmax + mask')
  if name == 'aten::copy_' and chain and chain[0] == 'aten::addmm':  # the bias, broadcast
    return 'bias, residual, other elementwise'
  if name in _TORCH_LEAF:
    if name == 'aten::sum' and not any('AddmmBackward' in c for c in chain):
      return 'bias, residual, other elementwise'
    return _TORCH_LEAF[name]
  if _TORCH_OVERHEAD.match(name) or not name.startswith('aten::'):
    return 'framework overhead'
  return 'bias, residual, other elementwise'
