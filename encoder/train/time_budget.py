"""A wall-clock budget for a run (`train.max_minutes`): when it ends, and how far along it is.

The training clock starts with the training loop: the compiles, evaluations and checkpoint
saves inside it count, the data preparation and set-up before it do not. It is saved with every
checkpoint (in the `data` item, as JSON) and a resumed run continues it, so a run preempted and
resumed trains for the same minutes in all as one that was not.

The run ends early enough for its final evaluation and save to fit in the budget: it keeps a
reserve, the time of its last evaluation plus its last save (before they are timed, a guess:
an evaluation as long as `train.eval_batches` steps, a save as long as one), and ends once
another step would eat into it (two steps' time: the one still on the device and the next).

A step's time is what a step costs once compiled: the first step of a process (which waits
for the set-up, the first batch and the compile) and a step that compiles again (a new
sequence length) count in the clock but are never taken as a step's time, so a 30 s compile
neither reserves 30 s per evaluation batch nor ends a short run after its first step. An
evaluation's compile is not an evaluation's time either: the loop compiles the evaluation
before its first step (`Evaluator.compile`, counted in the clock with that step), so every
evaluation it times, the final one too, runs compiled.

The learning-rate schedule reads `progress`, which reaches 1 when the time left for training
(the budget less the reserve) is spent. Each reading adds the share of what was left that the
time since the last one took, so a reserve that changes (a first measurement, an evaluation
timed) changes how fast the rest of the decay goes, never where it stands: with a reserve that
does not change this is elapsed / (budget - reserve). Where the share of `train.num_steps` done
is larger, it is that; it never decreases. `optim.budgeted_learning_rate` fits the decay into
it, so the learning rate reaches its end as the run does. A budgeted run depends on the clock,
so unlike a run without one it does not repeat bit for bit.

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
    self._progress_at = self.before_s  # the elapsed seconds `_progress` was computed at
    self.step_s = None  # a compiled step's time, without evaluations and saves (None: not yet)
    self._first = True  # whether the next step is this process's first
    self._start = self._mark = now()

  @property
  def budget_s(self) -> float:
    return self.minutes * 60.0

  @property
  def reserve_s(self) -> float:
    """What the final evaluation and save will take: as long as the last ones did."""
    return self._eval_reserve_s() + self._save_reserve_s()

  def _eval_reserve_s(self) -> float:
    """The last evaluation's time; before one is timed, a guess from the step's: as long as
    `eval_batches` train steps (its forward passes cost less)."""
    if self.eval_s is not None:
      return self.eval_s
    return self.eval_batches * (self.step_s or 0.0)

  def _save_reserve_s(self) -> float:
    """The last save's time; before one is timed, a step's."""
    return (self.step_s or 0.0) if self.save_s is None else self.save_s

  def elapsed_s(self) -> float:
    return self.before_s + now() - self._start

  def progress(self, step: int) -> float:
    """The schedule's progress for the update after `step` updates, in [0, 1]: the last one
    plus the share of what was left for training that the time since took."""
    elapsed = self.elapsed_s()
    left = self.budget_s - self.reserve_s - self._progress_at
    spent = 1.0 if left <= 0 else (
        self._progress + (1.0 - self._progress) * (elapsed - self._progress_at) / left)
    self._progress_at = elapsed
    self._progress = min(1.0, max(self._progress, spent, step / self.num_steps))
    return self._progress

  @property
  def last_progress(self) -> float:
    """The progress the latest update was given."""
    return self._progress

  def stepped(self, compiled: bool = False) -> None:
    """Marks the end of a step (once the step before it is done on the device). `compiled`:
    the step compiled the train step again (a new sequence length); like this process's
    first step, its time counts in the clock but is not taken as a step's."""
    t = now()
    took, self._mark = t - self._mark, t
    if not (self._first or compiled):
      self.step_s = took
    self._first = False

  def should_end(self, evaluating: bool = False, saving: bool = False) -> bool:
    """Whether to end after this step: another one would leave too little for the final
    evaluation and save (`ended` is set then, and saved with the final checkpoint).
    `evaluating`, `saving`: an evaluation or a save comes after this step anyway; where the
    time left holds it but not another after it, it is the final one."""
    ahead = STEPS_AHEAD * (self.step_s or 0.0) + self.reserve_s
    ahead += (self._eval_reserve_s() if evaluating else 0.0) + (
        self._save_reserve_s() if saving else 0.0)
    if self.elapsed_s() + ahead > self.budget_s:
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
    """JSON for the checkpoint: what a resumed run continues from. It is written by the save
    it is read for, so it counts that save as long as the last one took (as long as a step
    before the first is timed): a resumed clock misses no save."""
    saving = self.save_s if self.save_s is not None else (self.step_s or 0.0)
    return {'elapsed_s': self.elapsed_s() + saving, 'eval_s': self.eval_s,
            'save_s': self.save_s, 'progress': self._progress, 'ended': self.ended}

  def record(self) -> dict:
    """What a train record adds: the minutes spent and the schedule's progress."""
    return {'elapsed_minutes': self.elapsed_s() / 60.0, 'schedule_progress': self._progress}

  def shown(self) -> str:
    """The progress bar's `minutes` field: `12.3/60`."""
    return f'{self.elapsed_s() / 60.0:.1f}/{self.minutes:g}'
