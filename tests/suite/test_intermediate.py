"""`suite.intermediate`: the named tasks fine-tune from each arm first fine-tuned on NLI
(RoBERTa's recipe), with a fake trainer (the planning, ordering, kept weights and report);
tests/suite/test_suite_runs.py trains it for real (slow)."""

import json
import os

import pytest

from encoder.errors import ConfigError
from encoder.suite import run_suite
from encoder.sweep.status import read_status
from tests.suite.conftest import fake_metric, fake_run, write_glue_dir

LABELS = ('entailment', 'neutral', 'contradiction')


def write_nli(path, rows: int = 30) -> str:
  """A JSONL NLI file with TFDS's field names, as ../shared's SNLI/MultiNLI pairs."""
  with open(path, 'w', encoding='utf-8') as f:
    for i in range(rows):
      f.write(json.dumps({'premise': f'a man plays {i}', 'hypothesis': f'someone {i % 3}',
                          'label': LABELS[i % 3]}) + '\n')
  return str(path)


@pytest.fixture
def keeping_trainer(fake_trainer, monkeypatch):
  """The fake trainer, leaving a checkpoint as a real run does (so deleting it shows)."""
  from encoder.train import trainer

  def train(config, workdir):
    os.makedirs(os.path.join(workdir, 'checkpoints', '3'), exist_ok=True)
    return fake_trainer(config, workdir)

  monkeypatch.setattr(trainer, 'train_and_evaluate', train)
  return fake_trainer


def _suite(tmp_path, *extra):
  data_dir = write_glue_dir(tmp_path / 'glue')
  run = fake_run(tmp_path / 'run')
  return run_suite('glue', [f'init_from={run}', f'suite.data_dir={data_dir}', 'suite.seeds=2',
                            'train.num_steps=3', *extra], str(tmp_path / 'suite')), run


def test_the_named_tasks_start_from_the_arm_fine_tuned_on_nli_first(tmp_path, keeping_trainer):
  nli = write_nli(tmp_path / 'nli.jsonl')
  summary, run = _suite(tmp_path, f'suite.intermediate={nli}', 'suite.intermediate_tasks=mrpc')
  suite = tmp_path / 'suite'
  first = str(suite / 'pretrained' / 'mnli-intermediate')
  # One intermediate run, for the arm with weights, before every task's runs.
  assert keeping_trainer.calls[0] == 'pretrained/mnli-intermediate'
  assert keeping_trainer.calls.count('pretrained/mnli-intermediate') == 1
  assert 'scratch/mnli-intermediate' not in keeping_trainer.calls
  mrpc = read_status(str(suite / 'pretrained' / 'mrpc-seed1'))['overrides']
  assert mrpc[0] == f'init_from={first}' and f'init_from={run}' not in mrpc
  sst2 = read_status(str(suite / 'pretrained' / 'sst2-seed0'))['overrides']
  assert sst2[0] == f'init_from={run}'  # not named: from the arm itself
  scratch = read_status(str(suite / 'scratch' / 'mrpc-seed0'))['overrides']
  assert scratch[0] == 'init_from='  # the scratch baseline stays without any training
  # The intermediate run: the mnli experiment on a held-out slice of the file, its recipe
  # (the 32-wide fake is compact), the user's overrides last; its weights are kept.
  record = read_status(first)
  assert record['experiment'] == 'classify_mnli' and record['status'] == 'done'
  data = [o for o in record['overrides'] if o.startswith('data.')]
  assert data[0].endswith('/train.jsonl') and data[1].endswith('/dev.jsonl')
  train_rows = open(data[0].partition('=')[2]).read().splitlines()
  dev_rows = open(data[1].partition('=')[2]).read().splitlines()
  assert len(dev_rows) == 3 and len(train_rows) == 27
  assert 'train.learning_rate=0.0001' in record['overrides']
  assert record['overrides'][-1] == 'train.num_steps=3'
  assert os.path.isdir(os.path.join(first, 'checkpoints'))
  assert not os.path.isdir(suite / 'pretrained' / 'mrpc-seed0' / 'checkpoints')
  # The report says which tasks started from it and how it scored; its time is in the total.
  info = summary['intermediate']
  assert info['tasks'] == ['mrpc'] and info['arms']['pretrained']['accuracy'] == \
      fake_metric(first)
  md = (suite / 'suite.md').read_text()
  assert (f"Intermediate fine-tuning, as RoBERTa's: mrpc start from each arm but scratch "
          f"first fine-tuned on NLI (`{nli}`; one run, seed 0): pretrained 3 x 32 at lr 0.0001, "
          f"held-out accuracy {fake_metric(first):.4f}.") in md
  assert 'mnli' not in summary['arms']['pretrained']['tasks']  # not a row of the table
  # A rerun skips it with the rest; a rerun without it is refused (other starting points).
  keeping_trainer.calls.clear()
  _suite(tmp_path, f'suite.intermediate={nli}', 'suite.intermediate_tasks=mrpc')
  assert keeping_trainer.calls == []
  with pytest.raises(ConfigError, match='holds pretrained/mrpc-seed0 run with other settings'):
    _suite(tmp_path)


