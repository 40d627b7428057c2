"""`--eval_suite embed`: each arm (the run, and scratch) scored as an embedder on STS pairs and
a BEIR folder, in the suite's report, with the numbers `encoder.embedding.evaluate` gives."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import encoder
from encoder.convert import from_hf
from encoder.embedding import evaluate
from encoder.errors import ConfigError
from encoder.suite.runner import run_suite
from tests.golden.smoke import GOLDEN, ROOT

SENTENCES = ['the cat sat on the mat', 'a cat is sitting on a mat', 'stock prices fell today',
             'markets dropped sharply', 'she plays the violin', 'a woman is playing music',
             'the weather is cold', 'it is freezing outside']


def _data(tmp_path) -> tuple[str, str]:
  """A scored-pairs TSV and a BEIR folder of the toy sentences."""
  rng = np.random.default_rng(0)
  pairs = tmp_path / 'pairs.tsv'
  rows = [f'{SENTENCES[i]}\t{SENTENCES[j]}\t{rng.uniform(0, 5):.3f}'
          for i in range(8) for j in range(8) if i < j]
  pairs.write_text('sentence1\tsentence2\tscore\n' + '\n'.join(rows) + '\n')
  beir = tmp_path / 'beir'
  (beir / 'qrels').mkdir(parents=True)
  (beir / 'corpus.jsonl').write_text(''.join(
      json.dumps({'_id': f'd{i}', 'title': '', 'text': s}) + '\n' for i, s in enumerate(SENTENCES)))
  (beir / 'queries.jsonl').write_text(''.join(
      json.dumps({'_id': f'q{i}', 'text': s}) + '\n' for i, s in enumerate(SENTENCES[::2])))
  (beir / 'qrels' / 'test.tsv').write_text('query-id\tcorpus-id\tscore\n' + ''.join(
      f'q{i}\td{2 * i + 1}\t1\n' for i in range(4)))
  return str(pairs), str(beir)


@pytest.fixture
def run(tmp_path) -> str:
  """The tiny golden BERT, converted: the run every test judges."""
  path = str(tmp_path / 'run')
  from_hf(os.path.join(GOLDEN, 'tiny_bert'), path)
  return path


def test_the_embed_suite_scores_every_arm_as_evaluate_does(tmp_path, run):
  pairs, beir = _data(tmp_path)
  summary = run_suite('embed', [f'init_from={run}', f'suite.sts_file={pairs}',
                                f'suite.beir_dir={beir}', 'suite.beir_split=test'],
                      str(tmp_path / 'suite'))
  saved = json.load(open(tmp_path / 'suite' / 'suite.json'))
  assert saved['arms'].keys() == {'pretrained', 'scratch'} == summary['arms'].keys()
  model = encoder.load(run)
  sts = evaluate.evaluate_sts(model, pairs)
  beir_scores = evaluate.evaluate_beir(model, beir, 'test')
  tasks = saved['arms']['pretrained']['tasks']
  assert tasks['sts']['metrics']['spearman']['median'] == pytest.approx(sts['spearman'])
  assert tasks['beir']['metrics']['ndcg@10']['median'] == pytest.approx(beir_scores['ndcg@10'])
  assert tasks['beir']['metrics']['recall@100']['median'] == pytest.approx(
      beir_scores['recall@100'])
  scratch = saved['arms']['scratch']['tasks']['sts']['metrics']['spearman']['median']
  assert scratch != pytest.approx(sts['spearman'])  # random weights embed differently
  assert 'STS Spearman' in (tmp_path / 'suite' / 'suite.md').read_text()


def test_missing_files_are_listed_and_no_files_is_one_line(tmp_path, run):
  pairs, _ = _data(tmp_path)
  summary = run_suite('embed', [f'init_from={run}', f'suite.sts_file={pairs}',
                                f'suite.beir_dir={tmp_path}/nowhere', 'suite.scratch=false'],
                      str(tmp_path / 'suite'))
  assert list(summary['arms']['pretrained']['tasks']) == ['sts']
  assert 'nowhere' in summary['missing']['beir']
  with pytest.raises(ConfigError, match='suite.sts_file'):
    run_suite('embed', [f'init_from={run}'], str(tmp_path / 'suite2'))
  with pytest.raises(ConfigError, match='a suite of their own'):
    run_suite('x', [f'init_from={run}', 'suite.tasks=sst2,sts'], str(tmp_path / 'suite3'))


def test_the_command_line_of_the_contract(tmp_path, run):
  pairs, beir = _data(tmp_path)
  out = subprocess.run(
      [sys.executable, 'launch.py', '--eval_suite', 'embed', '--workdir', str(tmp_path / 'd'),
       f'--config.init_from={run}', f'--config.suite.sts_file={pairs}',
       f'--config.suite.beir_dir={beir}', '--config.suite.beir_split=test',
       '--config.suite.scratch=false'], capture_output=True, text=True, cwd=ROOT)
  assert out.returncode == 0, out.stderr[-2000:]
  tasks = json.load(open(tmp_path / 'd' / 'suite.json'))['arms']['pretrained']['tasks']
  assert 'spearman' in tasks['sts']['metrics']
  assert {'ndcg@10', 'recall@100'} <= set(tasks['beir']['metrics'])
