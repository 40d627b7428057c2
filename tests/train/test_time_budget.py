"""train.max_minutes: a wall-clock budget that ends the run and fits the schedule's decay in.

The clock is replaced (`time_budget.now`) by one that advances a fixed tick at every reading, so
the runs are fast and their stops do not depend on the machine's speed.
"""

import dataclasses
import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from encoder import config_schema, configs
from encoder.checkpoint_files import newest_data_state
from encoder.errors import ConfigError
from encoder.sweep import status as sweep_status
from encoder.train import optim, time_budget, trainer
from encoder.train.metric_writer import read_metrics
from encoder.train.optim import budgeted_learning_rate, learning_rate_schedule, make_optimizer
from encoder.train.resolve import resolve_config
from encoder.train.run_setup import setup_steps
from encoder.train.strategy import OneDeviceStrategy
from tests.train.test_mesh import MESHES, random_batches, tiny_setup
from tests.train.test_trainer import train

PEAK = 1e-3


def train_config(**overrides):
  fields = dict(learning_rate=PEAK, warmup_steps=10, num_steps=110, schedule='linear',
                optimizer='adamw', weight_decay=0.5, b1=0.9, b2=0.999, eps=1e-6, clip_norm=1.0,
                max_minutes=1.0)
  fields.update(overrides)
  t = config_schema.train_section()
  t.update(fields)
  return t


class TickingClock:
  """A clock that moves `tick` seconds at each reading."""

  def __init__(self, tick: float):
    self.tick, self.t = tick, 0.0

  def __call__(self) -> float:
    self.t += self.tick
    return self.t


SCHEDULES = [dict(schedule='linear'), dict(schedule='cosine'),
             dict(schedule='wsd', decay_steps=40, decay_shape='linear'),
             dict(schedule='wsd', decay_steps=40, decay_shape='1-sqrt')]


@pytest.mark.parametrize('fields', SCHEDULES, ids=lambda f: '-'.join(map(str, f.values())))
def test_with_the_steps_binding_the_budget_follows_the_step_schedule(fields):
  t = train_config(**fields)
  steps, budgeted = learning_rate_schedule(t), budgeted_learning_rate(t)
  for s in range(111):  # progress = the step fraction: the clock is not the limit
    assert float(budgeted(s, s / 110)) == pytest.approx(float(steps(s)), rel=1e-5, abs=1e-10)


@pytest.mark.parametrize('fields', SCHEDULES, ids=lambda f: '-'.join(map(str, f.values())))
def test_the_decay_ends_with_the_budget_and_warmup_stays_in_steps(fields):
  t = train_config(**fields, num_steps=100_000)  # num_steps only a bound: the clock leads
  budgeted = budgeted_learning_rate(t)
  # Warmup is counted in steps, whatever the clock says.
  for s in range(10):
    assert float(budgeted(s, 0.3)) == pytest.approx(PEAK * s / 10, rel=1e-5)
  # After it, the decay follows the budget's share spent, down to 0 when the budget ends.
  rates = [float(budgeted(50, p)) for p in np.linspace(0.01, 1.0, 100)]
  assert np.all(np.diff(rates) <= 1e-12)
  assert rates[-1] == pytest.approx(0.0, abs=1e-9)
  if fields['schedule'] == 'linear':  # BERT's: linear in the share of the budget
    assert float(budgeted(50, 0.5)) == pytest.approx(PEAK * (1 - (50_000 - 10) / 99_990),
                                                     rel=1e-4)
  if fields['schedule'] == 'wsd':  # stable until the last decay_steps / num_steps of it
    assert float(budgeted(50, 0.9995)) == pytest.approx(PEAK)
    assert float(budgeted(50, 0.9998)) < PEAK


def small_params():
  return {'layer_0': {'dense': {'kernel': jnp.linspace(-1, 1, 12).reshape(3, 4),
                                'bias': jnp.linspace(0, 1, 4)}},
          'embeddings': {'embedding': jnp.linspace(1, 2, 8).reshape(4, 2)}}


def gradients(k: int):
  return jax.tree.map(lambda p: jnp.sin(p * (k + 1) + k), small_params())


