"""`train_and_evaluate(config, workdir)`: the whole training run as one linear function.

The trainer never branches on the task: it asks `encoder.tasks.get_task(config.task)` for a
model, a loss, metric reduction and data, and runs the same loop for all of them.
"""

from __future__ import annotations

import logging
import os
import signal
import time

import jax

from encoder import config_schema, configs, storage, store_retry
from encoder.errors import ConfigError
from encoder.tasks.task_inputs import batch_examples
from encoder.train import distributed, faults, workdir_lock
from encoder.train import resolve as resolve_lib
from encoder.train.evaluation import BestMarker, Evaluator
from encoder.train.metric_writer import MetricWriter, Progress
from encoder.train.optim import learning_rate_schedule
from encoder.train.run_setup import setup_train_loop

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
  """The workdir's saved config (completed from the schema) if it belongs to this run, a
  `resolve_config` result; ConfigError if it belongs to another."""
  path = os.path.join(workdir, 'config.json')
  if not storage.exists(path):
    return None
  saved = config_schema.read_saved(workdir)
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
  run = setup_train_loop(config, workdir)
  config, t, task, strategy, data = run.config, run.config.train, run.task, run.strategy, run.data
  train_step, checkpointer, start, rstate = run.train_step, run.checkpointer, run.start_step, \
      run.state
  is_main = distributed.is_main_process()
  log.info('%s parameters; %d steps', f'{run.num_params:,}', t.num_steps)
  log.info('%s', distributed.describe_layout(t.batch_size, strategy.name, strategy.mesh_shape))
  for split, stats in data.stats.items():
    log.info('data %s: %s', split, stats)

  skip_nonfinite = bool(t.skip_nonfinite)
  monitor = faults.NonfiniteMonitor(skip_nonfinite)
  schedule = learning_rate_schedule(t)
  writer = MetricWriter(workdir, enabled=is_main, resume_step=start)
  progress = Progress(start, t.num_steps, t.batch_size, enabled=is_main)
  train_iter = data.train_iterator(run.data_state)
  evaluate = Evaluator(task, data, run.model, run.eval_step, t.eval_batches, workdir, strategy,
                       enabled=is_main)
  best = BestMarker(workdir, t.best_metric if 'best_metric' in t else '', enabled=is_main)

  def save(rstate, step: int, metrics: dict | None = None) -> None:
    host = strategy.to_checkpoint(rstate)
    checkpointer.save(step, host.params,
                      {'step': host.step, 'opt_state': host.opt_state, 'rng': host.rng},
                      train_iter.state(), force=True, metrics=metrics)

  window, eval_metrics, skipped, failure = [], {}, 0, None
  # This host's real and computed tokens in the log window: the packing efficiency (padding
  # is computed and wasted), read off the host batches, so nothing waits for a device.
  real_tokens, computed_tokens = 0, 0
  examples = 0  # this host's examples in the window: a packed step's count varies
  data_wait = 0.0  # seconds the window's steps waited for their batches: input-bound or not
  lengths = set()  # sequence lengths seen: one compile of the step each (length buckets)
  retries = RetryReport(progress, retried_before)
  step = start
  try:
    while step < t.num_steps:
      waited = time.perf_counter()
      batch = next(train_iter)
      data_wait += time.perf_counter() - waited
      length = batch['input_ids'].shape[-1]
      if length not in lengths:
        lengths.add(length)
        progress.write(f'step {step + 1}: compiling the train step for sequence length '
                       f'{length} ({len(lengths)} so far)')
      real_tokens += int(batch['input_mask'].sum())
      computed_tokens += batch['input_mask'].size
      examples += batch_examples(batch)
      rstate, sums = train_step(rstate, strategy.place_batch(batch))
      step += 1
      monitor.add(step, sums)
      window.append(sums)
      last = step == t.num_steps
      progress.update(step)
      if step == t.stop_at_step and not stop.signal:
        stop.signal = f'train.stop_at_step={step}'
      logged, evaluated = step % t.log_every == 0 or last, step % t.eval_every == 0 or last
      # Read once (a later signal is handled next step), and agreed by every host.
      stopping = distributed.agreed_stop(stop.signal, logged or step == t.stop_at_step)
      if logged or evaluated or stopping or step % t.checkpoint_every == 0:
        try:  # a sync point: nothing poisoned is logged, evaluated or saved past here
          skipped += monitor.check()
        except faults.NonFiniteError as e:
          failure = e
          break
      if logged:
        metrics = _reduce_window(task, window, strategy.sum_metrics, skipped)
        if skip_nonfinite:
          metrics['skipped_steps'] = skipped
        # Examples: this host's count times the hosts (hosts hold equal shares of rows).
        steps_per_sec, examples_per_sec = progress.rates(step, examples * jax.process_count())
        wait_per_step = data_wait / len(window)
        metrics.update(learning_rate=float(schedule(step - 1)), steps_per_sec=steps_per_sec,
                       examples_per_sec=examples_per_sec,
                       real_token_fraction=real_tokens / max(computed_tokens, 1),
                       data_wait_s=wait_per_step)
        writer.write(step, 'train', metrics)
        shown = {'loss': metrics['loss'], 'steps_per_sec': steps_per_sec,
                 'examples_per_sec': examples_per_sec}
        if input_bound(wait_per_step, steps_per_sec):
          shown['data_wait_s'] = wait_per_step
        progress.update(step, **shown)
        retries.report()
        window, skipped, real_tokens, computed_tokens, examples = [], 0, 0, 0, 0
        data_wait = 0.0
      if evaluated:
        eval_metrics = evaluate(rstate, step)
        writer.write(step, 'eval', eval_metrics)
        progress.write(f'step {step} eval: ' + ', '.join(
            f'{k} {v:.4f}' for k, v in sorted(eval_metrics.items())))
      improved = evaluated and best.improves(eval_metrics)
      if step % t.checkpoint_every == 0 or last or stopping or improved:
        save(rstate, step, best.checkpoint_metrics(eval_metrics) if evaluated else None)
      if improved:
        best.mark(step, eval_metrics)
      if stopping:
        checkpointer.wait()  # committed (or a CheckpointError) before we say it is saved
        progress.write(f'Stopped by {stopping} at step {step}: checkpoint saved; run the '
                       'same command to resume.')
        break
  except BaseException:
    # The run stops here (a shard gone, a failed upload, Ctrl-C twice): the save in flight
    # still commits, so the newest checkpoint is whole; its own failure is reported beside.
    train_iter.close()
    _finish_saving(checkpointer)
    progress.close()
    raise
  train_iter.close()
  log.info('train step compiled for %d sequence length(s): %s', len(lengths),
           ', '.join(map(str, sorted(lengths))))
  checkpointer.close()  # waits for the last save: the last good state is on disk
  progress.close()
  writer.close()
  retries.report(final=True)
  if failure is not None:
    raise failure
  return eval_metrics


