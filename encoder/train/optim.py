"""Optimizers, learning-rate schedules and BERT's weight-decay mask, all from optax."""

from __future__ import annotations

import jax
import optax

from encoder.errors import ConfigError

NO_DECAY_LEAVES = ('bias', 'scale', 'output_bias')  # biases and LayerNorm: BERT leaves them be


def learning_rate_schedule(train) -> optax.Schedule:
  """Linear warmup to `learning_rate`, then linear decay to 0 (BERT), cosine, or constant."""
  peak, warmup, total = train.learning_rate, train.warmup_steps, max(train.num_steps, 1)
  warm = optax.linear_schedule(0.0, peak, max(warmup, 1)) if warmup else None
  decay_steps = max(total - warmup, 1)
  if train.schedule == 'linear':
    after = optax.linear_schedule(peak, 0.0, decay_steps)
  elif train.schedule == 'cosine':
    after = optax.cosine_decay_schedule(peak, decay_steps)
  elif train.schedule == 'constant':
    after = optax.constant_schedule(peak)
  else:
    raise ConfigError(f"train.schedule='{train.schedule}' is not one of linear, cosine, constant")
  return optax.join_schedules([warm, after], [warmup]) if warm else after


def weight_decay_mask(params):
  """True for the leaves weight decay applies to: kernels and embedding tables. The leaf's
  name is its last dict key: the mesh strategy also builds the optimizer on parameters still
  in Flax's logical boxes, whose paths end in the box's `value`."""
  def decays(path, _):
    names = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
    return names[-1] not in NO_DECAY_LEAVES
  return jax.tree_util.tree_map_with_path(decays, params)


def make_optimizer(train) -> optax.GradientTransformation:
  """Global-norm clipping, then AdamW or LAMB with decoupled weight decay on kernels.

  optax's AdamW applies Adam's bias correction, which BERT's AdamWeightDecay omits; with 10k
  warmup steps the two are indistinguishable after the first few hundred steps.
  """
  schedule = learning_rate_schedule(train)
  kwargs = dict(b1=train.b1, b2=train.b2, eps=train.eps, weight_decay=train.weight_decay,
                mask=weight_decay_mask)
  if train.optimizer == 'adamw':
    opt = optax.adamw(schedule, **kwargs)
  elif train.optimizer == 'lamb':
    opt = optax.lamb(schedule, **kwargs)
  else:
    raise ConfigError(f"train.optimizer='{train.optimizer}' is not one of adamw, lamb")
  if train.clip_norm:
    return optax.chain(optax.clip_by_global_norm(train.clip_norm), opt)
  return opt
