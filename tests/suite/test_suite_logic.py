"""The suite's logic with a fake trainer: which runs it plans, what it skips on a rerun, what a
failure leaves, and the numbers in its table."""

import json
import os

import pytest

from encoder.errors import ConfigError, DataError
from encoder.suite import run_suite
from encoder.suite.execute import device_share
from encoder.suite.results import task_result
from encoder.sweep.seed_spread import spread
from encoder.sweep.status import read_status, write_status
from tests.suite.conftest import BUDGET, fake_metric, fake_run, glue_suite, write_glue_dir


def test_every_task_present_arm_and_seed_is_one_run_and_absent_tasks_are_listed(
    tmp_path, fake_trainer):
  summary = glue_suite(tmp_path)
  assert fake_trainer.calls == ['pretrained/sst2-seed0', 'pretrained/sst2-seed1',
                                'scratch/sst2-seed0', 'scratch/sst2-seed1',
                                'pretrained/mrpc-seed0', 'pretrained/mrpc-seed1',
                                'scratch/mrpc-seed0', 'scratch/mrpc-seed1']
  assert sorted(summary['missing']) == ['cola', 'mnli', 'qnli', 'qqp', 'rte', 'stsb']
  sst2 = summary['arms']['pretrained']['tasks']['sst2']
  seeds = [fake_metric(str(tmp_path / 'suite' / 'pretrained' / f'sst2-seed{s}')) for s in (0, 1)]
  assert sst2['metrics']['accuracy']['seeds'] == seeds
  assert sst2['metrics']['accuracy']['median'] == pytest.approx(sum(seeds) / 2)
  mrpc = summary['arms']['scratch']['tasks']['mrpc']
  assert mrpc['official_metrics'] == ['f1', 'accuracy']
  assert mrpc['score']['seeds'] == pytest.approx([1.5 * m / 2 for m in mrpc['metrics'][
      'accuracy']['seeds']])  # the mean of F1 (score / 2 here) and accuracy
  arm = summary['arms']['pretrained']
  assert arm['glue_average'] == pytest.approx(
      (arm['tasks']['sst2']['score']['median'] + arm['tasks']['mrpc']['score']['median']) / 2)
  for name in ('suite.json', 'suite.csv', 'suite.md', 'suite.png'):
    assert os.path.getsize(tmp_path / 'suite' / name) > 0
  md = (tmp_path / 'suite' / 'suite.md').read_text()
  assert '| pretrained |' in md and '| scratch |' in md and '- rte: no ' in md


def test_a_run_starts_from_its_arm_with_the_recipe_then_the_users_overrides(tmp_path,
                                                                            fake_trainer):
  run = fake_run(tmp_path / 'run', model={'size': 'tiny', 'num_layers': 2, 'norm': 'pre'})
  summary = glue_suite(tmp_path, 'train.learning_rate=1e-3', run=run)
  # The report states the rate and budget as run, the user's override, not the recipe's (a tiny
  # model's: the compact 1e-4).
  sst2 = summary['arms']['pretrained']['tasks']['sst2']
  assert sst2['learning_rate'] == 1e-3
  assert sst2['budget']['num_steps'] == 3 and sst2['budget']['batch_size'] == 8
  md = (tmp_path / 'suite' / 'suite.md').read_text()
  assert '| pretrained | sst2 | accuracy | 0.001 | 3 x 8 |' in md and '0.0001 |' not in md
  assert 'pretrained compact (Turc et al., 2019: 4 epochs, lr 1e-4) with train.num_steps=3, ' \
         'train.batch_size=8, train.learning_rate=1e-3' in md  # the recipe, as overridden
  assert ',0.001,' in (tmp_path / 'suite' / 'suite.csv').read_text()
  pretrained = read_status(str(tmp_path / 'suite' / 'pretrained' / 'sst2-seed1'))['overrides']
  assert pretrained[0] == f'init_from={run}'
  assert 'train.seed=1' in pretrained and pretrained[-3:] == ['train.num_steps=3',
                                                              'train.batch_size=8',
                                                              'train.learning_rate=1e-3']
  assert pretrained.index('train.learning_rate=0.0001') < pretrained.index(
      'train.learning_rate=1e-3')  # the recipe's rate, then the user's
  data = [o for o in pretrained if o.startswith('data.')]
  assert data[0].endswith('/train.tsv') and data[1].endswith('/dev.tsv')
  scratch = read_status(str(tmp_path / 'suite' / 'scratch' / 'sst2-seed0'))['overrides']
  assert scratch[:2] == ['init_from=', f"data.tokenizer={os.path.join(run, 'tokenizer')}"]
  assert {'model.size=tiny', 'model.num_layers=2', 'model.norm=pre'} <= set(scratch)


