"""Length buckets end to end: training and eval on bucketed batches give the padded path's numbers,
and the step compiles once per bucket, no more.

With `data.bucket_window=1` a bucketed run sees the very same global batches as a padded one
(each batch only cut to its bucket and its rows reordered), so every logged loss and every eval
metric must agree to float32 summation noise: padding is masked everywhere, and this checks it.
"""

import json
import logging
import os
import re

import jax
import pytest

from encoder import configs
from encoder.train.trainer import train_and_evaluate

COMPILING = re.compile(r'Compiling .*?int32\[8,1,(\d+)\]')  # 8 devices x 1 row x length


class _Compiles(logging.Handler):
  """The sequence length of every XLA compile of a step that takes a batch."""

  def __init__(self):
    super().__init__(logging.WARNING)
    self.lengths = []

  def emit(self, record):
    found = COMPILING.search(record.getMessage())
    if found:
      self.lengths.append(int(found.group(1)))


def _run(exp, workdir, *overrides):
  config = configs.load_experiment(exp)
  configs.apply_overrides(config, ['model.dropout_rate=0.0', 'model.attention_dropout_rate=0.0',
                                   *overrides])
  handler = _Compiles()
  logger = logging.getLogger('jax')
  logger.addHandler(handler)
  try:
    with jax.log_compiles():
      metrics = train_and_evaluate(config, str(workdir))
  finally:
    logger.removeHandler(handler)
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    lines = [json.loads(line) for line in f]
  return metrics, lines, handler.lengths


# Buckets inside the smoke data's lengths (NER 26-32 tokens, max 32; SQuAD 41-64, max 64, where
# most windows are full, so most batches take the last bucket).
@pytest.mark.parametrize('exp,buckets', [('ner_conll2003:smoke', (28, 30, 32)),
                                         pytest.param('qa_squad:smoke', (44, 48, 64),
                                                      marks=pytest.mark.slow)])
def test_bucketed_runs_match_the_padded_path_and_compile_once_per_bucket(tmp_path, exp, buckets):
  steps = ['train.num_steps=8', 'train.eval_every=8', 'train.log_every=2']
  padded, padded_lines, padded_compiles = _run(exp, tmp_path / 'padded', *steps)
  bucketed, bucketed_lines, compiles = _run(exp, tmp_path / 'bucketed', *steps,
                                            f'data.length_buckets={buckets[0]},{buckets[1]}',
                                            'data.bucket_window=1')
  def train_losses(lines):
    return [r['loss'] for r in lines if r['split'] == 'train']
  assert len(train_losses(padded_lines)) == 4
  assert train_losses(bucketed_lines) == pytest.approx(train_losses(padded_lines), rel=2e-4)
  for key in ('f1', 'precision' if exp.startswith('ner') else 'exact_match'):
    assert bucketed[key] == pytest.approx(padded[key], abs=1e-6)
  # The padded run compiles its train and predict steps once, at max_seq_length; the bucketed
  # run at most once per bucket for each.
  assert sorted(padded_compiles) == [buckets[-1]] * 2
  assert set(compiles) <= set(buckets) and (len(set(compiles)) > 1 or exp.startswith('qa'))
  assert all(compiles.count(length) <= 2 for length in compiles)


GROUPED = ('data.length_buckets=28,30', 'data.bucket_window=2', 'train.num_steps=8',
           'train.eval_every=4', 'train.checkpoint_every=4', 'train.log_every=2')


@pytest.mark.slow  # 40 s; the fast check is data/finetune/test_length_buckets.py (sampler purity)
def test_a_bucketed_run_stopped_and_resumed_gives_the_uninterrupted_metrics(tmp_path):
  straight, straight_lines, _ = _run('ner_conll2003:smoke', tmp_path / 'straight', *GROUPED)
  _run('ner_conll2003:smoke', tmp_path / 'resumed', *GROUPED, 'train.stop_at_step=4')
  resumed, resumed_lines, _ = _run('ner_conll2003:smoke', tmp_path / 'resumed', *GROUPED)
  assert resumed == straight
  drop = lambda lines: [{k: v for k, v in r.items() if not k.endswith('per_sec')}  # noqa: E731
                        for r in lines]
  assert drop(resumed_lines) == drop(straight_lines)


@pytest.mark.slow
def test_one_device_and_eight_with_accumulation_agree_on_bucketed_batches(tmp_path):
  import subprocess
  import sys
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  losses = {}
  for devices, accum in ((1, 1), (8, 2)):
    workdir = tmp_path / f'd{devices}'
    cmd = [sys.executable, os.path.join(root, 'launch.py'), '--exp', 'ner_conll2003:smoke',
           '--workdir', str(workdir), '--config.model.dropout_rate=0.0',
           '--config.model.attention_dropout_rate=0.0', '--config.train.batch_size=16',
           f'--config.train.grad_accum_steps={accum}', *(f'--config.{o}' for o in GROUPED)]
    env = {**os.environ, 'XLA_FLAGS': f'--xla_force_host_platform_device_count={devices}'}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'compiling the train step for sequence length' in out.stderr
    with open(workdir / 'metrics.jsonl') as f:
      losses[devices] = [r.get('loss', r.get('f1')) for r in map(json.loads, f)]
  assert losses[1] == pytest.approx(losses[8], rel=2e-5)
