"""The training loop end to end on `:smoke` configs: devices, accumulation, resume, errors."""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import orbax.checkpoint  # noqa: F401  (imported here so the subprocess test does not time it)
import pytest

from encoder import configs
from encoder.data.pretrain.pretraining_data import build_pretraining_data
from encoder.errors import CheckpointError, ConfigError
from encoder.train.metric_writer import read_metrics
from encoder.train.trainer import train_and_evaluate
from tests.train.conftest import launch_cmd, smoke_overrides


def train(workdir, corpus, cache_dir, *extra, exp='mlm_nsp_tiny:smoke'):
  config = configs.load_experiment(exp)
  configs.apply_overrides(config, smoke_overrides(corpus, cache_dir, *extra))
  given = configs.to_json(config)
  metrics = train_and_evaluate(config, str(workdir))
  assert configs.to_json(config) == given  # the run resolves a copy; the caller's is untouched
  return metrics


def losses(workdir, split='train'):
  return {r['step']: r['loss'] for r in read_metrics(str(workdir), split)}


def run_cli(cmd, devices):
  env = {**os.environ, 'XLA_FLAGS': f'--xla_force_host_platform_device_count={devices}'}
  return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def test_one_device_and_eight_with_accumulation_give_the_same_losses(tmp_path, corpus,
                                                                       cache_dir):
  # The same global batch: whole on one device, and on eight in two microbatches each.
  args = ('train.num_steps=3', 'train.log_every=1', 'train.batch_size=16')
  for devices, accum in ((1, 1), (8, 2)):
    out = run_cli(launch_cmd(tmp_path / f'd{devices}', corpus, cache_dir, *args,
                             f'train.grad_accum_steps={accum}'), devices)
    assert out.returncode == 0, out.stderr[-2000:]
  one, eight = losses(tmp_path / 'd1'), losses(tmp_path / 'd8')
  assert sorted(one) == [1, 2, 3]
  # Same global batch, dropout off: only float32 summation order differs between layouts.
  np.testing.assert_allclose([eight[s] for s in one], list(one.values()), rtol=2e-5)
  assert one[3] != one[1]  # it trained


def test_stop_and_resume_gives_the_uninterrupted_metrics(tmp_path, corpus, cache_dir):
  common = ('train.num_steps=8', 'train.eval_every=4', 'train.checkpoint_every=4')
  straight = train(tmp_path / 'straight', corpus, cache_dir, *common)
  train(tmp_path / 'resumed', corpus, cache_dir, *common, 'train.stop_at_step=4')
  assert max(losses(tmp_path / 'resumed')) == 4
  resumed = train(tmp_path / 'resumed', corpus, cache_dir, *common)
  assert resumed == straight
  assert losses(tmp_path / 'resumed') == losses(tmp_path / 'straight')
  assert losses(tmp_path / 'resumed', 'eval') == losses(tmp_path / 'straight', 'eval')


def test_train_metrics_report_the_real_token_fraction_of_each_window(tmp_path, corpus,
                                                                     cache_dir):
  # Short targets on every pair (BERT's short_seq_prob at 1) in rows of 64: some padding.
  common = ('train.num_steps=4', 'train.log_every=2', 'data.short_seq_prob=1.0',
            'data.max_seq_length=64')
  train(tmp_path / 'w', corpus, cache_dir, *common)
  reported = {r['step']: r['real_token_fraction']
              for r in read_metrics(str(tmp_path / 'w'), 'train')}
  config = configs.load_experiment('mlm_nsp_tiny:smoke')
  configs.apply_overrides(config, smoke_overrides(corpus, cache_dir, *common))
  data = build_pretraining_data(config, str(tmp_path / 'w'))  # the run's, prepared already
  masks = [data.train_batch(step)['input_mask'] for step in range(4)]
  expected = {2: np.mean(masks[:2]), 4: np.mean(masks[2:])}
  assert reported == pytest.approx(expected)
  assert min(reported.values()) < 1  # some padding, so the check above is not vacuous