def test_a_rerun_skips_finished_runs_and_reruns_only_the_interrupted(tmp_path, fake_trainer):
  first = glue_suite(tmp_path)
  table = (tmp_path / 'suite' / 'suite.csv').read_text()
  fake_trainer.calls.clear()
  assert glue_suite(tmp_path)['arms'] == first['arms'] and fake_trainer.calls == []
  # A run killed mid-way: its status says interrupted and its metrics stop short.
  killed = str(tmp_path / 'suite' / 'scratch' / 'mrpc-seed0')
  write_status(killed, {**read_status(killed), 'status': 'interrupted'})
  os.remove(os.path.join(killed, 'metrics.jsonl'))
  assert _without_times(glue_suite(tmp_path)['arms']) == _without_times(first['arms'])
  assert fake_trainer.calls == ['scratch/mrpc-seed0']
  assert (tmp_path / 'suite' / 'suite.csv').read_text() == table


def _without_times(arms: dict) -> dict:
  """The arms' results less each run's wall clock (a resumed run adds its own time)."""
  return json.loads(json.dumps(arms), object_hook=lambda d: {
      k: v for k, v in d.items() if k != 'wall_clock_s'})


def test_a_failed_run_is_recorded_with_its_error_and_the_others_go_on(tmp_path, fake_trainer):
  fake_trainer.fail['pretrained/mrpc-seed1'] = DataError('mrpc/train.tsv: no column x\nmore')
  fake_trainer.fail['scratch/sst2-seed0'] = RuntimeError('out of memory')
  summary = glue_suite(tmp_path)
  assert len(fake_trainer.calls) == 8
  mrpc = summary['arms']['pretrained']['tasks']['mrpc']
  assert [r['status'] for r in mrpc['runs']] == ['done', 'failed']
  assert mrpc['runs'][1]['error'] == 'mrpc/train.tsv: no column x'  # one line
  assert len(mrpc['score']['seeds']) == 1  # the median of the seeds that finished
  assert summary['arms']['scratch']['tasks']['sst2']['runs'][0]['error'] == (
      'RuntimeError: out of memory')
  md = (tmp_path / 'suite' / 'suite.md').read_text()
  assert '- `pretrained/mrpc` seed 1: failed: mrpc/train.tsv: no column x' in md
  fake_trainer.calls.clear()
  fake_trainer.fail.clear()
  glue_suite(tmp_path)  # a rerun retries the failed runs only
  assert sorted(fake_trainer.calls) == ['pretrained/mrpc-seed1', 'scratch/sst2-seed0']


def test_a_mistyped_override_or_an_unknown_suite_stops_before_any_run(tmp_path, fake_trainer):
  with pytest.raises(ConfigError, match="unknown config key 'train.num_stpes'"):
    glue_suite(tmp_path, 'train.num_stpes=3')
  with pytest.raises(ConfigError, match="unknown suite 'glu'"):
    run_suite('glu', [f"init_from={fake_run(tmp_path / 'run')}"], str(tmp_path / 's'))
  with pytest.raises(ConfigError, match='needs --config.init_from'):
    run_suite('glue', [], str(tmp_path / 's'))
  assert fake_trainer.calls == []


def test_the_learning_rate_grid_reports_the_rate_with_the_best_median():
  def runs(*scores):
    return [{'seed': i, 'status': 'done', 'metrics': {'accuracy': s}}
            for i, s in enumerate(scores)]
  result = task_result('rte', {5e-5: runs(0.5, 0.9, 0.5), 2e-5: runs(0.6, 0.6, 0.7)})
  assert result['learning_rate'] == 2e-5 and result['score']['median'] == 0.6
  assert result['grid_medians'] == {'5e-05': 0.5, '2e-05': 0.6}
  assert spread([0.3, 0.1, 0.2]) == {'seeds': [0.3, 0.1, 0.2], 'median': 0.2, 'min': 0.1,
                                     'max': 0.3}


