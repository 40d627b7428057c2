"""`train_and_evaluate(config, workdir)`: the whole training run as one linear function.

The trainer never branches on the task: it asks `encoder.tasks.get_task(config.task)` for a
model, a loss, metric reduction and data, and runs the same loop for all of them.
"""

from __future__ import annotations

import logging
import os
import signal

from encoder import configs, saved_config, storage, store_retry
from encoder.errors import ConfigError
from encoder.train import distributed, out_of_memory, workdir_lock, xla_cache
from encoder.train import resolve as resolve_lib
from encoder.train.run_setup import attention_forms, setup_train_loop
from encoder.train.train_loop import run_loop

log = logging.getLogger('encoder')

# Fields a resumed run may change; anything else differing from the workdir's config.json
# means the workdir belongs to another run.
RESUMABLE_KEYS = frozenset({
    'train.num_steps', 'train.log_every', 'train.eval_every', 'train.eval_batches',
    'train.checkpoint_every', 'train.keep_checkpoints', 'data.prefetch', 'data.cache_dir',
    'data.prepared_dir', 'data.prepare_workers', 'data.prepare_timeout_s',
    'train.stop_at_step', 'init_from', 'train.num_epochs', 'train.skip_nonfinite',
    'data.read_concurrency',  # how the corpus is read: a choice of the machine, like these
    # How attention is computed (its form, the blockwise form's tiles) and whether activations
    # are kept or recomputed: choices of the machine (its kernels, its memory), the same
    # model and mathematics (rounding, and which dropout masks are drawn, aside).
    'model.attention_impl', 'model.attention_block_size', 'model.remat'})
RESUMABLE_SECTIONS = frozenset({'parallel'})  # the device layout, not the run


def setup_logging() -> None:
  """Our INFO lines on stderr, whatever a library did to the root logger first."""
  if not log.handlers:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter('%(asctime)s %(message)s', datefmt='%H:%M:%S'))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
  for noisy in ('absl', 'orbax', 'jax'):
    logging.getLogger(noisy).setLevel(logging.WARNING)


def check_workdir(config, workdir: str) -> dict | None:
  """The workdir's saved config (completed from the schema) if it belongs to this run, a
  `resolve_config` result; ConfigError if it belongs to another."""
  path = os.path.join(workdir, 'config.json')
  if not storage.exists(path):
    return None
  saved = saved_config.read_saved(workdir)
  current = config.to_dict()
  # The experiment first, as the most telling difference; fields the data fills (unset here)
  # do not count.
  for key in ['experiment', *configs.flatten_keys(config)]:
    here = configs.nested_get(current, key.split('.'))
    there = configs.nested_get(saved, key.split('.'))
    resumable = key in RESUMABLE_KEYS or key.split('.')[0] in RESUMABLE_SECTIONS
    if resumable or here is None or here == there:
      continue
    raise ConfigError(
        f"workdir '{workdir}' belongs to a different run ({key}={there!r} there, {here!r} "
        'here): pass another --workdir, or the same settings to resume it')
  return saved


class _StopRequest:
  """Turns SIGTERM/SIGINT into a flag the loop checks after each step (preemption)."""

  def __init__(self):
    self.signal = None
    self._previous = {}

  def __enter__(self):
    for sig in (signal.SIGTERM, signal.SIGINT):
      self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def _handle(self, signum, _frame):
    self.signal = signal.Signals(signum).name

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)


def train_and_evaluate(config, workdir: str) -> dict:
  """Trains (or resumes) `config` in `workdir`; returns the final eval metrics."""
  setup_logging()
  distributed.initialize(config.parallel)
  workdir = storage.abspath(workdir)  # a bucket URL stays one; an unknown scheme is refused
  storage.check_checkpoint_location(workdir)
  storage.check_bucket(workdir)  # a missing bucket or no credentials: before anything is written
  config = resolve_lib.resolve_config(config)  # every refusal before anything is written
  check_workdir(config, workdir)
  # SIGTERM/SIGINT become a stop request from here to the end (set-up, eval, checkpoint writes,
  # uploads, the final wait): a signal outside the loop must not kill a run mid-commit.
  with _StopRequest() as stop, workdir_lock.hold(workdir, enabled=distributed.is_main_process()):
    return _train(config, workdir, stop)


def _train(config, workdir: str, stop: _StopRequest) -> dict:
  """The run itself, once the workdir is known to be ours and locked."""
  retried_before = store_retry.counts()  # this run's retries are counted from here
  with xla_cache.cache_compiles(xla_cache.run_cache_dir(config.train.compile_cache)) as cache:
    with out_of_memory.said_in_one_line(config):  # a state too big for its devices
      run = setup_train_loop(config, workdir)
    t = run.config.train
    log.info('%s parameters; %d steps; compiled programs cached in %s', f'{run.num_params:,}',
             t.num_steps, cache or 'none (train.compile_cache)')
    log.info('%s', distributed.describe_layout(t.batch_size, run.strategy.name,
                                               run.strategy.mesh_shape))
    for split, stats in run.data.stats.items():
      log.info('data %s: %s', split, stats)
    with out_of_memory.said_in_one_line(run.config, attention_forms(run.config, run.model)):
      return run_loop(run, workdir, stop, retried_before)