@pytest.mark.parametrize('fields', [
    dict(optimizer='adamw'), dict(optimizer='adamw', clip_norm=0.0), dict(optimizer='lamb'),
    dict(optimizer='stable_adamw', clip_norm=0.0), dict(optimizer='adamw', layer_decay=0.8)],
    ids=lambda f: '-'.join(map(str, f.values())))
def test_every_optimizer_takes_the_budgeted_rate(fields):
  # Given the step fraction as progress, a budgeted optimizer makes the unbudgeted one's
  # updates (its rate: the step schedule's), through warmup and decay.
  plain = make_optimizer(train_config(**fields, max_minutes=0.0, warmup_steps=2, num_steps=6))
  timed = make_optimizer(train_config(**fields, warmup_steps=2, num_steps=6))
  params = small_params()
  plain_state, timed_state = plain.init(params), timed.init(params)
  for k in range(6):
    ours, plain_state = plain.update(gradients(k), plain_state, params)
    theirs, timed_state = timed.update(gradients(k), timed_state, params, progress=k / 6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-12),
                 ours, theirs)
  # A progress ahead of the steps (the clock leading) gives smaller steps, 0 at the end.
  stepped, _ = timed.update(gradients(0), timed_state, params, progress=1.0)
  assert all(float(jnp.abs(u).max()) == 0 for u in jax.tree.leaves(stepped))


def test_without_a_budget_the_optimizer_is_the_base_one_and_takes_no_progress():
  t = train_config(max_minutes=0.0)
  params = small_params()
  tx, base = make_optimizer(t), optim.base_optimizer(t)
  assert jax.tree.structure(tx.init(params)) == jax.tree.structure(base.init(params))
  ours, _ = tx.update(gradients(1), tx.init(params), params)
  theirs, _ = base.update(gradients(1), base.init(params), params)
  jax.tree.map(np.testing.assert_array_equal, ours, theirs)  # bit for bit
  timed = make_optimizer(train_config(max_minutes=1.0))
  with pytest.raises(TypeError, match='progress'):  # a budgeted one cannot step without it
    timed.update(gradients(1), timed.init(params), params)


def test_the_clock_keeps_a_reserve_for_the_final_evaluation_and_save(monkeypatch):
  readings = iter([0.0, 10.0, 10.0, 20.0, 20.0, 30.0, 30.0, 30.0, 40.0, 40.0, 40.0])
  monkeypatch.setattr(time_budget, 'now', lambda: next(readings))
  budget = time_budget.TimeBudget(1.0, 1000, {'elapsed_s': 0.0})  # started at 0
  assert budget.progress(0) == pytest.approx(10 / 60)  # reads 10 s
  budget.stepped()  # the first step (set-up and compile): no step's time yet
  assert budget.step_s is None and budget.reserve_s == 0
  budget.stepped()  # a 10 s step
  with budget.timed('eval'):  # a 10 s evaluation, then a 0 s save
    pass
  with budget.timed('save'):
    pass
  assert budget.step_s == 10 and budget.reserve_s == 10
  # At 40 s: 40 + 2 steps of 10 + the 10 s reserve = 70, over the budget: it ends ...
  assert budget.should_end()
  # ... and the progress, 10 / 60 at the first reading (nothing timed, no reserve), adds the
  # share of what was left for training (60 - 10 s reserved - 10 s spent) that 30 s took.
  assert budget.progress(0) == pytest.approx(1 / 6 + 5 / 6 * 30 / 40)
  saved = json.loads(json.dumps(budget.state()))
  assert saved['elapsed_s'] == 40 and saved['ended'] is True

  saved['ended'] = False
  monkeypatch.setattr(time_budget, 'now', iter([100.0, 101.0, 101.0, 101.0]).__next__)
  resumed = time_budget.TimeBudget(1.0, 1000, saved)  # a new process: its clock starts anew
  assert resumed.elapsed_s() == 41  # 40 s before, 1 s since
  # 1 s of the 10 left for training (60 - the 10 s reserve - 40 spent).
  assert resumed.progress(0) == pytest.approx(saved['progress'] + (1 - saved['progress']) / 10)
  assert resumed.progress(990) == pytest.approx(0.99)  # the step fraction, when larger


