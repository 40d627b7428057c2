"""One set-up of a run: config -> task, data, resolved config, model, optimizer, strategy, state
and compiled steps. The trainer's loop, the benchmarks and the tests all start from here, so
what they time or check is what `launch.py` trains (maxtext's `setup_train_loop` is the shape).

  run = setup_train_loop(config, workdir)   # the trainer's: data, config.json, checkpoints
  run = setup_steps(config)                 # a resolved config and no data (synthetic batches)
  run = setup_for_target(config, target)    # shapes only, laid out on a compile target

All give a `RunSetup`; `setup_train_loop` also restores the newest readable checkpoint of the
workdir (else the `train.decay_from` checkpoint a branch continues, else starts fresh from
`init_from`'s weights) and keeps the `Checkpointer` that did it; `setup_for_target` builds the
run a TPU slice or GPUs would train (encoder/train/targets.py) with nothing allocated, for
`--compile_for` (encoder/train/compile_report.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import jax
import numpy as np

from encoder import configs, storage
from encoder.modules.attention import forms_by_layer_kind
from encoder.modules.config import building_for
from encoder.tasks import Task, get_task
from encoder.train import branch, cpu_features, distributed, prng
from encoder.train import checkpoint as ckpt_lib
from encoder.train import resolve as resolve_lib
from encoder.train.optim import budget_minutes, make_optimizer
from encoder.train.steps import TrainState
from encoder.train.strategy import init_params, make_strategy

log = logging.getLogger('encoder')


@dataclasses.dataclass
class RunSetup:
  """Everything a training loop steps with. `state` is placed by `strategy` (replicated under
  pmap, sharded under the mesh; for a compile target, abstract arrays in that layout, with
  `batch` the global batch's); `data`, `checkpointer` and `data_state` are None without
  data."""
  config: Any  # resolved: nothing changes it from here on
  task: Task
  strategy: Any
  model: Any
  tx: Any
  dummy: dict
  state: TrainState
  train_step: Any
  eval_step: Any
  num_params: int
  start_step: int = 0
  data: Any = None
  data_state: dict | None = None
  checkpointer: ckpt_lib.Checkpointer | None = None
  batch: dict | None = None


def write_config(config, workdir: str) -> None:
  storage.makedirs(workdir)
  storage.write_atomic(os.path.join(workdir, 'config.json'), configs.to_json(config))


def setup_train_loop(config, workdir: str) -> RunSetup:
  """The run the trainer loops over, from `config` (a `resolve.resolve_config` result: its
  architecture and tokenizer settled, which the data needs) in `workdir` (known to be this
  run's): the task's data, the final config written to config.json, and the state restored
  from the newest readable checkpoint, else fresh (with init_from's weights)."""
  task = get_task(config.task, config)
  strategy = make_strategy(config.parallel)
  # Fails early if indivisible (the resolved batch size is the same).
  strategy.per_device_batch_size(config.train.batch_size, config.train.grad_accum_steps)
  if task.prepare_data is not None:  # outside the barrier below: process 0 may take hours
    task.prepare_data(config, workdir, jax.process_index())
  data = distributed.main_process_first(
      lambda: task.datasets(config, workdir, jax.process_index(), jax.process_count()))
  config = resolve_lib.resolve(config, task, data)  # final: nothing changes it from here on
  task = get_task(config.task, config)  # bound to the final settings (contrastive.loss)
  if distributed.is_main_process():
    write_config(config, workdir)
  t = config.train
  model, tx, dummy = _parts(config, task)
  checkpointer = ckpt_lib.Checkpointer(workdir, t.keep_checkpoints,
                                       best_metric=t.best_metric if 'best_metric' in t else '')
  like = strategy.checkpoint_like(model, tx, dummy)  # shapes (and layout), no device memory
  saved = checkpointer.restore_newest_readable(like)
  if saved is not None:
    log.info('Resuming from checkpoint at step %d in %s', saved.step, checkpointer.directory)
  elif t.decay_from:  # a new branch: the source run's checkpoint, whole
    saved = branch.restore(t.decay_from, like)
  if saved is not None:
    start, data_state, state = saved.step, saved.data_state, strategy.place_state(saved.state)
  else:  # a new run, or one stopped before its first checkpoint: init_from applies again
    start, data_state = 0, None
    state = strategy.init_state(model, tx, dummy, t.seed, _init_from_params(config, model, dummy))
  return RunSetup(config, task, strategy, model, tx, dummy, state,
                  *_compiled(config, task, strategy, model, tx), _count(like.params),
                  start_step=start, data=data, data_state=data_state, checkpointer=checkpointer)


def setup_steps(config, params=None) -> RunSetup:
  """The model, optimizer, fresh state (seeded by train.seed, or around the given host
  `params`) and compiled steps of a config that needs no data to resolve: for benchmarks and
  tests that step on batches of their own."""
  task = get_task(config.task, config)
  strategy = make_strategy(config.parallel)
  model, tx, dummy = _parts(config, task)
  state = strategy.init_state(model, tx, dummy, config.train.seed, params)
  like = strategy.checkpoint_like(model, tx, dummy)
  return RunSetup(config, task, strategy, model, tx, dummy, state,
                  *_compiled(config, task, strategy, model, tx), _count(like.params))


def setup_for_target(config, target) -> RunSetup:
  """The run `config` (a `resolve_config` result) would train on `target` (a
  `targets.Target`), from shapes alone: no corpus read, nothing allocated. The model is the
  one `auto` builds on the target's platform (splash on a TPU), the strategy lays the state
  and the global batch out on its devices as abstract arrays (`state`, `batch`), and the
  steps lower and compile for it."""
  config = resolve_lib.resolve_without_data(config)
  task = get_task(config.task, config)
  strategy = make_strategy(config.parallel, target.devices)
  strategy.per_device_batch_size(config.train.batch_size, config.train.grad_accum_steps)
  with building_for(target.platform):
    model, tx, dummy = _parts(config, task, target.platform)
  batch = jax.eval_shape(lambda: task.dummy_batch(config, config.train.batch_size))
  state, batch = strategy.compile_args(model, tx, dummy, batch)
  return RunSetup(config, task, strategy, model, tx, dummy, state,
                  *_compiled(config, task, strategy, model, tx), _count(state.params),
                  batch=batch)


def attention_forms(config, model, training: bool = True) -> dict[str, str]:
  """The form each kind of `model`'s layers runs on rows of `data.max_seq_length` tokens
  (`attention.layer_form`): what the run's log and `--compile_for`'s report say."""
  return forms_by_layer_kind(model.config, config.data.max_seq_length,
                             packed=config.data.get('packing', 'none') != 'none',
                             training=training)


def _parts(config, task, platform: str | None = None):
  platform = platform or jax.default_backend()
  model = task.build_model(config)
  forms = attention_forms(config, model)
  log.info('attention: %s (model.attention_impl=%s on %s); rows of %d tokens: %s',
           model.config.attention_impl, config.model.attention_impl, platform,
           config.data.max_seq_length, ', '.join(f'{k} layers {v}' for k, v in forms.items()))
  hint = cpu_features.bfloat16_hint(config.model.dtype, platform)
  if hint:  # a float32 run on a CPU with bfloat16 products
    log.info(hint)
  return model, make_optimizer(config.train), task.dummy_batch(config)


def _init_from_params(config, model, dummy) -> dict | None:
  """Fresh parameters with init_from's weights merged in (None without init_from: the
  strategy then creates them in place)."""
  if not config.init_from:
    return None
  fresh = init_params(model, dummy, config.train.seed)
  params, new = ckpt_lib.merge_init_from(fresh, ckpt_lib.load_params(config.init_from))
  params, again = ckpt_lib.reinitialise_top_layers(params, fresh,
                                                   int(config.train.get('reinit_layers', 0)))
  new += again
  log.info('Initialised from %s; freshly initialised: %s', config.init_from,
           ', '.join(new) or 'nothing')
  return params


def _compiled(config, task, strategy, model, tx):
  t = config.train
  return strategy.steps(model, task, tx, t.grad_accum_steps, bool(t.skip_nonfinite),
                        progress=budget_minutes(t) > 0,  # a budget's step takes its progress
                        rng_impl=prng.check(t))


def _count(params) -> int:
  return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))