def test_packed_seeds_that_ran_different_step_counts_report_the_range():
  """Packing fills rows with a seed-dependent number of examples: MRPC's seeds ran 388, 412
  and 392 steps (docs/finetuning.md); the budget as run says so, not the first seed's count."""
  from encoder.suite import suite_report

  def runs(*steps):
    return [{'seed': i, 'status': 'done', 'metrics': {'accuracy': 0.6},
             'as_run': {'num_steps': n, 'batch_size': 32, 'learning_rate': 1e-4}}
            for i, n in enumerate(steps)]
  packed = task_result('rte', {1e-4: runs(388, 412, 392)})
  assert (packed['budget']['num_steps'], packed['budget']['num_steps_max']) == (388, 412)
  padded = task_result('rte', {1e-4: runs(136, 136, 136)})
  assert padded['budget']['num_steps'] == 136 and 'num_steps_max' not in padded['budget']
  summary = {'suite': 'glue', 'init_from': 'x', 'seeds': 3, 'dev_sets': 'heldout',
             'budget': 'all', 'missing': {}, 'runs_wall_clock_s': 1.0,
             'arms': {arm: {'step': None, 'glue_average': None, 'average': None,
                            'tasks': {'rte': result}}
                      for arm, result in (('packed', packed), ('padded', padded))}}
  text = suite_report.markdown(summary)
  assert '| packed | rte | accuracy | 0.0001 | 388-412 x 32 |' in text
  assert '| padded | rte | accuracy | 0.0001 | 136 x 32 |' in text


def test_the_heldout_dev_slice_is_deterministic_disjoint_and_verbatim(tmp_path, fake_trainer):
  data_dir = write_glue_dir(tmp_path / 'glue', rows=50)
  glue_suite(tmp_path, 'suite.heldout_fraction=0.2', 'suite.train_size=30', data_dir=data_dir)
  (folder,) = [f for f in os.listdir(tmp_path / 'suite' / 'data') if f.startswith('mrpc-')]
  read = lambda name: (tmp_path / 'suite' / 'data' / folder / name).read_text(encoding='utf-8')  # noqa: E731
  source = (tmp_path / 'glue' / 'MRPC' / 'train.tsv').read_text(encoding='utf-8')
  header, *rows = source.splitlines()
  train, dev = read('train.tsv').splitlines(), read('dev.tsv').splitlines()
  assert train[0] == dev[0] == header and header.startswith('\ufeff')  # BOM and header kept
  assert len(dev) - 1 == 10 and len(train) - 1 == 30
  assert not set(train[1:]) & set(dev[1:]) and set(train[1:]) | set(dev[1:]) <= set(rows)
  assert json.loads(read('slice.json'))['dev_units'] == 10
  again = tmp_path / 'again'
  run_suite('glue', [f"init_from={fake_run(tmp_path / 'run')}", f'suite.data_dir={data_dir}',
                     'suite.seeds=1', 'suite.heldout_fraction=0.2', 'suite.train_size=30',
                     *BUDGET], str(again))
  assert (again / 'data' / folder / 'dev.tsv').read_text(encoding='utf-8') == read('dev.tsv')


