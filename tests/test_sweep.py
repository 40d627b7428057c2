"""Sweeps: the grid, names, skip-finished and resume, failures, report, bad specs."""

import json
import os
import shutil

import pytest

from encoder import configs
from encoder.errors import ConfigError
from encoder.sweep import grid, parse_sweep, run_sweep, write_report
from encoder.sweep.report import plot_axes, sweep_figure
from encoder.sweep.status import write_status
from tests.train.conftest import smoke_overrides


def smoke_config(corpus, cache_dir, *extra):
  config = configs.load_experiment('mlm_nsp_tiny:smoke')
  configs.apply_overrides(config, smoke_overrides(corpus, cache_dir, 'train.num_steps=2', *extra))
  return config


def test_grid_is_the_cross_product_with_readable_names():
  config = configs.load_experiment('mlm_nsp_tiny')
  axes = parse_sweep('model.attention=bidirectional,causal', config, None)
  axes += parse_sweep('data.mask_rate=0.15,0.3', config, None)
  runs = grid.expand(axes)
  assert runs == [['model.attention=bidirectional', 'data.mask_rate=0.15'],
                  ['model.attention=bidirectional', 'data.mask_rate=0.3'],
                  ['model.attention=causal', 'data.mask_rate=0.15'],
                  ['model.attention=causal', 'data.mask_rate=0.3']]
  assert grid.run_name(runs[3]) == 'attention=causal,mask_rate=0.3'
  assert grid.run_name(['data.corpus=text:/a b/*.txt']) == 'corpus=text__a_b__.txt'


def test_named_sweeps_come_from_the_experiment():
  config = configs.load_experiment('mlm_nsp_tiny')
  module = configs.experiment_module('mlm_nsp_tiny')
  axes = parse_sweep('attention', config, module)
  # The sweep pins the recipe its documented numbers came from (post-LN, mask rate 0.15, NSP 1,
  # sequence length 128).
  assert axes == [('model.attention', ['bidirectional', 'causal']), ('data.nsp', [False]),
                  ('train.num_steps', [4000]), ('model.norm', ['post']),
                  ('data.mask_rate', [0.15]), ('train.nsp_loss_weight', [1.0]),
                  ('data.max_seq_length', [128])]
  runs = grid.expand(axes)
  # The fixed settings reach every run but do not name it.
  assert runs[1] == ['model.attention=causal', 'data.nsp=false', 'train.num_steps=4000',
                     'model.norm=post', 'data.mask_rate=0.15', 'train.nsp_loss_weight=1.0',
                     'data.max_seq_length=128']
  assert [grid.run_name(o, grid.fixed_keys(axes)) for o in runs] == [
      'attention=bidirectional', 'attention=causal']
  # A key the user set on the command line keeps the user's value.
  assert parse_sweep('attention', config, module,
                     frozenset({'train.num_steps'})) == axes[:2] + axes[3:]
  with pytest.raises(ConfigError, match="unknown sweep 'nope'"):
    parse_sweep('nope', config, module)


def test_single_valued_axes_name_runs_only_when_nothing_varies():
  assert grid.fixed_keys([('a.b', ['1']), ('a.c', ['1', '2'])]) == {'a.b'}
  assert grid.fixed_keys([('a.b', ['1'])]) == frozenset()
  assert grid.run_name(['a.b=1'], grid.fixed_keys([('a.b', ['1'])])) == 'b=1'


def test_values_are_typed_like_the_config_field_and_one_value_names_one_run():
  config = configs.load_experiment('mlm_nsp_tiny')
  axes = [axis for spec in ('data.mask_rate=0.30,1e-1', 'data.nsp=TRUE,0',
                            'train.num_steps=1e3,2_000', 'model.attention=causal')
          for axis in parse_sweep(spec, config, None)]
  assert axes == [('data.mask_rate', [0.3, 0.1]), ('data.nsp', [True, False]),
                  ('train.num_steps', [1000, 2000]), ('model.attention', ['causal'])]
  assert [type(v) for _, values in axes for v in values[:1]] == [float, bool, int, str]
  runs = grid.expand(axes)
  assert runs[0] == ['data.mask_rate=0.3', 'data.nsp=true', 'train.num_steps=1000',
                     'model.attention=causal']
  assert grid.run_name(runs[0], grid.fixed_keys(axes)) == 'mask_rate=0.3,nsp=true,num_steps=1000'
  applied = configs.load_experiment('mlm_nsp_tiny')
  configs.apply_overrides(applied, runs[-1])  # the override texts parse back to the values
  assert (applied.data.mask_rate, applied.data.nsp, applied.train.num_steps) == (0.1, False, 2000)

