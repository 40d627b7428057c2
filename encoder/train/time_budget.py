"""A wall-clock budget for a run (`train.max_minutes`): when it ends, and how far along it is.

The training clock starts with the training loop: the compiles, evaluations and checkpoint
saves inside it count, the data preparation and set-up before it do not. It is saved with every
checkpoint (in the `data` item, as JSON) and a resumed run continues it, so a run preempted and
resumed trains for the same minutes in all as one that was not.

The run ends early enough for its final evaluation and save to fit in the budget: it keeps a
reserve, the measured time of its last evaluation plus its last save, and ends once another
step would eat into it (two steps' time: the one still on the device and the next).

The learning-rate schedule reads `progress`: the share of the budget spent before the final
evaluation and save (elapsed / (budget - reserve)), or the share of `train.num_steps` done where
that is larger, never decreasing. `optim.budgeted_learning_rate` fits the decay into it, so the
learning rate reaches its end as the run does. A budgeted run depends on the clock, so unlike a
run without one it does not repeat bit for bit.

No JAX here: `resolve` calls `check` on the config before anything is written.
"""

from __future__ import annotations

import contextlib
import time

from encoder.errors import ConfigError

now = time.monotonic  # the training clock (seconds); tests replace it
CLOCK_KEY = 'training_clock'  # the checkpoint's data item holds `TimeBudget.state()` here
STEPS_AHEAD = 2  # steps whose time is kept free at the end: one in flight and the next


def check(train) -> None:
  """Refuses, in one line, a budget that cannot work (before anything is written)."""
  minutes = float(train.get('max_minutes', 0.0) or 0.0)
  if minutes < 0:
    raise ConfigError(f'train.max_minutes={minutes:g} must be 0 (no budget) or positive')
  if minutes and train.get('decay_from', ''):
    raise ConfigError('train.max_minutes with train.decay_from: a decay branch is as long as its '
                      'steps (train.decay_steps); set one or the other')


class TimeBudget:
  """The clock of one run: seconds its earlier processes spent (restored from the checkpoint)
  plus those since this process's loop started, against `minutes`."""

  def __init__(self, minutes: float, num_steps: int, saved: dict | None = None,
               eval_batches: int = 1):
    saved = saved or {}
    self.eval_batches = max(int(eval_batches), 1)  # to guess an evaluation not yet timed
    self.minutes, self.num_steps = float(minutes), max(int(num_steps), 1)
    self.before_s = float(saved.get('elapsed_s', 0.0))  # the earlier processes' training time
    # The last evaluation's and save's times (None: not timed yet).
    self.eval_s, self.save_s = saved.get('eval_s'), saved.get('save_s')
    self.ended = bool(saved.get('ended', False))  # the budget ended the run (its last save)
    self._progress = float(saved.get('progress', 0.0))
    self.step_s = 0.0  # the last step's time, without evaluations and saves
    self._start = self._mark = now()

  @property
  def budget_s(self) -> float:
    return self.minutes * 60.0

  @property
  def reserve_s(self) -> float:
    """What the final evaluation and save will take: as long as the last ones did. Before
    the first of each is timed, a guess from the step's time: an evaluation as long as
    `eval_batches` train steps (its forward passes cost less), a save as long as one step
    (a run shorter than its first evaluation ended a few seconds over its budget without)."""
    eval_s = self.eval_batches * self.step_s if self.eval_s is None else self.eval_s
    return eval_s + (self.step_s if self.save_s is None else self.save_s)

  def elapsed_s(self) -> float:
    return self.before_s + now() - self._start

  def progress(self, step: int) -> float:
    """The schedule's progress for the update after `step` updates, in [0, 1]."""
    spent = self.elapsed_s() / max(self.budget_s - self.reserve_s, 1e-9)
    self._progress = min(1.0, max(self._progress, spent, step / self.num_steps))
    return self._progress

  @property
  def last_progress(self) -> float:
    """The progress the latest update was given."""
    return self._progress

  def stepped(self) -> None:
    """Marks the end of a step (once the step before it is done on the device)."""
    t = now()
    self.step_s, self._mark = t - self._mark, t

  def should_end(self) -> bool:
    """Whether to end after this step: another one would leave too little for the final
    evaluation and save (`ended` is set then, and saved with the final checkpoint)."""
    if self.elapsed_s() + STEPS_AHEAD * self.step_s + self.reserve_s > self.budget_s:
      self.ended = True
    return self.ended

  @contextlib.contextmanager
  def timed(self, what: str):
    """Times an evaluation (`eval`) or a save (`save`): the reserve is the latest of each. The
    time is left out of the next step's."""
    start = now()
    try:
      yield
    finally:
      took = now() - start
      setattr(self, f'{what}_s', took)
      self._mark += took

  def state(self) -> dict:
    """JSON for the checkpoint: what a resumed run continues from."""
    return {'elapsed_s': self.elapsed_s(), 'eval_s': self.eval_s, 'save_s': self.save_s,
            'progress': self._progress, 'ended': self.ended}

  def record(self) -> dict:
    """What a train record adds: the minutes spent and the schedule's progress."""
    return {'elapsed_minutes': self.elapsed_s() / 60.0, 'schedule_progress': self._progress}

  def shown(self) -> str:
    """The progress bar's `minutes` field: `12.3/60`."""
    return f'{self.elapsed_s() / 60.0:.1f}/{self.minutes:g}'