class ModelledClock:
  """A clock that moves only by the work a test says was done."""

  def __init__(self):
    self.t = 0.0

  def __call__(self) -> float:
    return self.t


def simulate(budget, clock, step_s=0.5, compile_s=30.0, recompile_at=0, eval_every=200,
             eval_s=3.0, eval_compile_s=6.0, save_s=1.0):
  """The loop's calls on `budget` (run_loop's order) with modelled times: the evaluation
  compiled first, the first step compiling for `compile_s` and the step at `recompile_at`
  for a third of it; every `eval_every` steps an evaluation and a save. Returns {step: (the
  progress the update after it was given, the elapsed seconds and the reserve then)}."""
  seen, step = {}, 0
  clock.t += eval_compile_s
  while not budget.ended:
    seen[step] = (budget.progress(step), budget.elapsed_s(), budget.reserve_s)
    compiles = step == 0 or step + 1 == recompile_at
    clock.t += step_s + (compile_s if step == 0 else compile_s / 3 if compiles else 0.0)
    budget.stepped(compiled=compiles)
    step += 1
    last = budget.should_end(evaluating=step % eval_every == 0, saving=step % eval_every == 0)
    if step % eval_every == 0 or last:
      with budget.timed('eval'):
        clock.t += eval_s
      with budget.timed('save'):
        clock.t += save_s
  return seen


def assert_progress_follows_the_clock(seen, budget_s=360.0):
  """Each reading adds the share of the time left for training (the budget less the reserve)
  that the time since the last reading took (at most 1): no reading jumps."""
  for (p0, e0, _), (p1, e1, reserve) in itertools.pairwise(seen[k] for k in sorted(seen)):
    expected = min(1.0, p0 + (1 - p0) * (e1 - e0) / (budget_s - reserve - e0))
    assert p1 == pytest.approx(expected, abs=1e-9)


def test_a_compile_is_not_a_step_and_a_short_run_trains_to_its_budget(monkeypatch):
  # A 6-minute run whose first step compiles for 30 s, 0.5 s steps, 20 evaluation batches, an
  # evaluation only at the end: timing the compile as a step reserved 21 x 30 s, more than the
  # budget, and ended the run after its first step.
  clock = ModelledClock()
  monkeypatch.setattr(time_budget, 'now', clock)
  budget = time_budget.TimeBudget(6.0, 100_000, eval_batches=20)
  seen = simulate(budget, clock, eval_every=10_000)
  last = max(seen)
  # The evaluation's compile (6 s) and the first step count in the clock (36.5 s of 360,
  # before anything is timed) ...
  assert seen[1][:2] == pytest.approx((36.5 / 360, 36.5))
  # ... and after it the steps' 0.5 s say the rest: 20 evaluation batches and a save are
  # reserved, and each step adds its share of the time left, the same every step.
  reserve = 20 * 0.5 + 0.5
  assert budget.step_s == 0.5
  np.testing.assert_allclose([r for _, _, r in list(seen.values())[2:]], reserve)
  assert_progress_follows_the_clock(seen)
  steps = np.diff([seen[k][0] for k in range(2, last + 1)])
  np.testing.assert_allclose(steps, (1 - 36.5 / 360) * 0.5 / (360 - reserve - 36.5), rtol=1e-6)
  # It trains until two steps and the reserve are left, its decay done, then evaluates (3 s,
  # compiled before the first step) and saves (1 s) within the budget.
  end_of_training = seen[last][1] + 0.5
  assert 360 - reserve - 2 * 0.5 < end_of_training <= 360 - reserve - 2 * 0.5 + 0.5
  assert last > 550 and seen[last][0] > 0.99
  assert clock.t == pytest.approx(end_of_training + 4) and clock.t <= 360


