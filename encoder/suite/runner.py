"""`launch.py --eval_suite NAME`: plan every run, run those not finished, write the report.

The suite folder (`--workdir`, default `INIT_FROM/suites/NAME`, for a sweep folder
`SWEEP/suites/NAME`, where `--report` finds it) holds `data/` (the held-out slices),
one folder per arm with one workdir per (task, seed), and the report files. Everything is
decided before the first run starts: the arms, the tasks present (those whose files are
missing are listed, not run), every run's config (a bad override fails now).
"""

from __future__ import annotations

import logging
import os
import time

from encoder import hub_cache, storage
from encoder.errors import ConfigError
from encoder.suite import arms as arms_lib
from encoder.suite import (
  compile_cache,
  data_slices,
  embed_suite,
  intermediate,
  options,
  plan,
  results,
  suite_report,
)
from encoder.suite.catalog import GRID_RECIPE_TEXT, RECIPE_TEXT, recipe_name, suite_tasks
from encoder.suite.execute import refuse_stale_runs, run_all
from encoder.sweep.report import write_report as write_sweep_report
from encoder.train.trainer import setup_logging

log = logging.getLogger('encoder')


def default_suite_dir(init_from: str, name: str) -> str:
  """SOURCE/suites/NAME, SOURCE the folder the suite judges: the run (a checkpoint step's too)
  or the sweep folder; for a model on the Hub, runs/hf/ORG--NAME (not the cache of its
  conversion); for several sources, the folder that holds them all (runs/suites/NAME for
  runs/cram,runs/cram_electra)."""
  folders = [_judged_folder(source) for source in arms_lib.split_sources(init_from)]
  common = (folders[0] if len(folders) == 1
            else _common_folder([storage.abspath(f) for f in folders]))
  return storage.join(common, 'suites', name)


def _judged_folder(source: str) -> str:
  if hub_cache.is_hub_name(source):
    return os.path.join('runs', 'hf', hub_cache.parse_name(source).repo_id.replace('/', '--'))
  return arms_lib.run_of_step(storage.abspath(os.path.expanduser(source)))


def _common_folder(folders: list[str]) -> str:
  """The deepest folder holding every one of `folders` (compared part by part, so a bucket's
  gs://b/... keeps its scheme); a ConfigError where they share none."""
  parts = [f.split('/') for f in folders]
  common = []
  for names in zip(*parts, strict=False):
    if len(set(names)) > 1:
      break
    common.append(names[0])
  if not ''.join(common):
    raise ConfigError(f'init_from names sources with no folder in common ({", ".join(folders)}):'
                      ' give the suite a --workdir')
  return '/'.join(common)


