"""Optimizers, learning-rate schedules and BERT's weight-decay mask, all from optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from encoder.errors import ConfigError
from encoder.train.clipped_adamw import clipped_adamw
from encoder.train.stable_adamw import scale_by_stable_adam

NO_DECAY_LEAVES = ('bias', 'scale', 'output_bias')  # biases and LayerNorm: BERT leaves them be
SCHEDULES = ('linear', 'cosine', 'constant', 'wsd')
DECAY_SHAPES = ('linear', 'cosine', '1-sqrt')
OPTIMIZERS = ('adamw', 'lamb', 'stable_adamw')


def learning_rate_schedule(train) -> optax.Schedule:
  """Linear warmup to `learning_rate`, then linear decay to 0 (BERT), cosine, constant, or
  wsd: constant until the last `train.decay_steps` steps, which decay to 0 (`decay_shape`)."""
  peak, warmup, total = train.learning_rate, train.warmup_steps, max(train.num_steps, 1)
  warm = optax.linear_schedule(0.0, peak, max(warmup, 1)) if warmup else None
  decay_steps = max(total - warmup, 1)
  if train.schedule == 'linear':
    after = optax.linear_schedule(peak, 0.0, decay_steps)
  elif train.schedule == 'cosine':
    after = optax.cosine_decay_schedule(peak, decay_steps)
  elif train.schedule == 'constant':
    after = optax.constant_schedule(peak)
  elif train.schedule == 'wsd':
    after = _stable_then_decay(train, peak, total - warmup)
  else:
    raise ConfigError(f"train.schedule='{train.schedule}' is not one of {', '.join(SCHEDULES)}")
  return optax.join_schedules([warm, after], [warmup]) if warm else after


def _stable_then_decay(train, peak: float, steps: int) -> optax.Schedule:
  """Warmup-stable-decay after the warmup (Hu et al., 2024, MiniCPM; ModernBERT's trapezoid):
  `peak` until `train.decay_steps` before the end, then down to 0 in the shape `decay_shape`:
  linear, cosine, or 1-sqrt (1 - sqrt(progress): Hagele et al., 2024, which matched a cosine
  run's loss with a 20% decay). The stable part does not depend on train.num_steps, so a decay
  branched off any stable checkpoint (train.decay_from) retraces the stable steps exactly."""
  decay, shape = int(train.decay_steps), str(train.decay_shape)
  if shape not in DECAY_SHAPES:
    raise ConfigError(f"train.decay_shape='{shape}' is not one of {', '.join(DECAY_SHAPES)}")
  if not 0 <= decay <= steps:
    raise ConfigError(f'train.decay_steps={decay} must lie in 0..{steps} (the steps after '
                      'warmup; 0: no decay, a stable run that decays branch off)')
  start = steps - decay

  def schedule(count):
    progress = jnp.clip((count - start) / max(decay, 1), 0.0, 1.0)
    if shape == 'linear':
      factor = 1.0 - progress
    elif shape == 'cosine':
      factor = 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
    else:
      factor = 1.0 - jnp.sqrt(progress)
    return peak * jnp.where(count < start, 1.0, factor)
  return schedule


def budget_minutes(train) -> float:
  """`train.max_minutes` (0 where the config predates it): the run's wall-clock budget."""
  return float(train.get('max_minutes', 0.0) or 0.0)


def budgeted_learning_rate(train):
  """The learning rate of an update under a wall-clock budget (`train.max_minutes`), as a
  function of the updates done (`count`) and the share of the budget spent (`progress`, in
  [0, 1]; see encoder/train/time_budget.py): `learning_rate_schedule` read at the step that
  progress stands for, `progress x train.num_steps`, or at `count` where that is further.

  Warmup stays in steps (it reads `count`); after it, every schedule's decay (BERT's linear one,
  cosine, wsd's last `decay_steps / num_steps` of the run) is fitted into the budget and reaches
  its end, lr 0, when the budget does. A run that reaches `train.num_steps` before its budget
  (progress is then the step fraction) follows the step schedule itself."""
  schedule, warmup = learning_rate_schedule(train), train.warmup_steps
  total = max(train.num_steps, 1)

  def learning_rate(count, progress):
    stands_for = jnp.maximum(count, jnp.asarray(progress, jnp.float32) * total)
    return schedule(jnp.where(count < warmup, count, stands_for))
  return learning_rate


def scale_by_budgeted_learning_rate(learning_rate) -> optax.GradientTransformationExtraArgs:
  """Multiplies the updates by `learning_rate(count, progress)`, `progress` given to `update`
  as an extra argument (optax passes it through a chain) by the train step. Its state is
  optax's schedule counter, so the optimizer state stays plain arrays for Orbax."""
  def init(params):
    del params
    return optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

  def update(updates, state, params=None, *, progress, **extra_args):
    del params, extra_args
    rate = learning_rate(state.count, progress)
    updates = jax.tree.map(lambda u: jnp.asarray(rate, u.dtype) * u, updates)
    return updates, optax.ScaleByScheduleState(count=optax.safe_increment(state.count))
  return optax.GradientTransformationExtraArgs(init, update)


def weight_decay_mask(params):
  """True for the leaves weight decay applies to: kernels and embedding tables. The leaf's
  name is its last dict key: the mesh strategy also builds the optimizer on parameters still
  in Flax's logical boxes, whose paths end in the box's `value`."""
  def decays(path, _):
    names = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
    return names[-1] not in NO_DECAY_LEAVES
  return jax.tree_util.tree_map_with_path(decays, params)


def layer_depth(names: list[str], num_layers: int) -> int:
  """Where a parameter sits in the stack, for layer-wise decay: 0 for the embeddings, i + 1
  for encoder layer i, num_layers + 1 for everything above (pooler, final norm, task heads),
  as ELECTRA counts (Clark et al., 2020, appendix A)."""
  if 'embeddings' in names:
    return 0
  layer = next((n for n in names if n.startswith('layer_') and n[6:].isdigit()), None)
  return int(layer[6:]) + 1 if layer else num_layers + 1


def _dict_names(path) -> list[str]:
  return [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]


def layerwise_decay(decay: float) -> optax.GradientTransformation:
  """Scales each parameter's update by decay ** (num_layers + 1 - depth) (`layer_depth`): the
  task head moves at the full rate, each layer below it `decay` times slower, the embeddings
  slowest (ELECTRA's layer-wise learning-rate decay, also DeBERTa-v3's fine-tuning recipe).

  Chained after the optimizer, so it scales the whole step: the Adam update and the decoupled
  weight decay alike, as a per-layer learning rate does. The layer count is read off the
  parameter names (`layer_{i}`), so the same transform serves any depth and any strategy's
  tree (the mesh strategy's boxed leaves end in `value`)."""
  def update(updates, state, params=None):
    del params
    paths = [_dict_names(p) for p, _ in jax.tree_util.tree_flatten_with_path(updates)[0]]
    indices = [int(n[6:]) for names in paths for n in names
               if n.startswith('layer_') and n[6:].isdigit()]
    num_layers = max(indices) + 1 if indices else 0
    scaled = jax.tree_util.tree_map_with_path(
        lambda p, u: u * decay ** (num_layers + 1 - layer_depth(_dict_names(p), num_layers)),
        updates)
    return scaled, state
  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def make_optimizer(train) -> optax.GradientTransformation:
  """`base_optimizer`, with the layer-wise learning-rate decay of `train.layer_decay` (a
  fine-tuning field; 1 or absent: every layer at the same rate) chained after it.

  With a wall-clock budget (`train.max_minutes` > 0) the same chain runs at a learning rate of
  1 and its update is then scaled by `budgeted_learning_rate`, which reads the budget's
  progress: `tx.update(..., progress=p)`, which the train step passes. Without one, the
  optimizer is exactly what it was before budgets existed."""
  budgeted = budget_minutes(train) > 0
  opt = base_optimizer(train, optax.constant_schedule(1.0) if budgeted else None)
  decay = float(train.get('layer_decay', 1.0) or 1.0)
  if not 0 < decay <= 1:
    raise ConfigError(f'train.layer_decay={decay} must lie in (0, 1] (1: no decay)')
  if decay != 1:
    opt = optax.chain(opt, layerwise_decay(decay))
  if budgeted:
    opt = optax.chain(opt, scale_by_budgeted_learning_rate(budgeted_learning_rate(train)))
  return opt


def base_optimizer(train, schedule: optax.Schedule | None = None
                   ) -> optax.GradientTransformation:
  """Global-norm clipping, then AdamW, LAMB or StableAdamW with decoupled weight decay on
  kernels.

  optax's AdamW applies Adam's bias correction, which BERT's AdamWeightDecay omits; with 10k
  warmup steps the two are indistinguishable after the first few hundred steps. StableAdamW
  (stable_adamw.py) is AdamW whose step on each tensor shrinks when the gradient outgrows the
  second moment; its weight decay is AdamW's (lr x weight_decay x w, unclipped).

  `schedule` replaces the config's learning-rate schedule (a budgeted run's constant 1).
  """
  schedule = schedule or learning_rate_schedule(train)
  kwargs = dict(b1=train.b1, b2=train.b2, eps=train.eps, weight_decay=train.weight_decay,
                mask=weight_decay_mask)
  if train.optimizer == 'adamw':
    opt = optax.adamw(schedule, **kwargs)
  elif train.optimizer == 'lamb':
    opt = optax.lamb(schedule, **kwargs)
  elif train.optimizer == 'stable_adamw':
    opt = optax.chain(scale_by_stable_adam(train.b1, train.b2, train.eps),
                      optax.add_decayed_weights(train.weight_decay, weight_decay_mask),
                      optax.scale_by_learning_rate(schedule))
  else:
    raise ConfigError(f"train.optimizer='{train.optimizer}' is not one of "
                      f"{', '.join(OPTIMIZERS)}")
  if train.clip_norm and train.optimizer == 'adamw':  # the same chain, one pass per tensor
    return clipped_adamw(schedule, clip_norm=train.clip_norm, **kwargs)
  if train.clip_norm:
    return optax.chain(optax.clip_by_global_norm(train.clip_norm), opt)
  return opt