@pytest.mark.slow  # ~40 s; the batches across the switch are checked fast in tests/data
def test_two_sequence_length_phases_resume_exactly_across_the_switch(tmp_path, corpus,
                                                                      cache_dir, capfd):
  # Stopped at step 4, before the switch at 6: the resumed run crosses it as the straight one.
  common = ('train.num_steps=8', 'train.eval_every=4', 'train.checkpoint_every=4',
            'data.first_phase_seq_length=16', 'data.first_phase_steps=6')
  straight = train(tmp_path / 'straight', corpus, cache_dir, *common)
  err = capfd.readouterr().err  # the progress bar's notes (the log's handler may be elsewhere)
  assert 'compiling the train step for sequence length 16 (1 so far)' in err
  assert 'compiling the train step for sequence length 32 (2 so far)' in err
  train(tmp_path / 'resumed', corpus, cache_dir, *common, 'train.stop_at_step=4')
  resumed = train(tmp_path / 'resumed', corpus, cache_dir, *common)
  assert resumed == straight
  assert losses(tmp_path / 'resumed') == losses(tmp_path / 'straight')


# Slow: preemption stays in the default suite through test_kill_resume (killed mid-write) and
# test_stop_and_resume_gives_the_uninterrupted_metrics; this one adds the SIGTERM handler.
@pytest.mark.slow
def test_sigterm_saves_and_the_same_command_resumes(tmp_path, corpus, cache_dir):
  args = ('train.num_steps=150', 'train.checkpoint_every=1000', 'train.eval_every=1000',
          'train.log_every=1')
  straight = run_cli(launch_cmd(tmp_path / 'straight', corpus, cache_dir, *args), 1)
  assert straight.returncode == 0, straight.stderr[-2000:]
  cmd = launch_cmd(tmp_path / 'killed', corpus, cache_dir, *args)
  env = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=1'}
  proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
  metrics = tmp_path / 'killed' / 'metrics.jsonl'
  deadline = time.time() + 240
  while time.time() < deadline and not (metrics.exists() and metrics.stat().st_size > 0):
    time.sleep(0.05)
  proc.send_signal(signal.SIGTERM)
  _, err = proc.communicate(timeout=240)
  assert proc.returncode == 0, err[-2000:]
  assert 'Stopped by SIGTERM' in err
  stopped_at = max(losses(tmp_path / 'killed'))
  assert stopped_at < 150
  again = run_cli(cmd, 1)
  assert again.returncode == 0 and 'Resuming from checkpoint' in again.stderr
  assert losses(tmp_path / 'killed') == losses(tmp_path / 'straight')


@pytest.fixture(scope='module')
def finished_run(tmp_path_factory, corpus, cache_dir):
  """One finished 2-step smoke run, for the tests that only read a workdir (or refuse it)."""
  workdir = tmp_path_factory.mktemp('finished') / 'w'
  train(workdir, corpus, cache_dir, 'train.num_steps=2')
  return workdir


def test_checkpoint_restores_with_plain_orbax_without_encoder(finished_run):
  code = (
      'import sys, orbax.checkpoint as ocp\n'
      f"p = ocp.StandardCheckpointer().restore('{finished_run}/checkpoints/2/params')\n"
      f"t = ocp.StandardCheckpointer().restore('{finished_run}/checkpoints/2/train')\n"
      "assert not any(m.startswith('encoder') for m in sys.modules)\n"
      "print(p['encoder']['embeddings']['word_embeddings']['embedding'].shape, int(t['step']))\n")
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120,
                       cwd=str(finished_run.parent))
  assert out.returncode == 0, out.stderr[-2000:]
  vocab = json.loads((finished_run / 'config.json').read_text())['model']['vocab_size']
  assert out.stdout.strip() == f'({vocab}, 128) 2'


def snapshot(directory):
  return {os.path.join(root, name): os.stat(os.path.join(root, name)).st_mtime_ns
          for root, _, names in os.walk(directory) for name in names}