def test_a_recompile_and_a_first_evaluation_do_not_move_the_schedule(monkeypatch):
  # A first evaluation at step 200 (3 s, compiled before the first step) and a recompile at
  # step 300 (10 s, counted in the clock but not taken as a step's time).
  clock = ModelledClock()
  monkeypatch.setattr(time_budget, 'now', clock)
  budget = time_budget.TimeBudget(6.0, 100_000, eval_batches=20)
  seen = simulate(budget, clock, recompile_at=300)
  assert seen[150][2] == pytest.approx(20 * 0.5 + 0.5)  # as above, before evaluating
  # Timed, the evaluation's 3 s and the save's 1 replace the guess.
  assert seen[250][2] == pytest.approx(3 + 1)
  assert seen[250][1] == pytest.approx(6 + 30 + 0.5 * 250 + 3 + 1)
  assert seen[350][2] == pytest.approx(3 + 1)  # the recompile's 10.5 s were not a step's time
  assert seen[350][1] == pytest.approx(seen[250][1] + 0.5 * 100 + 10)
  # None of these moved the progress: each reading added the share of the time left that its
  # time took, a changed reserve changing only the pace of what is left.
  assert_progress_follows_the_clock(seen)
  # The evaluation due after step 600 fell where the time left held it but not another: it
  # was the final one (a step more and a final evaluation after it ended 2.5 s over).
  assert max(seen) == 599 and clock.t <= 360 and seen[599][0] > 0.99


def test_the_loop_takes_no_compile_for_a_step(tmp_path, corpus, cache_dir, monkeypatch):
  # The real loop with a clock that models its train step: 5 s a step, the first 30 s more
  # (its compile), the first of 32-token rows 10 s more (a recompile after 10 steps of 16).
  clock = ModelledClock()
  monkeypatch.setattr(time_budget, 'now', clock)
  run_loop = trainer.run_loop

  def modelled(run, *args):
    lengths = set()

    def train_step(state, batch, progress):
      length = batch['input_mask'].shape[-1]
      clock.t += 5.0 + (30.0 if not lengths else 0.0 if length in lengths else 10.0)
      lengths.add(length)
      return run.train_step(state, batch, progress)

    return run_loop(dataclasses.replace(run, train_step=train_step), *args)

  monkeypatch.setattr(trainer, 'run_loop', modelled)
  train(tmp_path / 'w', corpus, cache_dir, 'train.max_minutes=6', 'train.num_steps=1000',
        'train.log_every=1', 'train.eval_every=1000', 'train.checkpoint_every=1000',
        'train.eval_batches=20', 'data.first_phase_seq_length=16', 'data.first_phase_steps=10')
  records = read_metrics(str(tmp_path / 'w'), 'train')
  # The elapsed seconds each update's progress was read at (the records' are read after it).
  before = [0.0] + [r['elapsed_minutes'] * 60 for r in records[:-1]]
  np.testing.assert_allclose(np.diff(before[1:]), [5.0] * 9 + [15.0] + [5.0] * (len(records)
                                                                                - 12))
  progress = [r['schedule_progress'] for r in records]
  assert progress[1] == pytest.approx(35 / 360)  # step 1 counted, nothing timed yet
  # From then on each update adds its share of the time left for training: the budget less
  # 20 evaluation batches of 5 s steps and a save. Timing the compile as a step reserved
  # 21 x 35 s, and the run ended after its first step.
  reserve = 20 * 5 + 5
  for k in range(2, len(records)):
    left = 360 - reserve - before[k - 1]
    assert progress[k] == pytest.approx(
        progress[k - 1] + (1 - progress[k - 1]) * (before[k] - before[k - 1]) / left)
  # It trained to its budget: until two steps and the reserve were left, its decay all but
  # done (the last update's progress was read three steps before the reserve).
  assert 360 - reserve - 10 < records[-1]['elapsed_minutes'] * 60 <= 360 - reserve - 5 + 1e-6
  assert records[-1]['step'] > 35 and progress[-1] > 0.94


def test_a_resumed_clock_counts_the_save_that_wrote_it(monkeypatch):
  clock = ModelledClock()
  monkeypatch.setattr(time_budget, 'now', clock)
  budget = time_budget.TimeBudget(6.0, 100_000)
  for _ in range(3):
    clock.t += 2.0
    budget.stepped()
  # The clock is read as a save starts (the checkpoint holds it), and the save takes 3 s.
  with budget.timed('save'):  # the first: counted as long as a step, 2 s
    first = budget.state()
    clock.t += 3.0
  with budget.timed('save'):  # the next: as long as the last save, 3 s
    second = budget.state()
    clock.t += 3.0
  assert first['elapsed_s'] == pytest.approx(6 + 2)
  assert second['elapsed_s'] == pytest.approx(9 + 3)
  clock.t = 100.0
  resumed = time_budget.TimeBudget(6.0, 100_000, second)
  assert resumed.elapsed_s() == pytest.approx(12)  # what the first process spent, its save too


