"""The suite's runs: one fine-tuning run per (arm, task, learning rate, seed), each a normal
workdir `SUITE_DIR/<arm>/<task>-seed<S>` (`-lr<LR>` inserted with the grid), started by the
overrides it records, so `python launch.py --exp EXPERIMENT --workdir W --config.<each>`
repeats it by hand.

Every run's overrides, in order: the arm's (init_from, or scratch's architecture), the task's
data and recipe, the seed, then the user's own (`--config.train.num_steps=100` wins over the
recipe's epochs). All are applied to the experiment's config when the plan is made, so a
mistyped key fails before any run starts.
"""

from __future__ import annotations

import copy
import dataclasses
import os

from encoder import configs
from encoder.suite.arms import Arm
from encoder.suite.catalog import Recipe, SuiteTask, recipe_for
from encoder.suite.data_slices import TaskData

# Evaluate once, after the last step (the trainer always evaluates then): intermediate evals
# cost time and the suite reports the final dev score, not the best of several (which would
# pick on the dev set it reports).
EVAL_ONCE = 10**9


@dataclasses.dataclass(frozen=True)
class RunSpec:
  name: str  # '<arm>/<task>-seed<S>'
  arm: str
  task: str
  seed: int
  learning_rate: float
  experiment: str
  overrides: tuple[str, ...]
  workdir: str

  def config(self):
    config = configs.load_experiment(self.experiment)
    configs.apply_overrides(config, list(self.overrides))
    return config

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


def run_overrides(arm_overrides: tuple[str, ...], r: Recipe, data: TaskData,
                  learning_rate: float, seed: int, user_overrides: list[str]) -> tuple[str, ...]:
  """One run's overrides in the module's order: the arm's, the task's recipe and data, the
  seed, the user's (which win)."""
  recipe = [f'train.learning_rate={learning_rate}', f'train.batch_size={r.batch_size}',
            f'train.num_epochs={r.num_epochs}', f'train.warmup_fraction={r.warmup_fraction}',
            f'train.eval_every={EVAL_ONCE}']
  files = [f'data.train={data.train}', f'data.eval={data.dev}'] if data.train else []
  return (*arm_overrides, *recipe, *files, f'train.seed={seed}', *user_overrides)


def learning_rates(recipe: Recipe, grid: bool) -> tuple[float, ...]:
  return recipe.lr_grid if grid else (recipe.learning_rate,)


def grid_seeds(suite) -> int:
  """The seeds each rate of the grid runs before one is chosen (`suite.grid_seeds`); every seed
  where that is 0, not below the seeds, or there is no grid."""
  seeds, first = int(suite.seeds), int(suite.get('grid_seeds', 0))
  return first if suite.lr_grid and 0 < first < seeds else seeds


def plan_runs(arms: list[Arm], tasks: list[tuple[SuiteTask, TaskData]], suite,
              user_overrides: list[str], suite_dir: str,
              start_points: dict[tuple[str, str], str] | None = None,
              chosen: dict[tuple[str, str], float] | None = None) -> list[RunSpec]:
  """Every run of the suite, in the order they run: task by task, so a task's arms and seeds
  finish together and the table fills row by row. `start_points` maps (arm, task) to the run
  its runs start from instead of the arm's checkpoint (intermediate.py).

  With `suite.grid_seeds`, the grid's runs are its first seeds only; given the rate `chosen`
  for each (arm, task) from those (results.chosen_rates), the runs are the remaining seeds at
  that rate."""
  start_points = start_points or {}
  runs = []
  grid = bool(suite.lr_grid)
  first = grid_seeds(suite)
  seeds = range(first) if chosen is None else range(first, int(suite.seeds))
  for task, data in tasks:
    base = configs.load_experiment(task.experiment)
    recipes = {arm.name: recipe_for(task, suite.recipe, arm.hidden_size) for arm in arms}
    rates = dict.fromkeys(lr for r in recipes.values() for lr in learning_rates(r, grid))
    for lr in rates:
      for arm in arms:
        if lr not in learning_rates(recipes[arm.name], grid):
          continue  # the arms' recipes differ (a sweep over widths): each runs its own rates
        if chosen is not None and chosen.get((arm.name, task.name)) != lr:
          continue
        for seed in seeds:
          start = start_points.get((arm.name, task.name))
          own = arm.overrides if start is None else tuple(
              f'init_from={start}' if o.startswith('init_from=') else o for o in arm.overrides)
          overrides = run_overrides(own, recipes[arm.name], data, lr, seed, user_overrides)
          configs.apply_overrides(copy.deepcopy(base), list(overrides))  # refused now, not later
          tag = f'-lr{lr:g}' if grid else ''
          name = f'{arm.name}/{task.name}{tag}-seed{seed}'
          runs.append(RunSpec(name, arm.name, task.name, seed, lr, task.experiment,
                              overrides, os.path.join(suite_dir, arm.name,
                                                             f'{task.name}{tag}-seed{seed}')))
  return runs