def test_workdir_of_another_run_is_refused_untouched(finished_run, corpus, cache_dir):
  workdir = finished_run
  before = snapshot(workdir)
  with pytest.raises(ConfigError, match="belongs to a different run.*num_layers=2 there, 4 here"):
    train(workdir, corpus, cache_dir, 'train.num_steps=2', 'model.num_layers=4')
  with pytest.raises(ConfigError, match='experiment'):
    train(workdir, corpus, cache_dir, 'train.num_steps=2', exp='mlm_nsp_base:smoke')
  assert snapshot(workdir) == before


def test_init_from_missing_path_is_an_error_before_anything_is_written(tmp_path, corpus,
                                                                       cache_dir):
  with pytest.raises(CheckpointError, match='no checkpoint at'):
    train(tmp_path / 'w', corpus, cache_dir, f'init_from={tmp_path}/nowhere')
  assert not (tmp_path / 'w').exists()


def test_init_from_loads_the_encoder_and_reinitialises_changed_heads(tmp_path, finished_run,
                                                                     corpus, cache_dir):
  src = orbax_params(finished_run / 'checkpoints' / '2')
  # The architecture and tokenizer come from the init_from run, whatever the experiment says.
  args = ('train.num_steps=1', 'data.nsp=false', 'train.learning_rate=0.0',
          'train.warmup_steps=0', 'model.num_layers=3', f'init_from={finished_run}')
  train(tmp_path / 'dst', corpus, cache_dir, *args)
  saved = json.loads((tmp_path / 'dst' / 'config.json').read_text())
  assert saved['model']['num_layers'] == 2
  assert saved['data']['tokenizer'] == str(finished_run / 'tokenizer')
  dst = orbax_params(tmp_path / 'dst' / 'checkpoints' / '1')
  np.testing.assert_array_equal(dst['encoder']['layer_1']['mlp']['output']['kernel'],
                                src['encoder']['layer_1']['mlp']['output']['kernel'])
  assert 'nsp_head' not in dst
  # A run that died before its first checkpoint (config.json written, no step saved) starts
  # from init_from again when rerun, not from random weights.
  shutil.rmtree(tmp_path / 'dst' / 'checkpoints')
  train(tmp_path / 'dst', corpus, cache_dir, *args)
  again = orbax_params(tmp_path / 'dst' / 'checkpoints' / '1')
  np.testing.assert_array_equal(again['encoder']['layer_1']['mlp']['output']['kernel'],
                                src['encoder']['layer_1']['mlp']['output']['kernel'])


def orbax_params(step_dir):
  import orbax.checkpoint as ocp
  return ocp.StandardCheckpointer().restore(str(step_dir / 'params'))


@pytest.mark.slow  # the default suite trains mlm_nsp_tiny:smoke throughout; base and large here
def test_every_pretraining_experiment_smoke_trains(tmp_path, corpus, cache_dir):
  for name in configs.list_experiments():
    if configs.load_experiment(name).task != 'pretraining':
      continue  # fine-tuning experiments are smoke-tested with their tasks
    metrics = train(tmp_path / name, corpus, cache_dir, 'train.num_steps=2', exp=f'{name}:smoke')
    assert np.isfinite(metrics['loss']) and 0 <= metrics['mlm_accuracy'] <= 1


def test_cloze_benchmark_scores_a_run_on_its_held_out_sentences(finished_run, capsys):
  import importlib.util
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  spec = importlib.util.spec_from_file_location('bench_cloze',
                                                os.path.join(root, 'benchmarks', 'cloze.py'))
  cloze = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(cloze)
  config = json.loads((finished_run / 'config.json').read_text())
  # Exactly the sentences the run's preparation held out (its manifest counts them).
  sentences = cloze.held_out_sentences(config, str(finished_run))
  from encoder.data.pretrain import preparation
  manifests = [json.loads(p.read_text()) for p in
               pathlib.Path(config['data']['cache_dir']).rglob(preparation.MANIFEST)]
  assert len(sentences) in {m['totals']['eval_sentences'] for m in manifests if 'totals' in m}
  cloze.main([str(finished_run), '--sentences', '20', '--examples', '0'])
  result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert 0 < result['sentences'] <= 20 and 0 <= result['top1'] <= result['top5'] <= 1