def budgeted_run(workdir, corpus, cache_dir, monkeypatch, *extra, tick=0.05):
  monkeypatch.setattr(time_budget, 'now', TickingClock(tick))
  return train(workdir, corpus, cache_dir, 'train.max_minutes=0.2', 'train.num_steps=200',
               'train.log_every=1', 'train.eval_every=20', 'train.checkpoint_every=20', *extra)


def clock_of(workdir, step):
  data = ocp.Checkpointer(ocp.JsonCheckpointHandler()).restore(
      workdir / 'checkpoints' / str(step) / 'data')
  return data[time_budget.CLOCK_KEY]


def test_a_budgeted_run_ends_by_its_clock_with_the_decay_spent(tmp_path, corpus, cache_dir,
                                                               monkeypatch):
  metrics = budgeted_run(tmp_path / 'w', corpus, cache_dir, monkeypatch)
  records = read_metrics(str(tmp_path / 'w'), 'train')
  last = records[-1]
  assert 20 < last['step'] < 200  # ended by the 12 s budget, not by num_steps
  assert [r['step'] for r in records] == list(range(1, last['step'] + 1))
  assert all(r['elapsed_minutes'] <= 0.2 for r in read_metrics(str(tmp_path / 'w')))
  # The last step's rate is near the end of the decay: the budget was nearly spent ...
  t = configs.load_experiment('mlm_nsp_tiny:smoke').train
  t.update(max_minutes=0.2, num_steps=200)
  assert last['schedule_progress'] > 0.9 and last['learning_rate'] < 0.1 * t.learning_rate
  expected = budgeted_learning_rate(t)(last['step'] - 1, last['schedule_progress'])
  assert last['learning_rate'] == pytest.approx(float(expected), rel=1e-5)
  # ... then evaluated and saved, and the checkpoint is whole and says the budget ended.
  evals = read_metrics(str(tmp_path / 'w'), 'eval')
  assert evals[-1]['step'] == last['step'] and metrics['loss'] == evals[-1]['loss']
  steps = sorted(int(p.name) for p in (tmp_path / 'w' / 'checkpoints').iterdir()
                 if p.name.isdigit())
  assert steps[-1] == last['step']
  assert not [p for p in (tmp_path / 'w' / 'checkpoints').iterdir() if 'tmp' in p.name]
  ocp.StandardCheckpointer().restore(tmp_path / 'w' / 'checkpoints' / str(steps[-1]) / 'params')
  clock = clock_of(tmp_path / 'w', steps[-1])
  assert clock['ended'] is True and 0 < clock['elapsed_s'] <= 12
  # Read without Orbax, as a sweep does: the run is finished though it is short of num_steps.
  assert newest_data_state(str(tmp_path / 'w'))[time_budget.CLOCK_KEY] == clock
  config = configs.load_experiment('mlm_nsp_tiny:smoke')
  config.train.update(max_minutes=0.2, num_steps=200)
  assert sweep_status.finished(str(tmp_path / 'w'), config)
  # The same command again trains no further.
  assert budgeted_run(tmp_path / 'w', corpus, cache_dir, monkeypatch) == {}
  assert read_metrics(str(tmp_path / 'w'), 'train')[-1]['step'] == last['step']


def test_a_resumed_budgeted_run_continues_its_clock(tmp_path, corpus, cache_dir, monkeypatch):
  budgeted_run(tmp_path / 'straight', corpus, cache_dir, monkeypatch)
  straight_end = read_metrics(str(tmp_path / 'straight'), 'train')[-1]['step']
  budgeted_run(tmp_path / 'resumed', corpus, cache_dir, monkeypatch, 'train.stop_at_step=10')
  spent = clock_of(tmp_path / 'resumed', 10)
  assert spent['ended'] is False and spent['elapsed_s'] > 0
  assert not sweep_status.budget_ended(str(tmp_path / 'resumed'))  # a sweep resumes this one
  # The resumed session's clock starts from zero again (a new process); the run's does not.
  budgeted_run(tmp_path / 'resumed', corpus, cache_dir, monkeypatch)
  records = read_metrics(str(tmp_path / 'resumed'), 'train')
  after = [r for r in records if r['step'] > 10]
  assert after[0]['elapsed_minutes'] * 60 > spent['elapsed_s']
  # It ends where the uninterrupted run did, give or take the readings of the stop and resume
  # and the stop's save, counted as long as a step (here 6 readings; it took 2): a clock
  # restarted from zero would have run 10 more steps.
  assert abs(records[-1]['step'] - straight_end) <= 3
  assert records[-1]['elapsed_minutes'] <= 0.2