@pytest.mark.parametrize('spec, message', [
    ('train.num_stpes=1,2', "did you mean 'train.num_steps'"),
    ('train.num_steps=', 'one or more comma-separated values'),
    ('train.num_steps=1,,2', 'one or more comma-separated values'),
    ('train.num_steps=1,two', 'expects an integer'),
])
def test_bad_specs_fail_before_any_run(spec, message, tmp_path):
  config = configs.load_experiment('mlm_nsp_tiny')
  with pytest.raises(ConfigError, match=message):
    axes = parse_sweep(spec, config, None)
    run_sweep('mlm_nsp_tiny', config, axes, str(tmp_path / 's'))
  assert not (tmp_path / 's').exists()


@pytest.mark.slow  # the suite's reruns (tests/suite) go through the same status records
def test_failures_are_recorded_finished_runs_skipped_interrupted_runs_resumed(
    tmp_path, corpus, cache_dir):
  sweep_dir = str(tmp_path / 'sweep')
  axes = [('model.num_heads', [2, 3])]  # hidden 128 does not split into 3 heads
  config = smoke_config(corpus, cache_dir, 'train.stop_at_step=1')
  records = run_sweep('mlm_nsp_tiny:smoke', config, axes, sweep_dir)
  assert [r['status'] for r in records] == ['interrupted']  # the sweep stops with the run

  config = smoke_config(corpus, cache_dir)
  records = {r['name']: r for r in run_sweep('mlm_nsp_tiny:smoke', config, axes, sweep_dir)}
  assert records['num_heads=2']['status'] == 'done' and records['num_heads=2']['steps'] == 2
  assert records['num_heads=3']['status'] == 'failed'
  assert 'not divisible' in records['num_heads=3']['error']
  finished = os.path.join(sweep_dir, 'num_heads=2', 'metrics.jsonl')
  mtime = os.stat(finished).st_mtime_ns
  run_sweep('mlm_nsp_tiny:smoke', config, axes, sweep_dir)
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
  records = {r['name']: r for r in run_sweep(
      'mlm_nsp_tiny:smoke', smoke_config(corpus, cache_dir, 'train.num_steps=3'), axes, sweep_dir)}
  assert records['num_heads=2']['status'] == 'done' and records['num_heads=2']['steps'] == 3
  mtime = os.stat(finished).st_mtime_ns

  # A finished run with other settings is never taken for this one, nor overwritten: the
  # sweep is refused before anything runs.
  with pytest.raises(ConfigError, match=r"num_heads=2' belongs to a different run \(data.nsp"):
    run_sweep('mlm_nsp_tiny:smoke',
                    smoke_config(corpus, cache_dir, 'train.num_steps=3', 'data.nsp=false'),
                    axes, sweep_dir)
  assert os.stat(finished).st_mtime_ns == mtime
  assert json.load(open(os.path.join(sweep_dir, 'num_heads=2', 'config.json')))['data']['nsp']

  # A finished run copied into another sweep whose run has the same config is skipped there,
  # and reported under that sweep's name and overrides.
  config = smoke_config(corpus, cache_dir, 'train.num_steps=3')
  other_axes = [('model.num_heads', [2]), ('train.seed', [config.train.seed])]
  other = tmp_path / 'other'
  copied = other / f'num_heads=2,seed={config.train.seed}'
  shutil.copytree(os.path.join(sweep_dir, 'num_heads=2'), copied)
  (record,) = run_sweep('mlm_nsp_tiny:smoke', config, other_axes, str(other))
  assert os.stat(copied / 'metrics.jsonl').st_mtime_ns == mtime  # skipped, not retrained
  assert record['name'] == copied.name and record['overrides'][-1].startswith('train.seed=')
  assert f'| {copied.name} | model.num_heads=2 train.seed=' in (other / 'sweep.md').read_text()