def input_bound(wait_per_step: float, steps_per_sec: float) -> bool:
  """Whether the steps waited for data long enough to say so: over 5% of a step and 1 ms."""
  return wait_per_step > max(1e-3, 0.05 / max(steps_per_sec, 1e-9))


class RetryReport:
  """Says in the log when the store's transient errors were retried (store_retry counts)."""

  def __init__(self, progress: Progress, start: dict[str, int]):
    self.progress, self.start = progress, start
    self.seen: dict[str, int] = {}

  def report(self, final: bool = False) -> None:
    now = {k: v - self.start.get(k, 0) for k, v in store_retry.counts().items()}
    now = {k: v for k, v in now.items() if v}
    if now == self.seen and not (final and now):
      return
    total = sum(now.values())
    kinds = ', '.join(f'{k} {v}' for k, v in sorted(now.items()))
    line = f'storage: {total} transient error(s) retried so far ({kinds})'
    if final:
      log.info('%s', line.replace('so far', 'in this run'))
    else:
      self.progress.write(line)
    self.seen = now


def _finish_saving(checkpointer) -> None:
  try:
    checkpointer.close()
  except Exception as e:  # noqa: BLE001 - already stopping for another error: say it, go on
    log.warning('warning: %s', e)


def _reduce_window(task, window: list, sum_metrics, skipped: int = 0) -> dict:
  """Fetches a log window's metric sums from the devices (the only host sync) and reduces them.
  Skipped steps (train.skip_nonfinite) added zeros, so they count in no mean."""
  total = sum_metrics(window)
  grad_norm = total.pop('grad_norm') / max(len(window) - skipped, 1)
  metrics = task.reduce_metrics(total)
  metrics['grad_norm'] = float(grad_norm)
  return metrics
