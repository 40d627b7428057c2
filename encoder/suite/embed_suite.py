"""`launch.py --eval_suite embed`: every arm judged as an embedder, as it is (no fine-tuning).

Each arm's encoder (a run's newest checkpoint, each chosen step, each finished sweep run, and
the scratch baseline: the same architecture with random weights) is loaded as
`encoder.load` loads it and scored by `encoder.embedding.evaluate`: task `sts` on
`suite.sts_file` (Spearman and Pearson of cosine similarity) and task `beir` on
`suite.beir_dir`'s `suite.beir_split` qrels (nDCG@10, Recall@100, MRR@10). The report is the
fine-tuning suite's (suite.json, suite.csv, suite.md): one "seed" per task, since nothing
here is random; an arm whose task fails is recorded as failed, and the others still run.
"""

from __future__ import annotations

import logging
import os
import time

from encoder import storage
from encoder.errors import ConfigError
from encoder.suite import arms as arms_lib
from encoder.suite import results, suite_report

log = logging.getLogger('encoder')


def task_files(suite) -> tuple[dict[str, str], dict[str, str]]:
  """({task: its file or folder}, {task: why it is missing})."""
  present, missing = {}, {}
  if not suite.sts_file and not suite.beir_dir:
    raise ConfigError('the embed suite needs --config.suite.sts_file=PAIRS.tsv and/or '
                      '--config.suite.beir_dir=BEIR_DIR')
  for task, path, needed in (
      ('sts', suite.sts_file, suite.sts_file),
      ('beir', suite.beir_dir,
       os.path.join(suite.beir_dir, 'qrels', f'{suite.beir_split}.tsv')
       if suite.beir_dir else '')):
    if not path:
      missing[task] = f'suite.{"sts_file" if task == "sts" else "beir_dir"} not set'
    elif not storage.exists(needed):
      missing[task] = f'no {needed}'
    else:
      present[task] = path
  return present, missing


def load_arm(arm: arms_lib.Arm):
  """The arm's encoder as `encoder.load` gives it; the scratch arm: its run's architecture,
  tokenizer and embed settings with freshly initialised weights (seed 0)."""
  # lazy: loading models needs JAX, which planning and --dry_run do not
  from encoder.inference.model import load, load_untrained
  if arm.name == arms_lib.SCRATCH:
    return load_untrained(arm.run_dir)
  return load(dict(o.split('=', 1) for o in arm.overrides)['init_from'])


def score(model, task: str, path: str, suite) -> dict:
  from encoder.embedding import evaluate  # lazy: JAX, as in load_arm
  if task == 'sts':
    return evaluate.evaluate_sts(model, path)
  return evaluate.evaluate_beir(model, path, suite.beir_split)


def run_embed_suite(settings, suite_dir: str, meta: dict, dry_run: bool = False) -> dict:
  """Scores every arm on every present task and writes the report; returns its summary."""
  suite = settings.suite
  present, missing = task_files(suite)
  arms = arms_lib.find_arms(settings.init_from, suite.checkpoints, suite.scratch)
  if dry_run:
    for arm in arms:
      print(f"{arm.name}: embed {', '.join(present) or 'nothing'} ({', '.join(arm.overrides)})")
    return {}
  log.info('suite embed: %d arm(s) x %d task(s) in %s', len(arms), len(present), suite_dir)
  summary_arms, counts, wall = {}, {}, 0.0
  for arm in arms:
    tasks = {}
    model = load_arm(arm)
    for task, path in present.items():
      start = time.time()
      record = {'seed': None}
      try:
        record.update(status='done', metrics=score(model, task, path, suite))
      except Exception as e:  # noqa: BLE001 - a failed arm is reported; the others run
        record.update(status='failed', error=f'{type(e).__name__}: {e}'.splitlines()[0])
      record['wall_clock_s'] = round(time.time() - start, 1)
      wall += record['wall_clock_s']
      counts[record['status']] = counts.get(record['status'], 0) + 1
      tasks[task] = results.task_result(task, {None: [record]})
      log.info('suite embed: %s %s %s', arm.name, task,
               record.get('metrics') or record.get('error'))
    medians = [t['score']['median'] for t in tasks.values()]
    summary_arms[arm.name] = {
        'step': arm.step, 'minutes': arm.minutes, 'tasks': tasks, 'glue_average': None,
        'average': sum(medians) / len(medians) if medians and None not in medians else None}
  summary = {**meta, 'tasks': list(present), 'missing': missing, 'arms': summary_arms,
             'run_counts': counts, 'runs_wall_clock_s': round(wall, 1)}
  suite_report.write(suite_dir, summary)
  log.info('suite embed finished: %s', os.path.join(suite_dir, 'suite.md'))
  return summary
