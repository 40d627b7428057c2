"""`train_and_evaluate(config, workdir)`: the whole training run as one linear function.

The trainer never branches on the task: it asks `encoder.tasks.get_task(config.task)` for a
model, a loss, metric reduction and data, and runs the same loop for all of them.
"""

from __future__ import annotations

import json
import logging
import os
import signal

from encoder import configs, storage, store_retry
from encoder.errors import ConfigError
from encoder.tasks import get_task
from encoder.train import branch, distributed, workdir_lock
from encoder.train import checkpoint as ckpt_lib
from encoder.train import resolve as resolve_lib
from encoder.train.run_setup import setup_train_loop
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
    'model.attention_impl'})  # how attention is computed: a choice of the machine
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
  """The workdir's saved config if it belongs to this run; ConfigError if it belongs to another."""
  path = os.path.join(workdir, 'config.json')
  if not storage.exists(path):
    return None
  saved = json.loads(storage.read_text(path))
  current = configs.from_json(configs.to_json(config))
  # The experiment first, as the most telling difference; fields unset here (filled from the
  # data) or absent there (added to the code since) do not count.
  for key in ['experiment', *configs.flatten_keys(current)]:
    here = configs.nested_get(current.to_dict(), key.split('.'))
    there = configs.nested_get(saved, key.split('.'))
    resumable = key in RESUMABLE_KEYS or key.split('.')[0] in RESUMABLE_SECTIONS
    if resumable or here is None or there is None or here == there:
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
  get_task(config.task)  # an unknown task fails before anything is written
  branch.check(config)
  inherited = resolve_lib.init_from_fields(config)
  config = configs.with_fields(config, inherited)  # the data needs init_from's tokenizer
  saved = check_workdir(config, workdir)
  if config.init_from and saved is None:
    ckpt_lib.find_params_directory(config.init_from)  # fail before anything is written
  origin = ('init_from', config.init_from) if config.init_from else \
      ('decay_from', config.train.get('decay_from', ''))
  if origin[1] and saved is None:
    for key, value in inherited.items():
      log.info('From %s %s: %s=%r', *origin, key, value)
  # SIGTERM/SIGINT become a stop request from here to the end (set-up, eval, checkpoint writes,
  # uploads, the final wait): a signal outside the loop must not kill a run mid-commit.
  with _StopRequest() as stop, workdir_lock.hold(workdir, enabled=distributed.is_main_process()):
    return _train(config, workdir, stop)


def _train(config, workdir: str, stop: _StopRequest) -> dict:
  """The run itself, once the workdir is known to be ours and locked."""
  retried_before = store_retry.counts()  # this run's retries are counted from here
  run = setup_train_loop(config, workdir)
  t = run.config.train
  log.info('%s parameters; %d steps', f'{run.num_params:,}', t.num_steps)
  log.info('%s', distributed.describe_layout(t.batch_size, run.strategy.name,
                                             run.strategy.mesh_shape))
  for split, stats in run.data.stats.items():
    log.info('data %s: %s', split, stats)
  return run_loop(run, workdir, stop, retried_before)