def test_a_tasks_own_dev_file_is_its_dev_set_where_present_and_train_size_still_caps(
    tmp_path, fake_trainer, monkeypatch):
  data_dir = write_glue_dir(tmp_path / 'glue', rows=50)
  dev = tmp_path / 'glue' / 'SST-2' / 'dev.tsv'
  dev.write_text('sentence\tlabel\ngood film \t1\n', encoding='utf-8')
  seen = {}

  def recording_trainer(config, workdir):  # which files each run was given
    seen[os.path.basename(workdir)] = (config.data.train, config.data.eval)
    return fake_trainer(config, workdir)

  from encoder.train import trainer
  monkeypatch.setattr(trainer, 'train_and_evaluate', recording_trainer)
  summary = glue_suite(tmp_path, 'suite.seeds=1', 'suite.scratch=false', 'suite.train_size=30',
                   data_dir=data_dir)
  sst2_train, sst2_dev = seen['sst2-seed0']
  assert sst2_dev == str(dev)  # the official file: MRPC has none here, so it is held out
  assert len(open(sst2_train, encoding='utf-8').read().splitlines()) == 1 + 30
  mrpc_train, mrpc_dev = seen['mrpc-seed0']
  assert os.path.dirname(mrpc_dev) == os.path.dirname(mrpc_train) != os.path.dirname(str(dev))
  assert 'official dev files (sst2)' in summary['dev_sets'] and 'mrpc)' in summary['dev_sets']
  with pytest.raises(ConfigError, match='suite.dev_set'):
    glue_suite(tmp_path, 'suite.dev_set=offical', data_dir=data_dir)
  missing = glue_suite(tmp_path / 'official', 'suite.dev_set=official', 'suite.seeds=1',
                   data_dir=data_dir)
  assert 'suite.dev_set=official' in missing['missing']['mrpc']


def test_conll_and_squad_files_are_sliced_by_sentence_and_paragraph(tmp_path, fake_trainer):
  conll = tmp_path / 'conll'
  conll.mkdir()
  sentences = [f'Word{i} B-PER\nsaid O' for i in range(20)]
  (conll / 'train.txt').write_text('-DOCSTART- O\n\n' + '\n\n'.join(sentences) + '\n')
  run_suite('ner', [f"init_from={fake_run(tmp_path / 'run')}", f'suite.conll_dir={conll}',
                    'suite.seeds=1', 'suite.scratch=false', 'suite.heldout_fraction=0.25',
                    *BUDGET], str(tmp_path / 'suite'))
  (folder,) = os.listdir(tmp_path / 'suite' / 'data')
  parts = [(tmp_path / 'suite' / 'data' / folder / f).read_text().strip().split('\n\n')
           for f in ('train.txt', 'dev.txt')]
  assert sorted(parts[0] + parts[1]) == sorted(sentences) and len(parts[1]) == 5
  squad = tmp_path / 'squad'
  squad.mkdir()
  articles = [{'title': f't{a}', 'paragraphs': [
      {'context': f'c{a}{p}', 'qas': [{'id': f'{a}{p}', 'question': 'q?',
                                       'answers': [{'text': 'c', 'answer_start': 0}]}]}
      for p in range(5)]} for a in range(2)]
  (squad / 'train-v1.1.json').write_text(json.dumps({'version': '1.1', 'data': articles}))
  run_suite('squad', [f"init_from={fake_run(tmp_path / 'run')}", f'suite.squad_dir={squad}',
                      'suite.seeds=1', 'suite.scratch=false', *BUDGET], str(tmp_path / 's2'))
  (folder,) = os.listdir(tmp_path / 's2' / 'data')
  dev = json.loads((tmp_path / 's2' / 'data' / folder / 'dev.json').read_text())
  train = json.loads((tmp_path / 's2' / 'data' / folder / 'train.json').read_text())
  ids = [q['id'] for d in (dev, train) for a in d['data'] for p in a['paragraphs']
         for q in p['qas']]
  assert len(dev['data']) == 1 and sorted(ids) == sorted(f'{a}{p}' for a in range(2)
                                                         for p in range(5))


def test_parallel_workers_get_disjoint_shares_of_cores_and_gpus(monkeypatch):
  monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1, 2, 3, 4, 5, 6, 7})
  shares = [device_share(slot, 2, {'CUDA_VISIBLE_DEVICES': '0,1,2,3'}) for slot in (0, 1)]
  assert [cores for _, cores in shares] == [[0, 1, 2, 3], [4, 5, 6, 7]]
  assert [env['CUDA_VISIBLE_DEVICES'] for env, _ in shares] == ['0,1', '2,3']
  env, cores = device_share(2, 3, {'TPU_VISIBLE_CHIPS': '0,1,2,3,4,5'})
  assert cores == [4, 5] and env['TPU_VISIBLE_CHIPS'] == '4,5'


