"""`launch.py --describe`: parameters per module, from shapes alone (nothing is allocated)."""

from __future__ import annotations

import re

import flax.linen as nn
import jax
import numpy as np


def parameter_shapes(model: nn.Module, batch: dict) -> dict:
  """The model's parameter tree as ShapeDtypeStructs, without computing anything."""
  variables = jax.eval_shape(lambda: model.init({'params': jax.random.key(0)}, batch))
  return nn.unbox(variables)['params']


def count(tree) -> int:
  return int(sum(np.prod(leaf.shape) for leaf in jax.tree.leaves(tree)))


def summary_rows(params: dict) -> list[tuple[str, int]]:
  """(module path, parameter count) rows: one per encoder part, repeated layers folded."""
  rows = []
  for name, sub in params.items():
    if name == 'encoder':
      layers = sorted((k for k in sub if re.fullmatch(r'layer_\d+', k)),
                      key=lambda k: int(k.split('_')[1]))
      for part, value in sub.items():
        if part not in layers:
          rows.append((f'encoder/{part}', count(value)))
      if layers:
        counts = [count(sub[k]) for k in layers]
        # Layers may differ (ModernBERT's layer 0 has no attention norm): each size, how often.
        sizes = ', '.join(f'{counts.count(n)} x {n:,}' for n in dict.fromkeys(counts))
        rows.append((f'encoder/layer_0..{len(layers) - 1} ({sizes})', sum(counts)))
    else:
      rows.append((name, count(sub)))
  return rows


def describe(model: nn.Module, batch: dict) -> str:
  params = parameter_shapes(model, batch)
  rows = summary_rows(params)
  width = max(len(name) for name, _ in rows) + 2
  lines = [f'{model.__class__.__name__}: {model.config}', '']
  lines += [f'{name:<{width}}{n:>15,}' for name, n in rows]
  heads = {name: count(sub) for name, sub in params.items() if name != 'encoder'}
  lines += ['']
  if 'encoder' in params:
    lines += [f"Encoder parameters: {count(params['encoder']):,}"]
  if heads:
    lines += ['Heads: ' + ', '.join(f'{name} {n:,}' for name, n in heads.items())]
  lines += [f'Total parameters: {count(params):,}']
  return '\n'.join(lines)


def recipe(config) -> str:
  """The training choices in two lines (objective and data; optimiser and schedule), for
  `--describe`: what the model summary does not say, so a run's recipe reads at a glance."""
  d, t = config.data, config.train
  parts = [f'task {config.task}', f'sequence {d.max_seq_length}', f'batch {t.batch_size}']
  if 'mask_rate' in d:
    objective = 'MLM + NSP' if d.nsp else 'MLM only'
    if config.task == 'electra':
      e = config.electra
      objective = (f'replaced-token detection (generator {e.generator_size:g} wide, '
                   f'discriminator x {e.discriminator_weight:g}, {e.embedding_sharing} '
                   'embeddings)')
    rate = f'{d.mask_rate:g}'
    if d.mask_rate_schedule != 'constant':
      rate += f' ({d.mask_rate_schedule}: {d.mask_rate_final or d.mask_rate_steps})'
    parts[:1] = [objective, f'rows {d.packing}',
                 f'mask {rate} (held-out {d.eval_mask_rate:g})']
  schedule = f'{t.schedule}, warmup {t.warmup_steps}'
  if t.schedule == 'wsd':
    schedule += f", decay {t.decay_steps} steps ({t.decay_shape})"
  clip = f'clip {t.clip_norm:g}' if t.clip_norm else 'no global clip'
  lines = ['Recipe: ' + ', '.join(parts),
           f'Training: {t.optimizer} lr {t.learning_rate:g} (b1 {t.b1:g}, b2 {t.b2:g}, eps '
           f'{t.eps:g}, weight decay {t.weight_decay:g}, {clip}), {schedule}, {t.num_steps:,} '
           'steps']
  if t.decay_from:
    lines.append(f'Branched from: {t.decay_from}')
  return '\n'.join(lines)