def test_a_run_killed_mid_write_is_reported_as_far_as_its_metrics_are_whole(tmp_path):
  sweep_dir = tmp_path / 'sweep'
  lines = [{'step': 1, 'split': 'train', 'loss': 2.0}, {'step': 2, 'split': 'eval', 'loss': 1.5,
                                                        'mlm_accuracy': 0.25}]
  write_status(str(sweep_dir / 'killed'), {'name': 'killed', 'status': 'interrupted'})
  (sweep_dir / 'killed' / 'metrics.jsonl').write_text(
      ''.join(json.dumps(r) + '\n' for r in lines) + '{"step": 3, "split": "ev')
  write_status(str(sweep_dir / 'failed'), {'name': 'failed', 'status': 'failed', 'error': 'x'})
  records = {r['name']: r for r in write_report(str(sweep_dir))}
  assert records['killed']['steps'] == 2 and records['killed']['final'] == lines[1]
  assert records['failed']['steps'] == 0 and records['failed']['final'] == {}
  assert '| killed |  | interrupted | 2 |' in (sweep_dir / 'sweep.md').read_text()


def test_an_epoch_based_run_is_finished_at_the_length_its_run_resolved(tmp_path):
  # Fine-tuning configs say num_steps=0 (epochs); the run resolves its length into config.json,
  # and the caller's config keeps 0, so "finished" must read the resolved one.
  from encoder.sweep.status import finished, target_steps
  config = configs.load_experiment('classify_sst2')
  workdir = tmp_path / 'run'
  assert target_steps(str(workdir), config) is None and not finished(str(workdir), config)
  workdir.mkdir()
  (workdir / 'config.json').write_text(json.dumps({'train': {'num_steps': 94}}))
  (workdir / 'metrics.jsonl').write_text(json.dumps({'step': 40, 'split': 'train'}) + '\n')
  assert target_steps(str(workdir), config) == 94 and not finished(str(workdir), config)
  with open(workdir / 'metrics.jsonl', 'a') as f:
    f.write(json.dumps({'step': 94, 'split': 'eval'}) + '\n')
  assert finished(str(workdir), config)
  config.train.num_steps = 200  # a longer budget given by the user wins
  assert target_steps(str(workdir), config) == 200 and not finished(str(workdir), config)


def test_the_report_gains_the_downstream_columns_of_suites_run_on_the_sweep(tmp_path):
  sweep_dir = tmp_path / 'sweep'
  for name, accuracy in (('nsp=true', 0.2), ('nsp=false', 0.3)):
    write_status(str(sweep_dir / name), {'name': name, 'status': 'done',
                                         'overrides': [f'data.{name}']})
    (sweep_dir / name / 'metrics.jsonl').write_text(json.dumps(
        {'step': 10, 'split': 'eval', 'mlm_accuracy': accuracy}) + '\n')
  suite = {'arms': {arm: {'tasks': {'sst2': {'score': {'median': score}}}, 'average': score}
                    for arm, score in (('nsp=true', 0.61), ('nsp=false', 0.66),
                                       ('scratch', 0.52))}}
  os.makedirs(sweep_dir / 'suites' / 'table5')
  (sweep_dir / 'suites' / 'table5' / 'suite.json').write_text(json.dumps(suite))
  records = write_report(str(sweep_dir))
  assert [r['name'] for r in records] == ['nsp=false', 'nsp=true']  # suites/ is no run
  lines = (sweep_dir / 'sweep.md').read_text().splitlines()
  assert lines[0].endswith('| mlm_accuracy | table5:sst2 | table5:avg |')
  assert lines[2].startswith('| nsp=false |') and lines[2].endswith('| 0.3000 | 0.6600 | 0.6600 |')
  assert lines[4].startswith('| scratch | (baseline: no pretraining) |')
  assert lines[4].endswith('|  | 0.5200 | 0.5200 |')