def _done(task_metrics: list[dict]) -> list[dict]:
  return [{'status': 'done', 'seed': i, 'metrics': m} for i, m in enumerate(task_metrics)]


def test_a_task_within_its_seed_range_of_the_majority_class_did_not_learn():
  """MRPC's score is the mean of F1 and accuracy: the majority class scores
  (0.81 + 0.68) / 2 = 0.745; seeds 0.74-0.76 (range 0.02) do not clear it by more than their
  range, seeds 0.84-0.86 do."""
  base = {'baseline_f1': 0.81, 'baseline_accuracy': 0.68}
  flat = task_result('mrpc', {2e-5: _done([{**base, 'f1': 0.81 + d, 'accuracy': 0.68 + d}
                                           for d in (-0.01, 0.0, 0.01)])})
  assert flat['baseline_score'] == pytest.approx(0.745)
  assert 'within its seed range of the baseline 0.7450' in flat['did_not_learn']
  good = task_result('mrpc', {2e-5: _done([{**base, 'f1': 0.91 + d, 'accuracy': 0.78 + d}
                                           for d in (-0.01, 0.0, 0.01)])})
  assert good['did_not_learn'] == ''
  # Regression: correlations clear 0, but the squared error is no better than the mean's.
  stuck = task_result('stsb', {2e-5: _done([{'pearson': 0.4, 'spearman': 0.4, 'mse': 2.3,
                                             'baseline_mse': 2.2}])})
  assert 'no better than predicting the mean' in stuck['did_not_learn']


def test_arm_differences_within_the_seed_range_are_listed_and_marked(tmp_path):
  from encoder.suite import suite_report
  from encoder.sweep.seed_spread import close_calls, spread
  scores = {'a': {'rte': spread([0.60, 0.64, 0.66])}, 'b': {'rte': spread([0.62, 0.63, 0.65])},
            'c': {'rte': spread([0.80, 0.81, 0.82])}, 'd': {'rte': spread([0.63])}}
  # a-b: medians 0.01 apart, range 0.06; c is clear of both; d has one seed (no range).
  assert close_calls(scores) == [{'task': 'rte', 'arms': ['a', 'b'], 'difference': 0.01,
                                  'range': 0.06}]
  summary = {'suite': 'glue', 'init_from': 'x', 'seeds': 3, 'dev_sets': 'heldout',
             'budget': 'all', 'missing': {}, 'runs_wall_clock_s': 1.0,
             'within_seed_spread': close_calls(scores),
             'arms': {arm: {'step': None, 'glue_average': None, 'average': None,
                            'tasks': {'rte': {'score': s['rte'], 'metrics': {},
                                              'official_metrics': ['accuracy'],
                                              'learning_rate': 2e-5, 'runs': [],
                                              'did_not_learn': 'x' if arm == 'd' else ''}}}
                      for arm, s in scores.items()}}
  text = suite_report.markdown(summary)
  assert '- rte: a vs b, medians 1.0 apart, seed range 6.0' in text
  assert '| d | 63.0 † |' in text and '`d/rte` did not learn' in text


def test_a_compact_arm_gets_the_small_bert_recipe_and_the_report_says_which(tmp_path,
                                                                             fake_trainer):
  def ran(width, *extra):
    run = fake_run(tmp_path / f'run{width}', model={'size': 'tiny', 'hidden_size': width})
    suite_dir = tmp_path / f'suite{width}{len(extra)}'
    run_suite('glue', [f'init_from={run}', f'suite.data_dir={write_glue_dir(tmp_path / "g")}',
                       'suite.seeds=1', 'suite.tasks=sst2', 'train.num_steps=3', *extra],
              str(suite_dir))
    runs = sorted(os.listdir(suite_dir / 'pretrained'))
    overrides = read_status(str(suite_dir / 'pretrained' / runs[0]))['overrides']
    return overrides, (suite_dir / 'suite.md').read_text(), runs

  # 384 wide (MiniLM-L6): Turc et al.'s 4 epochs at 1e-4; the scratch arm shares its width.
  overrides, md, _ = ran(384)
  assert 'train.learning_rate=0.0001' in overrides and 'train.num_epochs=4.0' in overrides
  assert 'pretrained compact (Turc et al., 2019' in md and 'scratch compact' in md
  assert '| pretrained | sst2 | accuracy | 0.0001 |' in md
  overrides, md, _ = ran(768)  # BERT-base's width: BERT's recipe
  assert 'train.learning_rate=2e-05' in overrides and 'train.num_epochs=3.0' in overrides
  assert "pretrained BERT's (3 epochs" in md
  overrides, _, _ = ran(384, 'suite.recipe=bert')  # forced
  assert 'train.learning_rate=2e-05' in overrides
  _, _, runs = ran(768, 'suite.recipe=compact', 'suite.lr_grid=true')  # forced, with its grid
  assert runs == ['sst2-lr0.0001-seed0', 'sst2-lr0.0003-seed0', 'sst2-lr3e-05-seed0',
                  'sst2-lr5e-05-seed0']
  with pytest.raises(ConfigError, match="suite.recipe='small': expected one of auto, bert"):
    ran(384, 'suite.recipe=small')


