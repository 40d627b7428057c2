"""The training loop: step, log, evaluate and save until the last step or a stop request.

`run_loop` reads as the run goes: each step takes a batch and updates the state; every
`train.log_every` steps the window's metrics become one train record, every `train.eval_every`
steps the evaluator writes an eval record, and every `train.checkpoint_every` steps (and at the
end, at a stop request, and when the best metric improves) the state is saved. What a log
window adds up is kept in `LogWindow`; the loop only decides when. With a wall-clock budget
(`train.max_minutes`) the end may come before `train.num_steps`: `time_budget.TimeBudget` says
when, and gives each step the schedule's progress.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time

import jax
import numpy as np

from encoder import store_retry
from encoder.errors import ConfigError
from encoder.tasks.task_inputs import batch_examples
from encoder.train import distributed, faults, time_budget
from encoder.train.evaluation import BestMarker, Evaluator
from encoder.train.metric_writer import MetricWriter, Progress
from encoder.train.optim import budget_minutes, budgeted_learning_rate, learning_rate_schedule
from encoder.train.run_setup import RunSetup

log = logging.getLogger('encoder')
WINDOW_KEY = 'log_window'  # the open log window, beside the loader's position


@dataclasses.dataclass
class LogWindow:
  """The steps since the last train record: their metric sums (still on the devices), and what
  the host reads off its batches (real and computed tokens: the packing efficiency; examples:
  a packed step's count varies; seconds waited for a batch: input-bound or not), so nothing
  waits for a device until the record is written.

  A run stopped between two records saves its open window with the checkpoint (`state`), and
  the resumed run starts from it (`resumed`), so the next record covers the same steps as an
  uninterrupted run's, with the same sums bit for bit: the saved sums re-enter the host's
  left-to-right sum as its first term. Examples and waits stay this run's own: they are rates
  over the time since the run (re)started."""
  sums: list = dataclasses.field(default_factory=list)
  real_tokens: int = 0
  computed_tokens: int = 0
  examples: int = 0
  data_wait: float = 0.0
  skipped: int = 0  # steps skipped as non-finite (train.skip_nonfinite): they add zeros
  steps: int = 0  # steps in the window, those before a resume included
  carried: dict | None = None  # the host sums of the steps before a resume

  def add(self, batch: dict, sums: dict, waited: float) -> None:
    self.sums.append(sums)
    self.steps += 1
    for mask in token_masks(batch):
      self.real_tokens += int(mask.sum())
      self.computed_tokens += mask.size
    self.examples += batch_examples(batch)
    self.data_wait += waited

  def _all_sums(self) -> list:
    """The per-step sums, led by the carried ones shaped like a step's (what `sum_metrics`
    reads: under pmap, one row per device)."""
    if self.carried is None:
      return self.sums
    first = jax.tree.map(lambda x, c: np.broadcast_to(np.asarray(c, x.dtype), x.shape),
                         self.sums[0], self.carried)
    return [first, *self.sums]

  def state(self, strategy) -> dict | None:
    """The open window as JSON for the checkpoint (None when empty: a save right after a
    record adds nothing). The sums are added up here on the host, as `record` would."""
    if not self.steps:
      return None
    sums = self.carried
    if self.sums:
      sums = jax.tree.map(lambda x: np.asarray(x).tolist(), strategy.sum_metrics(self._all_sums()))
    return {'steps': self.steps, 'sums': sums, 'real_tokens': self.real_tokens,
            'computed_tokens': self.computed_tokens, 'skipped': self.skipped}

  @classmethod
  def resumed(cls, state: dict | None) -> LogWindow:
    """The window a checkpoint saved (`state`), or an empty one."""
    if not state:
      return cls()
    return cls(real_tokens=state['real_tokens'], computed_tokens=state['computed_tokens'],
               skipped=state['skipped'], steps=state['steps'], carried=state['sums'])

  def record(self, run: RunSetup, step: int, progress: Progress, learning_rate: float
             ) -> tuple[dict, dict]:
    """The train record (fetching the sums from the devices: the loop's one host sync) and
    what the progress bar shows of it; `learning_rate` is the last step's."""
    total = run.strategy.sum_metrics(self._all_sums())
    grad_norm = total.pop('grad_norm') / max(self.steps - self.skipped, 1)
    metrics = run.task.reduce_metrics(total)
    metrics['grad_norm'] = float(grad_norm)
    if run.config.train.skip_nonfinite:
      metrics['skipped_steps'] = self.skipped
    # Examples: this host's count times the hosts (hosts hold equal shares of rows).
    steps_per_sec, examples_per_sec = progress.rates(step, self.examples * jax.process_count())
    wait_per_step = self.data_wait / len(self.sums)
    metrics.update(learning_rate=learning_rate,
                   steps_per_sec=steps_per_sec, examples_per_sec=examples_per_sec,
                   real_token_fraction=self.real_tokens / max(self.computed_tokens, 1),
                   data_wait_s=wait_per_step)
    shown = {'loss': metrics['loss'], 'steps_per_sec': steps_per_sec,
             'examples_per_sec': examples_per_sec}
    if input_bound(wait_per_step, steps_per_sec):
      shown['data_wait_s'] = wait_per_step
    return metrics, shown


def run_loop(run: RunSetup, workdir: str, stop, retried_before: dict[str, int]) -> dict:
  """Trains `run` from its start step to `train.num_steps` (or until `stop.signal` is set: a
  checkpoint is saved first; or until its wall-clock budget ends); returns the last eval
  metrics. A non-finite step ends the run with its error once the last good state is saved."""
  t, strategy, is_main = run.config.train, run.strategy, distributed.is_main_process()
  budget = _budget(run)  # None without train.max_minutes: the loop is then as it always was
  writer = MetricWriter(workdir, enabled=is_main, resume_step=run.start_step)
  progress = Progress(run.start_step, t.num_steps, t.batch_size, enabled=is_main,
                      budgeted=budget is not None)
  train_iter = run.data.train_iterator(run.data_state)
  evaluate = Evaluator(run.task, run.data, run.model, run.eval_step, t.eval_batches, workdir,
                       strategy, enabled=is_main)
  if budget is not None:  # its clock times evaluations compiled, the final one too
    evaluate.compile(run.state)
  best = BestMarker(workdir, t.best_metric if 'best_metric' in t else '', enabled=is_main)
  monitor, retries = faults.NonfiniteMonitor(bool(t.skip_nonfinite)), \
      RetryReport(progress, retried_before)
  learning_rate = _learning_rate(t, budget)
  window, lengths, eval_metrics, failure = LogWindow.resumed(_open_window(run)), set(), {}, None
  state, step, previous = run.state, run.start_step, None
  try:
    while step < t.num_steps and not (budget is not None and budget.ended):
      waited = time.perf_counter()
      batch = next(train_iter)
      waited = time.perf_counter() - waited
      compiles = _note_length(batch, lengths, step, progress)
      if budget is None:
        state, sums = run.train_step(state, strategy.place_batch(batch))
      else:
        state, sums = run.train_step(state, strategy.place_batch(batch),
                                     np.float32(budget.progress(step)))
        jax.block_until_ready(previous)  # the clock reads finished work, one step behind
        budget.stepped(compiled=compiles)
        previous = sums
      step += 1
      monitor.add(step, sums)
      window.add(batch, sums, waited)
      progress.update(step)
      if step == t.stop_at_step and not stop.signal:
        stop.signal = f'train.stop_at_step={step}'
      last = step == t.num_steps or (budget is not None and budget.should_end(
          evaluating=step % t.eval_every == 0, saving=step % t.checkpoint_every == 0))
      logged, evaluated = step % t.log_every == 0 or last, step % t.eval_every == 0 or last
      # Read once (a later signal is handled next step), and agreed by every host.
      stopping = distributed.agreed_stop(stop.signal, logged or step == t.stop_at_step)
      if logged or evaluated or stopping or step % t.checkpoint_every == 0:
        try:  # a sync point: nothing poisoned is logged, evaluated or saved past here
          window.skipped += monitor.check()
        except faults.NonFiniteError as e:
          failure = e
          break
      if logged:
        metrics, shown = window.record(run, step, progress, learning_rate(step - 1))
        if budget is not None:
          metrics.update(budget.record())
          shown['minutes'] = budget.shown()
        writer.write(step, 'train', metrics)
        progress.update(step, **shown)
        retries.report()
        window = LogWindow()
      if evaluated:
        # The minutes at which this state was reached: the curve against wall clock.
        clock = {} if budget is None else {'elapsed_minutes': budget.elapsed_s() / 60.0}
        with _timed(budget, 'eval'):
          eval_metrics = evaluate(state, step)
        writer.write(step, 'eval', {**eval_metrics, **clock})
        progress.write(f'step {step} eval: ' + ', '.join(
            f'{k} {v:.4f}' for k, v in sorted(eval_metrics.items())))
      improved = evaluated and best.improves(eval_metrics)
      if step % t.checkpoint_every == 0 or last or stopping or improved:
        with _timed(budget, 'save'):
          run.checkpointer.save(step, strategy.to_checkpoint(state),
                                _position(train_iter, window, strategy, budget), force=True,
                                metrics=best.checkpoint_metrics(eval_metrics)
                                if evaluated else None)
          if budget is not None:
            run.checkpointer.wait()  # a save's whole time, for the reserve of the last one
      if improved:
        best.mark(step, eval_metrics)
      if budget is not None and budget.ended:
        progress.write(f'Wall-clock budget of {budget.minutes:g} minutes reached at step '
                       f'{step} ({budget.elapsed_s() / 60:.1f} minutes): evaluated and saved.')
        break
      if stopping:
        run.checkpointer.wait()  # committed (or a CheckpointError) before we say it is saved
        progress.write(f'Stopped by {stopping} at step {step}: checkpoint saved; run the '
                       'same command to resume.')
        break
  except BaseException:
    # The run stops here (a shard gone, a failed upload, Ctrl-C twice): the save in flight
    # still commits, so the newest checkpoint is whole; its own failure is reported beside.
    train_iter.close()
    _finish_saving(run.checkpointer)
    progress.close()
    raise
  train_iter.close()
  log.info('train step compiled for %d sequence length(s): %s', len(lengths),
           ', '.join(map(str, sorted(lengths))))
  run.checkpointer.close()  # waits for the last save: the last good state is on disk
  if budget is not None:
    log.info('training clock: %.2f of %g minutes, %d steps', budget.elapsed_s() / 60,
             budget.minutes, step)
  progress.close()
  writer.close()
  retries.report(final=True)
  if failure is not None:
    raise failure
  return eval_metrics


def _position(train_iter, window: LogWindow, strategy, budget=None) -> dict:
  """What the checkpoint's `data` item keeps: the loader's position, the open log window
  when the save falls between two train records (a stop, a checkpoint_every off log_every),
  and with a wall-clock budget its clock (`time_budget.CLOCK_KEY`)."""
  position, open_window = train_iter.state(), window.state(strategy)
  if open_window is not None:
    position = {**position, WINDOW_KEY: open_window}
  if budget is not None:
    position = {**position, time_budget.CLOCK_KEY: budget.state()}
  return position


def _budget(run: RunSetup) -> time_budget.TimeBudget | None:
  """The run's wall-clock budget, its clock continued from the restored checkpoint; None
  without one."""
  t = run.config.train
  minutes = budget_minutes(t)
  if not minutes:
    return None
  if jax.process_count() > 1:  # each host's clock would give its replicas another rate
    raise ConfigError('train.max_minutes runs in one process for now; a multi-host run sets '
                      'train.num_steps')
  budget = time_budget.TimeBudget(minutes, t.num_steps,
                                  (run.data_state or {}).get(time_budget.CLOCK_KEY),
                                  eval_batches=t.eval_batches)
  log.info('wall-clock budget: %g minutes (%.2f spent by the run before this process); '
           'at most %d steps', minutes, budget.before_s / 60, t.num_steps)
  return budget


def _learning_rate(t, budget):
  """The learning rate of the update after `count` updates, as the step computed it."""
  if budget is None:
    schedule = learning_rate_schedule(t)
    return lambda count: float(schedule(count))
  rate = budgeted_learning_rate(t)
  return lambda count: float(rate(count, budget.last_progress))


def _timed(budget, what: str):
  """`budget.timed(what)`, or nothing without a budget."""
  return contextlib.nullcontext() if budget is None else budget.timed(what)


def _open_window(run: RunSetup) -> dict | None:
  """The log window the restored checkpoint saved (None: a fresh run, or a save at a record)."""
  return (run.data_state or {}).get(WINDOW_KEY)


def token_masks(batch: dict) -> list:
  """The batch's real-token masks: `input_mask`, or one per text role (`anchor_mask`, ...:
  contrastive batches)."""
  return [v for k, v in sorted(batch.items()) if k == 'input_mask' or k.endswith('_mask')]


def _note_length(batch: dict, lengths: set, step: int, progress: Progress) -> bool:
  """Says when a batch brings a sequence length not seen yet: the step compiles again (True)."""
  shape = tuple(m.shape[-1] for m in token_masks(batch))
  if shape in lengths:
    return False
  lengths.add(shape)
  length = shape[0] if len(shape) == 1 else 'x'.join(map(str, shape))
  progress.write(f'step {step + 1}: compiling the train step for sequence length '
                 f'{length} ({len(lengths)} so far)')
  return True


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