def test_a_wall_clock_sweep_is_drawn_against_minutes_too(tmp_path):
  sweep_dir = tmp_path / 'sweep'
  for name, minutes in (('position_embedding=learned', (3.0, 6.0)),
                        ('position_embedding=rope', (3.1, 5.9))):
    write_status(str(sweep_dir / name), {'name': name, 'status': 'done', 'overrides': []})
    (sweep_dir / name / 'metrics.jsonl').write_text(''.join(
        json.dumps({'step': 100 * (i + 1), 'split': 'eval', 'elapsed_minutes': m,
                    'mlm_accuracy': 0.1 * (i + 1)}) + '\n' for i, m in enumerate(minutes)))
  records = write_report(str(sweep_dir))
  assert plot_axes(records) == ['step', 'elapsed_minutes']
  assert (sweep_dir / 'sweep.png').stat().st_size > 0
  # A run whose records predate the clock: steps alone (no mixed axis).
  records[0]['eval_curve'][0].pop('elapsed_minutes')
  assert plot_axes(records) == ['step']


def test_the_cram_sweeps_vary_one_choice_at_one_wall_clock():
  config = configs.load_experiment('cram')
  module = configs.experiment_module('cram')
  for name in module.SWEEPS:
    axes = parse_sweep(name, config, module)
    runs = grid.named_runs(axes)
    budgets = {item for _, o in runs for item in o if item.startswith('train.max_minutes=')}
    assert len(runs) >= 2 and len(budgets) == 1, name  # the arms share one wall clock
  assert all('train.max_minutes=6.0' in o for _, o in
             grid.named_runs(parse_sweep('positions', config, module)))
  shapes = dict(grid.named_runs(parse_sweep('shape', config, module)))
  assert list(shapes) == ['2x128', '4x192', '4x256']
  assert 'model.hidden_size=192' in shapes['4x192'] and 'model.size=mini' in shapes['4x256']
  table5 = dict(grid.named_runs(parse_sweep('table5', config, module)))
  assert list(table5) == ['mlm_nsp', 'mlm', 'causal', 'electra']
  assert {'task=electra', 'data.mask_token_prob=0.85'} <= set(table5['electra'])
  assert {'data.nsp=true', 'data.packing=none'} <= set(table5['mlm_nsp'])
  # A user's --config.train.max_minutes=60 makes them hour-long arms.
  assert all(key != 'train.max_minutes' for key, _ in
             parse_sweep('positions', config, module, frozenset({'train.max_minutes'})))


def test_the_plot_gives_each_main_metric_its_own_row_of_panels():
  """Table 5's ELECTRA arm is judged by its discriminator's accuracy: drawn in a row of its
  own, not dropped for lack of the MLM arms' metric nor drawn on their axis."""
  def record(name, metric, values):
    return {'name': name, 'main_metric': metric,
            'eval_curve': [{'step': 100 * (i + 1), 'elapsed_minutes': 2.0 * (i + 1), metric: v}
                           for i, v in enumerate(values)]}
  records = [record('mlm', 'mlm_accuracy', [0.1, 0.2]),
             record('causal', 'mlm_accuracy', [0.05, 0.1]),
             record('electra', 'disc_accuracy', [0.8, 0.9, 0.95])]
  panels = sweep_figure(records).axes
  assert len(panels) == 4  # 2 metrics x (steps, minutes)
  drawn = [(p.get_ylabel(), p.get_xlabel(), sorted(line.get_label() for line in p.lines))
           for p in panels]
  assert drawn == [
      ('held-out mlm_accuracy', 'step', ['causal', 'mlm']),
      ('held-out mlm_accuracy', 'minutes of training (wall clock)', ['causal', 'mlm']),
      ('held-out disc_accuracy', 'step', ['electra']),
      ('held-out disc_accuracy', 'minutes of training (wall clock)', ['electra'])]
  assert list(panels[3].lines[0].get_ydata()) == [0.8, 0.9, 0.95]