def test_per_task_train_caps_beat_train_size_and_a_mistyped_task_stops_first(tmp_path,
                                                                            fake_trainer):
  data_dir = write_glue_dir(tmp_path / 'glue', rows=50)
  summary = glue_suite(tmp_path, 'suite.heldout_fraction=0.2', 'suite.train_size=30',
                   'suite.train_sizes=sst2=12', data_dir=data_dir)
  rows = {}
  for folder in os.listdir(tmp_path / 'suite' / 'data'):
    info = json.loads((tmp_path / 'suite' / 'data' / folder / 'slice.json').read_text())
    rows[folder.split('-')[0]] = info['train_units']
  assert rows == {'sst2': 12, 'mrpc': 30}
  assert 'train examples <= 30, sst2 <= 12' in summary['budget']
  other = glue_suite(tmp_path / 'other', 'suite.heldout_fraction=0.2', 'suite.train_size=30',
                 'suite.train_sizes= mrpc = 2_0 , sst2=0,conll2003=5', data_dir=data_dir)
  # conll2003 is not in this suite: its cap is not stated
  assert other['budget'].startswith('train examples <= 30, mrpc <= 20, sst2: all, train.')
  fake_trainer.calls.clear()
  for bad, why in (('sst3=12', 'not TASK=N'), ('sst2=many', 'not TASK=N'),
                   ('sst2=-1', 'not TASK=N'), ('sst2=3,sst2=4', 'twice')):
    item = bad.split(',')[-1]
    with pytest.raises(ConfigError, match=f"suite.train_sizes: '{item}' is {why}"):
      glue_suite(tmp_path / 'bad', f'suite.train_sizes={bad}', data_dir=data_dir)
  assert fake_trainer.calls == []


def test_a_rerun_with_other_settings_is_refused_and_touches_no_run(tmp_path, fake_trainer):
  glue_suite(tmp_path)
  status = (tmp_path / 'suite' / 'pretrained' / 'sst2-seed0' / 'run_status.json').read_text()
  fake_trainer.calls.clear()
  with pytest.raises(ConfigError, match=r'holds pretrained/sst2-seed0 run with other settings '
                     r'\(ran train.num_steps=3; now train.num_steps=4\): pass a new --workdir'):
    glue_suite(tmp_path, 'train.num_steps=4')
  assert fake_trainer.calls == []
  assert (tmp_path / 'suite' / 'pretrained' / 'sst2-seed0' / 'run_status.json'
          ).read_text() == status
  glue_suite(tmp_path, 'suite.seeds=3')  # more seeds: the finished runs are kept
  assert fake_trainer.calls == ['pretrained/sst2-seed2', 'scratch/sst2-seed2',
                                'pretrained/mrpc-seed2', 'scratch/mrpc-seed2']