def run_suite(name: str, overrides: list[str], suite_dir: str | None = None,
              experiment=None, dry_run: bool = False) -> dict:
  """Runs suite `name` (built in, or in `experiment`'s SUITES) and returns its summary."""
  setup_logging()
  own, user_overrides = options.split_overrides(
      [*getattr(experiment, 'SUITE_OVERRIDES', {}).get(name, []), *overrides])
  settings = options.build(own)
  suite = settings.suite
  tasks = suite_tasks(name, experiment, suite.tasks)
  suite_dir = storage.abspath(suite_dir or default_suite_dir(settings.init_from, name))
  if not all(t.fine_tunes for t in tasks):
    if any(t.fine_tunes for t in tasks):
      raise ConfigError('the embedding tasks (sts, beir) run in a suite of their own: they '
                        'fine-tune nothing')
    meta = {'suite': name, 'init_from': settings.init_from, 'seeds': 1,
            'dev_sets': 'the given files (suite.sts_file, suite.beir_dir at suite.beir_split)',
            'budget': 'no fine-tuning: each encoder as it is', 'overrides': user_overrides}
    return embed_suite.run_embed_suite(settings, suite_dir, meta, dry_run)
  arms = arms_lib.find_arms(settings.init_from, suite.checkpoints, suite.scratch)
  present, missing = [], {}
  for task in tasks:
    data = data_slices.task_data(task, suite, suite_dir)
    if data.missing:
      missing[task.name] = data.missing
      log.info('suite: %s is missing (%s); not run', task.name, data.missing)
    else:
      present.append((task, data))
  names = [t.name for t, _ in present]
  intermediate_runs, start_points = intermediate.plan(arms, names, suite, user_overrides,
                                                      suite_dir)
  runs = plan.plan_runs(arms, present, suite, user_overrides, suite_dir, start_points)
  first = plan.grid_seeds(suite)  # below suite.seeds: the grid runs these, then the rest
  if dry_run:
    for spec in [*intermediate_runs, *runs]:
      print(f"{spec.workdir}  --exp {spec.experiment} "
            + ' '.join(f'--config.{o}' for o in spec.overrides))
    if first < int(suite.seeds):
      print(f'then seeds {first}..{int(suite.seeds) - 1} of each task at the rate chosen')
    return {}
  refuse_stale_runs([*intermediate_runs, *runs], suite_dir)
  meta = {'suite': name, 'init_from': settings.init_from, 'seeds': int(suite.seeds),
          'dev_sets': _dev_text(suite, present),
          'budget': _budget_text(suite, user_overrides, names),
          'overrides': user_overrides, 'tasks': names,
          'pooling': {arm.name: arm.pooling for arm in arms},
          'recipes': {arm.name: _recipe_text(suite, arm, user_overrides) for arm in arms}}
  clocks = {arm.name: {'step': arm.step, 'minutes': arm.minutes} for arm in arms}

  def write_report() -> dict:
    if intermediate_runs:
      meta['intermediate'] = intermediate.describe(intermediate_runs, suite, names)
    summary = results.summarise(runs, missing, meta, clocks,
                                0 if first == int(suite.seeds) else first)
    suite_report.write(suite_dir, summary)
    return summary

  log.info('suite %s: %d arm(s) x %d task(s) -> %d run(s) in %s', name, len(arms),
           len(present), len(intermediate_runs) + len(runs), suite_dir)
  start = time.time()
  write_report()
  parallel = int(suite.parallel)
  with compile_cache.shared(suite_dir, bool(suite.compile_cache)):
    # The intermediate runs first, their weights kept, each with its share of the host: the
    # runs after them start from them. Those of an arm whose intermediate run failed wait.
    complete = run_all(intermediate_runs, parallel, True, write_report,
                       share=min(parallel, len(intermediate_runs)))
    if complete:
      waiting = intermediate.waiting(intermediate_runs, runs, start_points)
      complete = run_all([r for r in runs if r.name not in waiting], parallel,
                         bool(suite.keep_weights), write_report)
    if complete and first < int(suite.seeds):  # the grid's first seeds chose each task's rate
      more = plan.plan_runs(arms, present, suite, user_overrides, suite_dir, start_points,
                            chosen=results.chosen_rates(runs, first))
      refuse_stale_runs(more, suite_dir)
      runs += more
      complete = run_all(more, parallel, bool(suite.keep_weights), write_report)
  summary = write_report()
  for source in arms_lib.split_sources(settings.init_from):
    sweep_dir = storage.abspath(os.path.expanduser(hub_cache.local_path(source)))
    if arms_lib.is_sweep_folder(sweep_dir):  # its report gains the downstream columns
      write_sweep_report(sweep_dir)
  log.info('suite %s %s in %.0f s: %s', name, 'finished' if complete else 'stopped',
           time.time() - start, os.path.join(suite_dir, 'suite.md'))
  return summary


def _dev_text(suite, present) -> str:
  """Which dev set each task is scored on: its own dev file, or a held-out slice of train."""
  heldout = [task.name for task, data in present if data.dev_source == 'heldout']
  official = [task.name for task, data in present if data.dev_source == 'official']
  caps = f', at most {suite.dev_size}' if suite.dev_size else ''
  parts = [f'the official dev files ({", ".join(official)})'] if official else []
  if heldout:
    whole = [task.name for task, data in present
             if data.dev_source == 'heldout' and task.phrase_tree]
    parts.append(f'a held-out {suite.heldout_fraction:g} of the training file{caps} '
                 f'(split seed {suite.split_seed}; {", ".join(heldout)}'
                 + (f'; {", ".join(whole)}: that fraction of its sentences, whole' if whole
                    else '') + ')')
  return '; '.join(parts) or 'none'


def _budget_text(suite, user_overrides: list[str], tasks: list[str]) -> str:
  parts = [f'train examples <= {suite.train_size}' if suite.train_size else 'all train examples']
  parts += [f'{task} <= {cap}' if cap else f'{task}: all' for task, cap in
            options.train_caps(suite).items() if task in tasks]
  parts += user_overrides or ["each task's recipe"]
  return ', '.join(parts)


RECIPE_KEYS = ('train.learning_rate', 'train.num_epochs', 'train.num_steps', 'train.batch_size',
               'train.warmup_fraction', 'train.warmup_steps')


def _recipe_text(suite, arm, user_overrides: list[str]) -> str:
  """The arm's recipe (its grid's when `suite.lr_grid`: each row then states the rate chosen),
  and the command line's overrides of it (they win)."""
  texts = GRID_RECIPE_TEXT if suite.lr_grid else RECIPE_TEXT
  text = texts[recipe_name(suite.recipe, arm.hidden_size)]
  overridden = [o for o in user_overrides if o.partition('=')[0].strip() in RECIPE_KEYS]
  return f"{text} with {', '.join(overridden)}" if overridden else text
