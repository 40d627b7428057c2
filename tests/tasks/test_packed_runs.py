"""Packed fine-tuning end to end (`data.packing=examples`): classification and tagging runs train
and evaluate on packed rows, and their eval gives what the unpacked path gives with the same
parameters (an example attends only to itself, so packing must change no prediction); a packed
run resumes exactly and steps alike on one device and eight; SQuAD refuses packing up front.
"""

import functools
import json
import os
import subprocess
import sys

import jax
import pytest

from encoder import configs
from encoder.errors import ConfigError
from encoder.tasks import get_task
from encoder.tasks.task_inputs import batch_examples
from encoder.train import checkpoint as ckpt_lib
from encoder.train.steps import predict_step
from encoder.train.trainer import train_and_evaluate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Rows of 64 tokens hold about three smoke sentences (17-21 tokens) or two NER ones (26-32).
PACKED = ('model.dropout_rate=0.0', 'model.attention_dropout_rate=0.0', 'data.packing=examples',
          'data.max_seq_length=64')


def _run(exp, workdir, *overrides):
  config = configs.load_experiment(exp)
  configs.apply_overrides(config, [*PACKED, *overrides])
  return train_and_evaluate(config, str(workdir))


def _lines(path) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f]


def _unpacked_eval(workdir):
  """The run's final parameters evaluated on unpacked eval batches (one row per example)."""
  config = configs.from_json((workdir / 'config.json').read_text())
  config.data.packing = 'none'
  task = get_task(config.task)
  data = task.datasets(config, str(workdir))
  predict = jax.jit(functools.partial(predict_step, model=task.build_model(config), task=task))
  params = ckpt_lib.load_params(str(workdir))
  whole = data.collate_predictions([jax.device_get(predict(params, batch))
                                    for batch in data.eval_batches()])
  return task.evaluate(data, whole)


@pytest.mark.parametrize('exp', [
    'classify_sst2:smoke',
    # ~25 s; the per-token way back to eval order is checked fast in data/finetune/test_packing.py
    pytest.param('ner_conll2003:smoke', marks=pytest.mark.slow)])
def test_a_packed_run_trains_and_evaluates_as_the_unpacked_path_does(tmp_path, exp,
                                                                    encoder_log):
  metrics = _run(exp, tmp_path)
  saved = json.loads((tmp_path / 'config.json').read_text())
  assert 'rows x 64 tokens per step' in encoder_log.text
  lines = _lines(tmp_path / 'metrics.jsonl')
  train = [r for r in lines if r['split'] == 'train']
  # One epoch is the packed plan's steps: fewer than 48 examples / batch 8, as rows hold more.
  assert 1 <= saved['train']['num_steps'] < 6
  assert all(r['real_token_fraction'] > 0.6 for r in train)  # unpacked at 64: ~0.3 / ~0.45
  # examples_per_sec counts the examples the packed steps held, not train.batch_size per step.
  config = configs.from_json((tmp_path / 'config.json').read_text())
  data = get_task(config.task).datasets(config, str(tmp_path))
  previous = 0
  for r in train:
    held = [batch_examples(data.train_batch(k)) for k in range(previous, r['step'])]
    assert r['examples_per_sec'] / r['steps_per_sec'] == pytest.approx(sum(held) / len(held))
    previous = r['step']
  unpacked, records = _unpacked_eval(tmp_path)
  assert unpacked == metrics  # accuracy, F1, MCC, entity scores: exactly equal
  step = saved['train']['num_steps']
  packed_rows = _lines(tmp_path / 'predictions' / f'eval_step{step}.jsonl')
  assert len(packed_rows) == len(records['eval']) == 16
  for packed, plain in zip(packed_rows, records['eval'], strict=True):
    assert packed['prediction'] == plain['prediction']
    if 'probability' in plain:
      assert packed['probability'] == pytest.approx(plain['probability'], abs=1e-4)


def test_squad_refuses_packed_examples_in_one_line_with_nothing_written(tmp_path):
  config = configs.load_experiment('qa_squad:smoke')
  configs.apply_overrides(config, ['data.packing=examples'])
  with pytest.raises(ConfigError, match='SQuAD windows stay one per row') as e:
    train_and_evaluate(config, str(tmp_path / 'w'))
  assert '\n' not in str(e.value) and not (tmp_path / 'w').exists()


@pytest.mark.parametrize('exp', ['classify_sst2:smoke', 'ner_conll2003:smoke'])
def test_an_unknown_packing_is_refused_before_anything_is_written(tmp_path, exp):
  config = configs.load_experiment(exp)
  configs.apply_overrides(config, ['data.packing=documents'])
  with pytest.raises(ConfigError, match="data.packing='documents' is not one of") as e:
    train_and_evaluate(config, str(tmp_path / 'w'))
  assert '\n' not in str(e.value) and not (tmp_path / 'w').exists()


# 6 steps of 2 per epoch: the run crosses two epoch boundaries, one of them at the stop.
RESUMED = ('train.num_steps=6', 'train.eval_every=3', 'train.checkpoint_every=3',
           'train.log_every=1')


@pytest.mark.slow  # 3 runs, ~1 min; the fast check is data/finetune/test_packing.py (purity)
def test_a_packed_run_stopped_and_resumed_gives_the_uninterrupted_metrics(tmp_path):
  straight = _run('classify_sst2:smoke', tmp_path / 'straight', *RESUMED)
  _run('classify_sst2:smoke', tmp_path / 'resumed', *RESUMED, 'train.stop_at_step=4')
  resumed = _run('classify_sst2:smoke', tmp_path / 'resumed', *RESUMED)
  assert resumed == straight
  drop = lambda lines: [{k: v for k, v in r.items() if not k.endswith('per_sec')}  # noqa: E731
                        for r in lines]
  assert drop(_lines(tmp_path / 'resumed' / 'metrics.jsonl')) == \
      drop(_lines(tmp_path / 'straight' / 'metrics.jsonl'))


@pytest.mark.slow  # two launches in subprocesses, ~1 min
def test_one_device_and_eight_with_accumulation_agree_on_packed_batches(tmp_path):
  # Explicit rows: auto rows round up to a multiple of the device count, which differs here.
  losses = {}
  for devices, accum in ((1, 1), (8, 2)):
    workdir = tmp_path / f'd{devices}'
    cmd = [sys.executable, os.path.join(ROOT, 'launch.py'), '--exp', 'ner_conll2003:smoke',
           '--workdir', str(workdir), '--config.data.pack_rows=16',
           '--config.train.batch_size=16', f'--config.train.grad_accum_steps={accum}',
           '--config.train.num_steps=4', '--config.train.log_every=1',
           '--config.train.eval_every=4', *(f'--config.{o}' for o in PACKED)]
    env = {**os.environ, 'XLA_FLAGS': f'--xla_force_host_platform_device_count={devices}'}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert '16 rows x 64 tokens per step' in out.stderr
    losses[devices] = [r.get('loss', r.get('f1')) for r in _lines(workdir / 'metrics.jsonl')]
  assert len(losses[1]) == 5  # four train lines and the eval
  assert losses[1] == pytest.approx(losses[8], rel=2e-5)
