"""Intermediate fine-tuning on NLI before the small pair tasks (`suite.intermediate=FILE`).

RoBERTa fine-tunes RTE, STS-B and MRPC from its MNLI model, not from the pretrained one (Liu et
al., 2019, section 5.1); Phang et al. (2018, "Sentence Encoders on STILTs") measured the same
gain for BERT: a few thousand RTE or MRPC pairs teach a classifier little that an entailment
model has not learned already. With `suite.intermediate` set, each arm with weights is first
fine-tuned on that NLI file (the `mnli` task's experiment and recipe, one run, seed 0), and
the tasks of `suite.intermediate_tasks` start from that run instead of the arm's checkpoint;
their classifier heads start fresh (their label sets differ). The scratch arm stays as it is:
it says what the table would be without pretraining.

The file is GLUE's MNLI/train.tsv, or JSONL with `premise`, `hypothesis` and `label` (TFDS's
names; SNLI's and MultiNLI's own `sentence1`, `sentence2`, `gold_label` read too), of which
`suite.heldout_fraction` is held out for the intermediate run's own accuracy. The run keeps
its weights (`<arm>/mnli-intermediate`): the tasks after it start from them.
"""

from __future__ import annotations

import dataclasses
import os

from encoder import storage
from encoder.errors import ConfigError
from encoder.suite import data_slices
from encoder.suite.arms import SCRATCH, Arm
from encoder.suite.catalog import TASKS, SuiteTask, recipe_for
from encoder.suite.options import intermediate_tasks
from encoder.suite.plan import RunSpec, task_overrides
from encoder.sweep.status import read_status

RUN_NAME = 'mnli-intermediate'


def nli_task(path: str) -> SuiteTask:
  """The `mnli` task, reading `path` (a TSV with a header, or JSONL) instead of GLUE's file."""
  jsonl = os.path.splitext(path)[1].lower() == '.jsonl'
  return dataclasses.replace(TASKS['mnli'], train_file=os.path.basename(path), dev_file='',
                             header_lines=0 if jsonl else 1)


def plan(arms: list[Arm], tasks: list[str], suite, user_overrides: list[str],
         suite_dir: str) -> tuple[list[RunSpec], dict[str, str]]:
  """The intermediate runs (one per arm with weights) and {arm: the run's workdir}, when a
  task of `tasks` starts from one; else nothing."""
  if not set(intermediate_tasks(suite)) & set(tasks):
    return [], {}
  source = storage.abspath(os.path.expanduser(suite.intermediate))
  if not storage.isfile(source):
    raise ConfigError(f"suite.intermediate: no file '{suite.intermediate}' (an NLI training "
                      "file: GLUE's MNLI/train.tsv, or JSONL with premise, hypothesis, label)")
  task = nli_task(source)
  data = data_slices.slices(task, source, suite, os.path.join(suite_dir, 'data'))
  runs, workdirs = [], {}
  for arm in arms:
    if arm.name == SCRATCH:
      continue
    recipe = recipe_for(task, suite.recipe, arm.hidden_size)
    workdir = os.path.join(suite_dir, arm.name, RUN_NAME)
    overrides = (*arm.overrides, *task_overrides(recipe, data, recipe.learning_rate),
                 'train.seed=0', *user_overrides)
    runs.append(RunSpec(f'{arm.name}/{RUN_NAME}', arm.name, task.name, 0, recipe.learning_rate,
                        task.experiment, overrides, workdir))
    workdirs[arm.name] = workdir
  for spec in runs:
    spec.config()  # a mistyped override fails now, not after the first run
  return runs, workdirs


def describe(runs: list[RunSpec], suite) -> dict:
  """What the report says of the intermediate runs: the file, the tasks that start from them,
  and each arm's held-out NLI accuracy (None until its run is done)."""
  arms = {}
  for spec in runs:
    record = read_status(spec.workdir)
    arms[spec.arm] = {'workdir': spec.workdir, 'status': record.get('status', 'pending'),
                      'accuracy': record.get('metrics', {}).get('accuracy'),
                      'budget': record.get('as_run', {}),
                      'wall_clock_s': record.get('wall_clock_s')}
  return {'file': suite.intermediate, 'tasks': list(intermediate_tasks(suite)), 'arms': arms}