def test_a_failed_intermediate_run_holds_its_tasks_until_a_rerun_finishes_it(tmp_path,
                                                                              fake_trainer):
  nli = write_nli(tmp_path / 'nli.jsonl')
  fake_trainer.fail['pretrained/mnli-intermediate'] = ValueError('out of memory')
  summary, _ = _suite(tmp_path, f'suite.intermediate={nli}', 'suite.scratch=false',
                      'suite.intermediate_tasks=mrpc,rte')  # rte: not in the folder
  assert fake_trainer.calls == ['pretrained/mnli-intermediate', 'pretrained/sst2-seed0',
                                'pretrained/sst2-seed1']  # mrpc waits; sst2 does not
  assert summary['intermediate']['tasks'] == ['mrpc']  # only the tasks the suite runs
  md = (tmp_path / 'suite' / 'suite.md').read_text()
  assert "pretrained failed (ValueError: out of memory); its tasks' runs wait for it" in md
  assert '`pretrained/mrpc` seed 0: pending' in md
  del fake_trainer.fail['pretrained/mnli-intermediate']
  fake_trainer.calls.clear()
  summary, _ = _suite(tmp_path, f'suite.intermediate={nli}', 'suite.scratch=false',
                      'suite.intermediate_tasks=mrpc,rte')
  assert fake_trainer.calls == ['pretrained/mnli-intermediate', 'pretrained/mrpc-seed0',
                                'pretrained/mrpc-seed1']
  assert summary['run_counts'] == {'done': 4}


def test_glues_mnli_file_keeps_its_header_in_both_slices(tmp_path, fake_trainer):
  mnli = tmp_path / 'MNLI'
  mnli.mkdir()
  header = 'index\tgenre\tsentence1\tsentence2\tgold_label'
  (mnli / 'train.tsv').write_text(header + '\n' + ''.join(
      f'{i}\tfiction\ta man {i}\tsomeone {i}\t{LABELS[i % 3]}\n' for i in range(20)))
  _suite(tmp_path, f'suite.intermediate={mnli / "train.tsv"}', 'suite.scratch=false',
         'suite.train_sizes=mnli=12', 'suite.heldout_fraction=0.25')
  data = [o.partition('=')[2] for o in read_status(str(
      tmp_path / 'suite' / 'pretrained' / 'mnli-intermediate'))['overrides']
          if o.startswith('data.')]
  train, dev = (open(path).read().splitlines() for path in data)
  assert train[0] == header and dev[0] == header
  assert len(dev) == 1 + 5 and len(train) == 1 + 12  # a quarter held out; the rest capped


def test_a_missing_file_or_unknown_task_stops_before_any_run(tmp_path, fake_trainer):
  with pytest.raises(ConfigError, match="suite.intermediate: no file '/nowhere.jsonl'"):
    _suite(tmp_path, 'suite.intermediate=/nowhere.jsonl')
  nli = write_nli(tmp_path / 'nli.jsonl')
  with pytest.raises(ConfigError, match="suite.intermediate_tasks: 'mprc' cannot start from"):
    _suite(tmp_path, f'suite.intermediate={nli}', 'suite.intermediate_tasks=mrpc,mprc')
  with pytest.raises(ConfigError, match="suite.intermediate_tasks: 'mnli' cannot start"):
    _suite(tmp_path, f'suite.intermediate={nli}', 'suite.intermediate_tasks=mnli')
  assert fake_trainer.calls == []
  # Tasks none of which the suite runs: no intermediate run (and its file is not needed).
  _suite(tmp_path, 'suite.intermediate=/nowhere.jsonl', 'suite.intermediate_tasks=rte',
         'suite.tasks=sst2')
  assert fake_trainer.calls == ['pretrained/sst2-seed0', 'pretrained/sst2-seed1',
                                'scratch/sst2-seed0', 'scratch/sst2-seed1']


def test_with_parallel_workers_the_intermediate_run_gets_the_whole_host_first(
    tmp_path, fake_trainer, monkeypatch):
  from encoder.suite import execute
  batches = []

  def run_processes(todo, slots, keep_weights, after_each):  # in this process, recorded
    batches.append(([spec.name for spec in todo], slots, keep_weights))
    for spec in todo:
      execute.run_one(spec, keep_weights)
    return True

  monkeypatch.setattr(execute, '_run_processes', run_processes)
  nli = write_nli(tmp_path / 'nli.jsonl')
  _suite(tmp_path, f'suite.intermediate={nli}', 'suite.intermediate_tasks=mrpc',
         'suite.parallel=4')
  assert batches[0] == (['pretrained/mnli-intermediate'], 1, True)  # alone, weights kept
  names, slots, keep = batches[1]
  assert slots == 4 and not keep and 'pretrained/mrpc-seed0' in names
