"""The suite training for real (a 2-step smoke encoder, tiny GLUE-layout files): GLUE's own
files train without column flags, a task with unreadable columns is recorded while the others
finish, and (slow) a suite killed mid-run resumes to the same table, in parallel workers too."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from encoder.suite import run_suite
from encoder.sweep.status import read_status
from tests.golden.smoke import ROOT, smoke_workdir
from tests.suite.conftest import write_glue_dir

TINY = ['train.num_steps=2', 'train.batch_size=8', 'data.max_seq_length=32',
        'data.length_buckets=none']


@pytest.fixture(scope='module')
def smoke_run(tmp_path_factory) -> str:
  return smoke_workdir(tmp_path_factory)


def test_glue_files_train_without_flags_and_a_broken_task_is_recorded(tmp_path, smoke_run):
  data_dir = write_glue_dir(tmp_path / 'glue', rows=24)
  os.makedirs(tmp_path / 'glue' / 'STS-B')
  (tmp_path / 'glue' / 'STS-B' / 'train.tsv').write_text(  # no `score`: no known layout
      'index\tsentence1\tsentence2\tsimilarity\n' + ''.join(
          f'{i}\ta b\tc d\t{i % 5}.0\n' for i in range(24)))
  summary = run_suite('glue', [f'init_from={smoke_run}', f'suite.data_dir={data_dir}',
                               'suite.seeds=1', 'suite.scratch=false', *TINY],
                      str(tmp_path / 'suite'))
  tasks = summary['arms']['pretrained']['tasks']
  assert [r['status'] for r in tasks['sst2']['runs']] == ['done']
  assert 0 <= tasks['sst2']['metrics']['accuracy']['median'] <= 1
  assert {'f1', 'accuracy'} <= set(tasks['mrpc']['metrics'])  # read by GLUE's MRPC header
  saved = json.loads((tmp_path / 'suite' / 'pretrained' / 'mrpc-seed0' / 'config.json')
                     .read_text())
  assert saved['data']['labels'] == '0,1' and saved['data']['text_columns'] == ''
  (stsb,) = tasks['stsb']['runs']
  assert stsb['status'] == 'failed' and "no column 'label'" in stsb['error']
  assert '\n' not in stsb['error']
  assert not (tmp_path / 'suite' / 'pretrained' / 'sst2-seed0' / 'checkpoints').exists()


def _suite_args(data_dir: str, smoke_run: str, *extra: str) -> list[str]:
  return ['--eval_suite', 'glue', f'--config.init_from={smoke_run}',
          f'--config.suite.data_dir={data_dir}', '--config.suite.seeds=3',
          '--config.suite.scratch=false', *(f'--config.{o}' for o in TINY), *extra]


@pytest.mark.slow
def test_a_killed_suite_resumes_without_redoing_finished_runs(tmp_path, smoke_run):
  data_dir = write_glue_dir(tmp_path / 'glue', rows=24, tasks=('sst2',))
  suite_dir = tmp_path / 'suite'
  env = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=1'}
  process = subprocess.Popen(
      [sys.executable, os.path.join(ROOT, 'launch.py'), '--workdir', str(suite_dir),
       *_suite_args(data_dir, smoke_run)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL)
  first = suite_dir / 'pretrained' / 'sst2-seed0'
  deadline = time.time() + 300
  while read_status(str(first)).get('status') != 'done':
    assert process.poll() is None and time.time() < deadline, 'the suite ended too early'
    time.sleep(0.2)
  process.send_signal(signal.SIGKILL)  # mid-run: the second run has started or is starting
  process.wait()
  done_before = (first / 'run_status.json').read_text()
  unfinished = [s for s in range(3) if read_status(str(
      suite_dir / 'pretrained' / f'sst2-seed{s}')).get('status') != 'done']
  assert unfinished, 'the kill came after the whole suite'
  summary = run_suite('glue', [o[len('--config.'):] for o in _suite_args(
      data_dir, smoke_run)[2:]], str(suite_dir))
  assert (first / 'run_status.json').read_text() == done_before  # not redone
  assert summary['run_counts'] == {'done': 3}
  # The same suite uninterrupted, its runs two at a time in worker processes: the same table.
  reference = tmp_path / 'reference'
  result = subprocess.run([sys.executable, os.path.join(ROOT, 'launch.py'), '--workdir',
                           str(reference), *_suite_args(data_dir, smoke_run,
                                                        '--config.suite.parallel=2')],
                          cwd=ROOT, env=env, capture_output=True, text=True)
  assert result.returncode == 0, result.stderr[-2000:]
  assert (reference / 'suite.csv').read_text() == (suite_dir / 'suite.csv').read_text()


@pytest.mark.slow
def test_mrpc_fine_tunes_from_the_nli_run_with_a_fresh_head(tmp_path, smoke_run, caplog):
  from tests.suite.test_intermediate import write_nli
  data_dir = write_glue_dir(tmp_path / 'glue', rows=24, tasks=('mrpc',))
  nli = write_nli(tmp_path / 'nli.jsonl', rows=24)
  caplog.set_level('INFO', logger='encoder')
  logging.getLogger('encoder').addHandler(caplog.handler)  # it does not propagate
  summary = run_suite('glue', [f'init_from={smoke_run}', f'suite.data_dir={data_dir}',
                               'suite.seeds=1', 'suite.scratch=false',
                               f'suite.intermediate={nli}', *TINY], str(tmp_path / 'suite'))
  first = str(tmp_path / 'suite' / 'pretrained' / 'mnli-intermediate')
  assert summary['intermediate']['arms']['pretrained']['status'] == 'done'
  assert 0 <= summary['intermediate']['arms']['pretrained']['accuracy'] <= 1
  assert os.listdir(os.path.join(first, 'checkpoints'))  # kept: MRPC started from it
  saved = json.loads((tmp_path / 'suite' / 'pretrained' / 'mrpc-seed0' / 'config.json')
                     .read_text())
  assert saved['init_from'] == first and saved['data']['num_labels'] == 2
  # Its encoder came from the NLI run; the 3-way classifier did not fit the 2 labels.
  started = {r.getMessage() for r in caplog.records
             if r.getMessage().startswith(f'Initialised from {first};')}
  assert len(started) == 1 and 'classifier' in started.pop()
  assert summary['arms']['pretrained']['tasks']['mrpc']['runs'][0]['status'] == 'done'
  logging.getLogger('encoder').removeHandler(caplog.handler)
