"""A length-bucketed fine-tuning run stopped part way and resumed writes the uninterrupted run's
metrics and ends on its parameters, optimizer state and rng, bit for bit.

What makes this stricter than test_bucketing_runs' resume check: dropout stays on (the rng must
resume too), and both stops fall inside one train record's steps (log_every=5, stops at 2 and
4), so the record at step 5 must count the steps of all three runs: the second run saves a
window it was handed and added to. Both stops are eval steps too, where the evaluator, the
best-step save and the stop save run at once.
"""

import json
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from encoder import configs
from encoder.train.trainer import train_and_evaluate

# 48 examples of 14-21 tokens at batch 8 (8 simulated devices): 6 steps padded to 18 or 32
# (max_seq_length) tokens, batches grouped by length two at a time. Saves only where the run
# stops, evaluates or ends.
RUN = ('data.length_buckets=18', 'data.bucket_window=2', 'train.num_steps=6',
       'train.log_every=5', 'train.eval_every=2', 'train.checkpoint_every=100')


def _run(workdir, *overrides):
  config = configs.load_experiment('classify_sst2:smoke')
  configs.apply_overrides(config, [*RUN, *overrides])
  return train_and_evaluate(config, str(workdir))


def _records(workdir):
  """metrics.jsonl without its timings (steps, examples and seconds per second, data wait)."""
  timing = ('steps_per_sec', 'examples_per_sec', 'data_wait_s')
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [{k: v for k, v in json.loads(line).items() if k not in timing} for line in f]


def _saved(workdir, step):
  """The checkpoint's params and train items ({'step', 'opt_state', 'rng'}) as host arrays."""
  root = os.path.join(os.path.abspath(workdir), 'checkpoints', str(step))
  return {item: jax.tree.map(np.asarray, ocp.StandardCheckpointer().restore(
      os.path.join(root, item))) for item in ('params', 'train')}


# Slow (four short runs, ~75 s on 2 cores): tests/train/test_log_window.py checks the saved
# window's sums in the default suite.
@pytest.mark.slow
def test_stopped_twice_between_records_resumes_to_the_uninterrupted_run(tmp_path):
  straight = _run(tmp_path / 'straight')
  _run(tmp_path / 'resumed', 'train.stop_at_step=2')
  _run(tmp_path / 'resumed', 'train.stop_at_step=4')
  resumed = _run(tmp_path / 'resumed')
  assert resumed == straight
  records = _records(tmp_path / 'straight')
  assert [(r['step'], r['split']) for r in records] == [
      (2, 'eval'), (4, 'eval'), (5, 'train'), (6, 'train'), (6, 'eval')]
  assert _records(tmp_path / 'resumed') == records
  want, got = _saved(tmp_path / 'straight', 6), _saved(tmp_path / 'resumed', 6)
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
    np.testing.assert_array_equal(a, b)
