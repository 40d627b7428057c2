"""What a suite evaluates, with a fake trainer: the arms a run, its saved steps, a sweep folder
or several runs give, where each arm's runs start, the minutes a budgeted run's steps are
placed at, and how a causal arm is pooled."""

import csv
import json
import os

import pytest

from encoder.errors import ConfigError
from encoder.suite import run_suite
from encoder.sweep.status import read_status, write_status
from tests.suite.conftest import BUDGET, fake_run, glue_suite, write_glue_dir


def test_checkpoint_steps_and_sweep_arms(tmp_path, fake_trainer):
  run = fake_run(tmp_path / 'run', steps=(100, 200))
  data_dir = write_glue_dir(tmp_path / 'glue', tasks=('sst2',))
  summary = glue_suite(tmp_path, 'suite.checkpoints=all', 'suite.seeds=1', data_dir=data_dir,
                   run=run)
  assert {a: v['step'] for a, v in summary['arms'].items()} == {
      'step100': 100, 'step200': 200, 'scratch': None}
  status = read_status(str(tmp_path / 'suite' / 'step200' / 'sst2-seed0'))
  assert status['overrides'][0] == f"init_from={os.path.join(run, 'checkpoints', '200')}"
  assert (tmp_path / 'suite' / 'suite_steps.png').exists()
  with pytest.raises(ConfigError, match='no checkpoint at step 300'):
    glue_suite(tmp_path, 'suite.checkpoints=300', run=run)
  sweep = tmp_path / 'sweep'
  for name in ('attention=bidirectional', 'attention=causal'):
    fake_run(sweep / name)
    write_status(str(sweep / name), {'name': name, 'status': 'done'})
  summary = run_suite('glue', [f'init_from={sweep}', f'suite.data_dir={data_dir}',
                               'suite.seeds=1', *BUDGET])
  assert list(summary['arms']) == ['attention=bidirectional', 'attention=causal', 'scratch']
  assert (sweep / 'suites' / 'glue' / 'suite.json').exists()  # where the sweep report looks
  assert 'glue:sst2' in (sweep / 'sweep.md').read_text()


def test_several_runs_are_the_arms_of_one_suite_named_by_their_folders(tmp_path, fake_trainer):
  """runs/cram,runs/cram_electra: two runs no sweep made, judged in one table (the seed
  ranges compared), each arm from its own run, the suite beside them; a step of a run is an
  arm too; two folders of one name are refused in one line, before any run."""
  data_dir = write_glue_dir(tmp_path / 'glue', tasks=('sst2',))
  mlm = fake_run(tmp_path / 'runs' / 'cram', steps=(100,))
  electra = fake_run(tmp_path / 'runs' / 'cram_electra')
  step = os.path.join(mlm, 'checkpoints', '100')
  cwd = os.getcwd()
  os.chdir(tmp_path)  # the default suite folder is relative to the runs it judges
  try:
    summary = run_suite('glue', [f'init_from=runs/cram, runs/cram_electra,{step}',
                                 f'suite.data_dir={data_dir}', 'suite.seeds=1', *BUDGET])
  finally:
    os.chdir(cwd)
  assert list(summary['arms']) == ['cram', 'cram_electra', 'cram-step100', 'scratch']
  suite = tmp_path / 'runs' / 'suites' / 'glue'
  assert (suite / 'suite.json').exists()
  for arm, start in (('cram', mlm), ('cram_electra', electra), ('cram-step100', step)):
    status = read_status(str(suite / arm / 'sst2-seed0'))
    assert os.path.abspath(status['overrides'][0].partition('=')[2]) == os.path.abspath(start)
  assert '| cram_electra |' in (suite / 'suite.md').read_text()
  calls = list(fake_trainer.calls)
  other = fake_run(tmp_path / 'elsewhere' / 'cram')
  with pytest.raises(ConfigError, match="names two runs 'cram'"):
    run_suite('glue', [f'init_from={mlm},{other}', f'suite.data_dir={data_dir}', *BUDGET],
              str(tmp_path / 'twice'))
  assert fake_trainer.calls == calls and not (tmp_path / 'twice').exists()


def test_steps_of_a_budgeted_run_are_placed_by_the_minutes_their_clock_had_counted(
    tmp_path, fake_trainer):
  run = fake_run(tmp_path / 'run', steps=(100, 200))
  for step, elapsed_s in ((100, 90.0), (200, 183.0)):  # what TimeBudget.state() saves
    data = tmp_path / 'run' / 'checkpoints' / str(step) / 'data'
    data.mkdir()
    (data / 'metadata').write_text(json.dumps(
        {'step': step, 'training_clock': {'elapsed_s': elapsed_s, 'ended': step == 200}}))
  data_dir = write_glue_dir(tmp_path / 'glue', tasks=('sst2',))
  summary = glue_suite(tmp_path, 'suite.checkpoints=all', 'suite.seeds=1', data_dir=data_dir,
                   run=run)
  assert {a: v['minutes'] for a, v in summary['arms'].items()} == {
      'step100': 1.5, 'step200': 3.05, 'scratch': None}
  rows = list(csv.DictReader(open(tmp_path / 'suite' / 'suite.csv')))
  assert {(r['arm'], r['step'], r['minutes']) for r in rows} == {
      ('step100', '100', '1.5'), ('step200', '200', '3.05'), ('scratch', '', '')}
  assert '| step200 (3.0 min) |' in (tmp_path / 'suite' / 'suite.md').read_text()
  assert (tmp_path / 'suite' / 'suite_steps.png').exists()


def test_a_causal_arm_is_pooled_by_its_mean_and_the_report_says_so(tmp_path, fake_trainer):
  """A causal [CLS] sees only itself: the causal arm and its scratch twin pool by the mean of
  their tokens (the last override, after the scratch arm's copied `model.pooling=cls`)."""
  run = fake_run(tmp_path / 'run', model={'size': 'tiny', 'attention': 'causal',
                                          'pooling': 'cls'})
  summary = glue_suite(tmp_path, run=run)
  for arm in ('pretrained', 'scratch'):
    overrides = read_status(str(tmp_path / 'suite' / arm / 'sst2-seed0'))['overrides']
    assert [o for o in overrides if o.startswith('model.pooling=')] == ['model.pooling=mean']
  assert summary['pooling'] == {'pretrained': 'mean (causal attention)',
                                'scratch': 'mean (causal attention)'}
  assert 'pretrained mean (causal attention)' in (tmp_path / 'suite' / 'suite.md').read_text()
  bidirectional = fake_run(tmp_path / 'bi', model={'size': 'tiny', 'pooling': 'cls'})
  assert glue_suite(tmp_path / 'b', run=bidirectional)['pooling']['pretrained'] == 'cls'


def test_the_suite_of_several_sources_lies_in_the_folder_holding_them_all():
  """Two steps of one run: their run's suites folder; buckets keep their scheme; sources
  with no folder in common are refused in one line."""
  from encoder.suite.runner import default_suite_dir
  steps = ','.join(f'/r/runs/cram/checkpoints/{s}' for s in (500, 1000))
  assert default_suite_dir(steps, 'cram') == '/r/runs/cram/suites/cram'
  assert default_suite_dir('gs://bkt/runs/cram,gs://bkt/runs/cram_electra', 'cram') == (
      'gs://bkt/runs/suites/cram')
  assert default_suite_dir('gs://bkt/runs/cram', 'cram') == 'gs://bkt/runs/cram/suites/cram'
  with pytest.raises(ConfigError, match='no folder in common'):
    default_suite_dir('gs://bkt/runs/cram,/r/runs/cram_electra', 'cram')