def test_max_minutes_zero_writes_no_clock(tmp_path, corpus, cache_dir):
  train(tmp_path / 'w', corpus, cache_dir, 'train.num_steps=2')
  records = read_metrics(str(tmp_path / 'w'))
  assert records and not [r for r in records if 'elapsed_minutes' in r]
  data = ocp.Checkpointer(ocp.JsonCheckpointHandler()).restore(
      tmp_path / 'w' / 'checkpoints' / '2' / 'data')
  assert time_budget.CLOCK_KEY not in data
  schedule = learning_rate_schedule(configs.load_experiment('mlm_nsp_tiny:smoke').train)
  for r in read_metrics(str(tmp_path / 'w'), 'train'):
    assert r['learning_rate'] == float(schedule(r['step'] - 1))


@pytest.mark.slow  # ~20 s of compiles; the default suite steps budgeted runs under pmap above
def test_every_strategy_steps_with_the_progress():
  # Progress = the step fraction: the budgeted step gives the unbudgeted step's losses, under
  # pmap (8 devices), a mesh and jit on one device.
  budget = ('train.max_minutes=5', 'train.num_steps=4', 'train.warmup_steps=0')
  config, *_ = tiny_setup(*budget)
  batches = random_batches(config, 2)

  def losses(*overrides, strategy=None):
    config, *_ = tiny_setup(*overrides)
    run = setup_steps(config)
    strategy = strategy or run.strategy
    state, train_step = run.state, run.train_step
    if isinstance(strategy, OneDeviceStrategy):
      state = strategy.init_state(run.model, run.tx, run.dummy, config.train.seed)
      train_step, _ = strategy.steps(run.model, run.task, run.tx, 1, progress=True)
    out = []
    for k, batch in enumerate(batches):
      args = (np.float32(k / 4),) if 'train.max_minutes=5' in overrides else ()
      state, sums = train_step(state, strategy.place_batch(batch), *args)
      out.append(run.task.reduce_metrics(strategy.sum_metrics([sums]))['loss'])
    return out

  plain = losses('train.num_steps=4', 'train.warmup_steps=0')
  np.testing.assert_allclose(losses(*budget), plain, rtol=1e-5)
  np.testing.assert_allclose(losses(*budget, *MESHES['data=8']), plain, rtol=2e-5)
  np.testing.assert_allclose(losses(*budget, strategy=OneDeviceStrategy()), plain, rtol=2e-5)
  assert plain[1] != plain[0]


def test_impossible_budgets_are_refused_in_one_line():
  config = configs.load_experiment('mlm_nsp_tiny:smoke')
  configs.apply_overrides(config, ['train.max_minutes=-5'])
  with pytest.raises(ConfigError, match=r'must be 0 \(no budget\) or positive$'):
    resolve_config(config)  # before anything is written
  config.train.update(max_minutes=1.0, decay_from='runs/x')
  with pytest.raises(ConfigError, match='a decay branch is as long as its steps'):
    time_budget.check(config.train)


def test_before_its_first_evaluation_a_run_reserves_a_guess_of_it():
  # A run shorter than its first evaluation still ends early enough for the final one:
  # eval_batches train steps' time and a step for the save, until both are timed.
  budget = time_budget.TimeBudget(1.0, 1000, {'elapsed_s': 0.0}, eval_batches=10)
  budget.step_s = 2.0
  assert budget.reserve_s == 10 * 2.0 + 2.0
  budget.eval_s, budget.save_s = 3.0, 0.5  # timed: the measured ones count
  assert budget.reserve_s == 3.5
