"""Sweeps: the grid, names, skip-finished and resume, failures, report, bad specs."""

import json
import os

import pytest

from encoder import configs, sweep
from encoder.errors import ConfigError
from encoder.sweep_report import write_report
from tests.train.conftest import smoke_overrides


def smoke_config(corpus, cache_dir, *extra):
  config = configs.load_experiment('mlm_nsp_tiny:smoke')
  configs.apply_overrides(config, smoke_overrides(corpus, cache_dir, 'train.num_steps=2', *extra))
  return config


def test_grid_is_the_cross_product_with_readable_names():
  config = configs.load_experiment('mlm_nsp_tiny')
  axes = sweep.parse_sweep('model.attention=bidirectional,causal', config, None)
  axes += sweep.parse_sweep('data.mask_rate=0.15,0.3', config, None)
  grid = sweep.expand(axes, config)
  assert grid == [['model.attention=bidirectional', 'data.mask_rate=0.15'],
                  ['model.attention=bidirectional', 'data.mask_rate=0.3'],
                  ['model.attention=causal', 'data.mask_rate=0.15'],
                  ['model.attention=causal', 'data.mask_rate=0.3']]
  assert sweep.run_name(grid[3]) == 'attention=causal,mask_rate=0.3'
  assert sweep.run_name(['data.corpus=text:/a b/*.txt']) == 'corpus=text__a_b__.txt'


def test_named_sweeps_come_from_the_experiment():
  config = configs.load_experiment('mlm_nsp_tiny')
  module = configs.experiment_module('mlm_nsp_tiny')
  axes = sweep.parse_sweep('attention', config, module)
  assert axes == [('model.attention', ['bidirectional', 'causal']), ('data.nsp', ['false']),
                  ('train.num_steps', ['4000'])]
  grid = sweep.expand(axes, config)
  # The fixed settings reach every run but do not name it.
  assert grid[1] == ['model.attention=causal', 'data.nsp=false', 'train.num_steps=4000']
  assert [sweep.run_name(o, sweep.fixed_keys(axes)) for o in grid] == [
      'attention=bidirectional', 'attention=causal']
  # A key the user set on the command line keeps the user's value.
  assert sweep.parse_sweep('attention', config, module, frozenset({'train.num_steps'})) == axes[:2]
  with pytest.raises(ConfigError, match="unknown sweep 'nope'"):
    sweep.parse_sweep('nope', config, module)


def test_single_valued_axes_name_runs_only_when_nothing_varies():
  assert sweep.fixed_keys([('a.b', ['1']), ('a.c', ['1', '2'])]) == {'a.b'}
  assert sweep.fixed_keys([('a.b', ['1'])]) == frozenset()
  assert sweep.run_name(['a.b=1'], sweep.fixed_keys([('a.b', ['1'])])) == 'b=1'


@pytest.mark.parametrize('spec, message', [
    ('train.num_stpes=1,2', "did you mean 'train.num_steps'"),
    ('train.num_steps=', 'one or more comma-separated values'),
    ('train.num_steps=1,,2', 'one or more comma-separated values'),
    ('train.num_steps=1,two', 'expects an integer'),
])
def test_bad_specs_fail_before_any_run(spec, message, tmp_path):
  config = configs.load_experiment('mlm_nsp_tiny')
  with pytest.raises(ConfigError, match=message):
    axes = sweep.parse_sweep(spec, config, None)
    sweep.run_sweep('mlm_nsp_tiny', config, axes, str(tmp_path / 's'))
  assert not (tmp_path / 's').exists()


def test_failures_are_recorded_finished_runs_skipped_interrupted_runs_resumed(
    tmp_path, corpus, cache_dir):
  sweep_dir = str(tmp_path / 'sweep')
  axes = [('model.num_heads', ['2', '3'])]  # hidden 128 does not split into 3 heads
  config = smoke_config(corpus, cache_dir, 'train.stop_at_step=1')
  records = sweep.run_sweep('mlm_nsp_tiny:smoke', config, axes, sweep_dir)
  assert [r['status'] for r in records] == ['interrupted']  # the sweep stops with the run

  config = smoke_config(corpus, cache_dir)
  records = {r['name']: r for r in sweep.run_sweep('mlm_nsp_tiny:smoke', config, axes, sweep_dir)}
  assert records['num_heads=2']['status'] == 'done' and records['num_heads=2']['steps'] == 2
  assert records['num_heads=3']['status'] == 'failed'
  assert 'not divisible' in records['num_heads=3']['error']
  finished = os.path.join(sweep_dir, 'num_heads=2', 'metrics.jsonl')
  mtime = os.stat(finished).st_mtime_ns
  sweep.run_sweep('mlm_nsp_tiny:smoke', config, axes, sweep_dir)
  assert os.stat(finished).st_mtime_ns == mtime  # skipped, not retrained

  with open(os.path.join(sweep_dir, 'sweep.csv')) as f:
    lines = f.read().splitlines()
  assert lines[0].startswith('run,overrides,status,steps,wall_clock_s')
  assert len(lines) == 3 and 'mlm_accuracy' in lines[0]
  markdown = open(os.path.join(sweep_dir, 'sweep.md')).read()
  assert '| num_heads=2 | model.num_heads=2 | done | 2 |' in markdown
  assert '`num_heads=3` failed' in markdown
  assert os.path.getsize(os.path.join(sweep_dir, 'sweep.png')) > 1000
  os.remove(os.path.join(sweep_dir, 'sweep.md'))
  assert len(write_report(sweep_dir)) == 2 and os.path.exists(os.path.join(sweep_dir, 'sweep.md'))
  status = json.load(open(os.path.join(sweep_dir, 'num_heads=2', 'run_status.json')))
  assert status['overrides'] == ['model.num_heads=2']

  # A longer budget resumes a finished run instead of skipping it.
  records = {r['name']: r for r in sweep.run_sweep(
      'mlm_nsp_tiny:smoke', smoke_config(corpus, cache_dir, 'train.num_steps=3'), axes, sweep_dir)}
  assert records['num_heads=2']['status'] == 'done' and records['num_heads=2']['steps'] == 3
  mtime = os.stat(finished).st_mtime_ns

  # A finished run with other settings is never taken for this one, nor overwritten: the
  # sweep is refused before anything runs.
  with pytest.raises(ConfigError, match=r"num_heads=2' belongs to a different run \(data.nsp"):
    sweep.run_sweep('mlm_nsp_tiny:smoke',
                    smoke_config(corpus, cache_dir, 'train.num_steps=3', 'data.nsp=false'),
                    axes, sweep_dir)
  assert os.stat(finished).st_mtime_ns == mtime
  assert json.load(open(os.path.join(sweep_dir, 'num_heads=2', 'config.json')))['data']['nsp']