def test_arms_of_different_widths_each_run_their_own_recipes_grid(tmp_path, fake_trainer):
  sweep = tmp_path / 'sweep'
  for name, width in (('narrow', 384), ('wide', 768)):
    fake_run(sweep / name, model={'size': 'tiny', 'hidden_size': width})
    write_status(str(sweep / name), {'name': name, 'status': 'done'})
  data_dir = write_glue_dir(tmp_path / 'glue', tasks=('sst2',))
  summary = run_suite('glue', [f'init_from={sweep}', f'suite.data_dir={data_dir}',
                               'suite.seeds=1', 'suite.scratch=false', 'suite.lr_grid=true',
                               'train.num_steps=3'])
  suites = sweep / 'suites' / 'glue'
  assert sorted(os.listdir(suites / 'narrow')) == [
      'sst2-lr0.0001-seed0', 'sst2-lr0.0003-seed0', 'sst2-lr3e-05-seed0', 'sst2-lr5e-05-seed0']
  assert sorted(os.listdir(suites / 'wide')) == [
      'sst2-lr2e-05-seed0', 'sst2-lr3e-05-seed0', 'sst2-lr4e-05-seed0', 'sst2-lr5e-05-seed0']
  narrow, wide = (summary['arms'][a]['tasks']['sst2'] for a in ('narrow', 'wide'))
  assert set(narrow['grid_medians']) == {'0.0003', '0.0001', '5e-05', '3e-05'}
  assert set(wide['grid_medians']) == {'5e-05', '4e-05', '3e-05', '2e-05'}
  best = max(narrow['grid_medians'], key=narrow['grid_medians'].get)
  assert narrow['learning_rate'] == float(best)
  md = (suites / 'suite.md').read_text()  # each arm's recipe as run: its grid, not one rate
  assert 'narrow compact (Turc et al., 2019: 4 epochs; lr per task from {3e-4, 1e-4, 5e-5, ' \
         '3e-5}, chosen on held-out)' in md and 'lr 1e-4' not in md
  assert "wide BERT's (3 epochs; lr per task from its grid" in md


def test_a_grid_of_one_seed_chooses_each_tasks_rate_and_runs_the_other_seeds_at_it(
    tmp_path, fake_trainer):
  """suite.grid_seeds=1: every rate at seed 0, then seeds 1 and 2 at the rate whose seed 0
  scored best, chosen per arm and task; the table names the rate each task ran at."""
  data_dir = write_glue_dir(tmp_path / 'glue', tasks=('sst2',))
  summary = run_suite('glue', [f'init_from={fake_run(tmp_path / "run")}',
                               f'suite.data_dir={data_dir}', 'suite.seeds=3',
                               'suite.lr_grid=true', 'suite.grid_seeds=1', *BUDGET],
                      str(tmp_path / 'suite'))
  grid = ('0.0003', '0.0001', '5e-05', '3e-05')
  for arm in ('pretrained', 'scratch'):
    firsts = {lr: fake_metric(str(tmp_path / 'suite' / arm / f'sst2-lr{lr:g}-seed0'))
              for lr in (3e-4, 1e-4, 5e-5, 3e-5)}
    best = max(firsts, key=firsts.get)
    ran = sorted(c.split('/')[1] for c in fake_trainer.calls if c.startswith(arm + '/'))
    assert ran == sorted([f'sst2-lr{lr}-seed0' for lr in grid]
                         + [f'sst2-lr{best:g}-seed{s}' for s in (1, 2)])
    result = summary['arms'][arm]['tasks']['sst2']
    assert result['learning_rate'] == best and len(result['score']['seeds']) == 3
    assert result['grid_medians'] == {f'{lr:g}': m for lr, m in firsts.items()}
  # The seed-0 runs of every rate come first, the chosen rate's other seeds after them all.
  assert [c.endswith('seed0') for c in fake_trainer.calls] == [True] * 8 + [False] * 4
  md = (tmp_path / 'suite' / 'suite.md').read_text()
  best = summary['arms']['pretrained']['tasks']['sst2']['learning_rate']
  row = md.split('\n| pretrained |')[1].split('\n')[0]
  assert f' lr {best:g}' in row and 'lr X: the learning rate each task ran at' in md
  fake_trainer.calls.clear()  # a rerun finds every run done and repeats the choice
  run_suite('glue', [f'init_from={tmp_path / "run"}', f'suite.data_dir={data_dir}',
                     'suite.seeds=3', 'suite.lr_grid=true', 'suite.grid_seeds=1', *BUDGET],
            str(tmp_path / 'suite'))
  assert fake_trainer.calls == []
