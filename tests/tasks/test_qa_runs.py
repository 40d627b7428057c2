"""Extractive QA end to end: smoke runs through launch.py, prediction files, `answer()`, and
bad input as one-line errors with exit status 2."""

import json
import os
import re
import subprocess
import sys

import pytest

import encoder
from encoder import configs
from encoder.tasks import squad_metrics
from encoder.train.trainer import train_and_evaluate
from experiments import _smoke_squad

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _launch(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
  env = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=8'}
  return subprocess.run([sys.executable, os.path.join(ROOT, 'launch.py'), *args],
                        capture_output=True, text=True, timeout=timeout, env=env)


def _lines(path) -> list[dict]:
  with open(path, encoding='utf-8') as f:
    return [json.loads(line) for line in f]


def _eval_questions(version_2: bool) -> dict:
  with open(_smoke_squad.smoke_files(version_2)[1], encoding='utf-8') as f:
    data = json.load(f)['data']
  return {qa['id']: (qa, p['context']) for a in data for p in a['paragraphs'] for qa in p['qas']}


@pytest.mark.slow
def test_squad_v1_smoke_through_launch_writes_predictions_and_answers(tmp_path):
  out = _launch('--exp', 'qa_squad:smoke', '--workdir', str(tmp_path))
  assert out.returncode == 0, out.stderr[-3000:]
  steps = json.load(open(tmp_path / 'config.json'))['train']['num_steps']
  evals = [r for r in _lines(tmp_path / 'metrics.jsonl') if r['split'] == 'eval']
  assert set(evals[-1]) == {'step', 'split', 'exact_match', 'f1'}
  rows = _lines(tmp_path / 'predictions' / f'eval_step{steps}.jsonl')
  official = json.load(open(tmp_path / 'predictions' / f'eval_step{steps}_official.json'))
  questions = _eval_questions(False)
  assert len(rows) == len(questions) == len(official) == 16
  # The metrics are the official ones over these very predictions.
  golds = {q: [a['text'] for a in qa['answers']] for q, (qa, _) in questions.items()}
  assert squad_metrics.squad_v1(golds, official) == pytest.approx(
      {k: evals[-1][k] for k in ('exact_match', 'f1')})
  model = encoder.load(str(tmp_path))
  for row in rows[:3]:
    qa, context = questions[row['id']]
    assert official[row['id']] == row['prediction']
    assert context[row['start']:row['end']] == row['prediction']
    got = model.answer(qa['question'], context)
    assert got['text'] == row['prediction'] and not got['no_answer']
    assert context[got['start']:got['end']] == got['text']
    assert got['score'] == pytest.approx(row['score'], abs=1e-3)


@pytest.mark.slow
def test_squad_v2_smoke_reports_breakdowns_and_null_answers(tmp_path):
  config = configs.load_experiment('qa_squad_v2:smoke')
  configs.apply_overrides(config, ['model.dropout_rate=0.0', 'train.eval_every=1000'])
  metrics = train_and_evaluate(config, str(tmp_path))
  assert {'exact_match', 'f1', 'has_ans_exact_match', 'has_ans_f1', 'no_ans_exact_match',
          'no_ans_f1', 'best_exact_match', 'best_exact_match_threshold', 'best_f1',
          'best_f1_threshold'} == set(metrics)
  assert metrics['best_f1'] >= metrics['f1'] - 1e-9  # threshold 0 is one of those tried
  steps = json.loads((tmp_path / 'config.json').read_text())['train']['num_steps']  # resolved
  rows = _lines(tmp_path / 'predictions' / f'eval_step{steps}.jsonl')
  odds = json.load(open(tmp_path / 'predictions' / f'eval_step{steps}_null_odds.json'))
  assert len(rows) == 20 and len(odds) == 20  # 16 answerable + 4 unanswerable questions
  for row in rows:
    assert (row['prediction'] == '') == (row['null_score_diff'] > 0.0)
    assert odds[row['id']] == row['null_score_diff']
  model = encoder.load(str(tmp_path))
  questions = _eval_questions(True)
  row = rows[0]
  got = model.answer(questions[row['id']][0]['question'], questions[row['id']][1])
  assert got['text'] == row['prediction'] and got['no_answer'] == (row['prediction'] == '')
  assert got['null_score_diff'] == pytest.approx(row['null_score_diff'], abs=1e-3)
  many = model.answer(['Who visited Oslo?', 'Who?'], ['Zoë visited Oslo.', 'Nobody.'])
  assert len(many) == 2 and all('no_answer' in a for a in many)


def _write(path, content: str) -> str:
  path.write_text(content, encoding='utf-8')
  return str(path)


@pytest.mark.parametrize('case,message', [
    ('malformed', r'^error: \S+bad.json: not valid JSON \(Expecting'),
    ('mismatch', r"^error: \S+bad.json: data\[0\].paragraphs\[0\].qas\[1\] \(id q2\): "
                 r"answer_start=3 points at ' vis', not the answer 'Oslo'"),
    ('unanswerable', r'qas\[0\] \(id q1\): no answer, but SQuAD 1.1 wants one'),
])
def test_bad_squad_files_exit_2_with_one_line(tmp_path, case, message):
  qas = [{'id': 'q1', 'question': 'Who?', 'answers': [{'text': 'Zoë', 'answer_start': 0}]},
         {'id': 'q2', 'question': 'Where?', 'answers': [{'text': 'Oslo', 'answer_start': 12}]}]
  if case == 'mismatch':
    qas[1]['answers'][0]['answer_start'] = 3
  if case == 'unanswerable':
    qas[0]['answers'] = []
  content = json.dumps({'data': [{'paragraphs': [{'context': 'Zoë visited Oslo.',
                                                  'qas': qas}]}]})
  bad = _write(tmp_path / 'bad.json', content[:-5] if case == 'malformed' else content)
  out = _launch('--exp', 'qa_squad:smoke', '--workdir', str(tmp_path / 'w'),
                f'--config.data.train={bad}', timeout=120)
  assert out.returncode == 2, out.stderr[-2000:]
  lines = out.stderr.strip().splitlines()
  assert not any('Traceback' in x for x in lines)
  assert re.search(message, lines[-1]), lines[-1]
