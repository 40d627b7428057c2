"""Intermediate fine-tuning on NLI before the small pair tasks (`suite.intermediate=FILE`).

RoBERTa fine-tunes RTE, STS-B and MRPC from its MNLI model, not from the pretrained one (Liu et
al., 2019, section 5.1); Phang et al. (2018, "Sentence Encoders on STILTs") measured the same
gain for BERT: a few thousand RTE or MRPC pairs teach a classifier little that an entailment
model has not learned already. With `suite.intermediate` set, each arm with weights is first
fine-tuned on that NLI file (the `mnli` task's experiment and recipe, one run, seed 0: every
seed of the tasks after it starts from the same run), and the tasks of
`suite.intermediate_tasks` start from that run instead of the arm's checkpoint; their
classifier heads start fresh (their label sets differ). The scratch arm takes no intermediate
run: its rows stay those of random weights, so on these tasks the gap to it measures
pretraining and the NLI run together (the report says so).

The file is GLUE's MNLI/train.tsv, or JSONL with `premise`, `hypothesis` and `label` (TFDS's
names; `sentence1`, `sentence2`, `gold_label` read too), every row labelled with one of the
three classes (SNLI's unlabelled `-` rows must go first). The suite's slicing settings apply to
it as to a task's file: `suite.heldout_fraction` (and `dev_size`) of it is held out for the
run's own accuracy (whatever `suite.dev_set` says), and `suite.train_sizes=mnli=N` (else
`suite.train_size`) caps the rest. The run keeps its weights (`<arm>/mnli-intermediate`).
"""

from __future__ import annotations

import dataclasses
import logging
import os

from encoder import storage
from encoder.data.finetune.file_readers import file_format
from encoder.errors import ConfigError
from encoder.suite import data_slices
from encoder.suite.arms import SCRATCH, Arm
from encoder.suite.catalog import TASKS, SuiteTask, recipe_for
from encoder.suite.execute import is_done
from encoder.suite.options import intermediate_tasks
from encoder.suite.plan import RunSpec, run_overrides
from encoder.sweep.status import read_status

log = logging.getLogger('encoder')

RUN_NAME = 'mnli-intermediate'


def nli_task(path: str) -> SuiteTask:
  """The `mnli` task, reading `path` (a TSV or CSV with a header, or JSONL) instead of GLUE's
  file."""
  jsonl = file_format(path) == 'jsonl'
  return dataclasses.replace(TASKS['mnli'], train_file=os.path.basename(path), dev_file='',
                             header_lines=0 if jsonl else 1)


def following_tasks(suite, tasks: list[str]) -> list[str]:
  """The tasks of `tasks` that start from the intermediate run (none without its file)."""
  return [t for t in intermediate_tasks(suite) if t in tasks]


def plan(arms: list[Arm], tasks: list[str], suite, user_overrides: list[str],
         suite_dir: str) -> tuple[list[RunSpec], dict[tuple[str, str], str]]:
  """The intermediate runs (one per arm with weights), when a task of `tasks` starts from one,
  and {(arm, task): the workdir that task's runs start from}; else nothing."""
  following = following_tasks(suite, tasks)
  if not following:
    return [], {}
  source = storage.abspath(os.path.expanduser(suite.intermediate))
  if not storage.isfile(source):
    raise ConfigError(f"suite.intermediate: no file '{suite.intermediate}' (an NLI training "
                      "file: GLUE's MNLI/train.tsv, or JSONL with premise, hypothesis, label)")
  task = nli_task(source)
  data = data_slices.slices(task, source, suite, os.path.join(suite_dir, 'data'))
  runs, start_points = [], {}
  for arm in arms:
    if arm.name == SCRATCH:
      continue
    recipe = recipe_for(task, suite.recipe, arm.hidden_size)
    workdir = os.path.join(suite_dir, arm.name, RUN_NAME)
    overrides = run_overrides(arm.overrides, recipe, data, recipe.learning_rate, 0,
                              user_overrides)
    runs.append(RunSpec(f'{arm.name}/{RUN_NAME}', arm.name, task.name, 0, recipe.learning_rate,
                        task.experiment, overrides, workdir))
    start_points.update({(arm.name, t): workdir for t in following})
  for spec in runs:
    spec.config()  # a mistyped override fails now, not after the first run
  return runs, start_points


def waiting(intermediate_runs: list[RunSpec], runs: list[RunSpec],
            start_points: dict[tuple[str, str], str]) -> set[str]:
  """The names of the runs whose intermediate run is not done (it failed): they wait for a
  rerun that finishes it, rather than start from a missing or half-trained checkpoint."""
  ready = {spec.workdir for spec in intermediate_runs if is_done(spec)}
  held = set()
  for spec in runs:
    start = start_points.get((spec.arm, spec.task))
    if start and start not in ready:
      log.info('suite: %s not run: %s is not done', spec.name, start)
      held.add(spec.name)
  return held


def describe(intermediate_runs: list[RunSpec], suite, tasks: list[str]) -> dict:
  """What the report says of the intermediate runs: the file, the suite's tasks that start
  from them, and each arm's run: its held-out NLI accuracy (None until done), or its error."""
  arms = {}
  for spec in intermediate_runs:
    record = read_status(spec.workdir)
    arms[spec.arm] = {'workdir': spec.workdir, 'status': record.get('status', 'pending'),
                      'error': record.get('error', ''),
                      'accuracy': record.get('metrics', {}).get('accuracy'),
                      'as_run': record.get('as_run', {}),
                      'wall_clock_s': record.get('wall_clock_s')}
  return {'file': suite.intermediate, 'arms': arms,
          'tasks': following_tasks(suite, tasks)}
