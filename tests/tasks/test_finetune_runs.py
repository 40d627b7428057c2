"""Fine-tuning end to end: smoke experiments train, evaluate, keep the best step and load."""

import json
import os
import re
import subprocess
import sys

import pytest

import encoder
from encoder import configs
from encoder.train.trainer import train_and_evaluate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _train(exp: str, workdir, *overrides: str) -> dict:
  config = configs.load_experiment(exp)
  configs.apply_overrides(config, ['model.dropout_rate=0.0', *overrides])
  return train_and_evaluate(config, str(workdir))


def _lines(path) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f]


def test_mnli_smoke_pairs_two_eval_sets_best_checkpoint_and_classify(tmp_path):
  metrics = _train('classify_mnli:smoke', tmp_path)
  assert set(metrics) == {'accuracy', 'mcc', 'accuracy_nli_eval1', 'mcc_nli_eval1',
                          'baseline_accuracy', 'baseline_accuracy_nli_eval1'}
  saved = json.load(open(tmp_path / 'config.json'))
  assert saved['train']['num_steps'] == 6  # 1 epoch of 48 examples at batch 8
  assert saved['train']['warmup_steps'] == 1 and saved['data']['num_labels'] == 3
  evals = [r for r in _lines(tmp_path / 'metrics.jsonl') if r['split'] == 'eval']
  assert [r['step'] for r in evals] == [3, 6]
  best = json.load(open(tmp_path / 'best.json'))
  top = max(evals, key=lambda r: (r['accuracy'], r['step']))
  assert best['step'] == top['step'] and best['value'] == top['accuracy']
  assert os.path.isdir(tmp_path / 'checkpoints' / str(best['step']))
  rows = _lines(tmp_path / 'predictions' / 'eval_step6.jsonl')
  assert len(rows) == 16 and set(rows[0]) == {'text', 'gold', 'prediction', 'probability'}
  assert len(rows[0]['text']) == 2 and rows[0]['gold'] in ('entailment', 'neutral',
                                                           'contradiction')
  correct = sum(r['gold'] == r['prediction'] for r in rows)
  assert correct / 16 == pytest.approx(evals[-1]['accuracy'])
  model = encoder.load(str(tmp_path))
  out = model.classify([(rows[0]['text'][0], rows[0]['text'][1]), ('a', 'b')])
  assert out[0]['label'] == rows[0]['prediction']
  assert out[0]['probabilities'][out[0]['label']] == pytest.approx(rows[0]['probability'], abs=1e-4)
  assert sum(out[1]['probabilities'].values()) == pytest.approx(1.0, abs=1e-5)


def test_ner_smoke_learns_entities_and_tags_words(tmp_path):
  metrics = _train('ner_conll2003:smoke', tmp_path, 'train.num_epochs=4', 'train.eval_every=24',
                   'train.checkpoint_every=24')
  assert {'f1', 'precision', 'recall', 'f1_PER', 'f1_LOC', 'f1_ORG'} <= set(metrics)
  assert metrics['f1'] > 0.5  # the entities follow word cues a tiny model can pick up
  rows = _lines(tmp_path / 'predictions' / 'eval_step24.jsonl')
  assert rows[0]['words'][1] == 'visited' and rows[0]['gold'][:2] == ['B-PER', 'O']
  model = encoder.load(str(tmp_path))
  out = model.tag([rows[0]['text'], ['Elena', 'visited']])
  assert out[0]['tags'] == rows[0]['prediction']
  assert out[1]['words'] == ['Elena', 'visited'] and len(out[1]['tags']) == 2
  for entity in out[0]['entities']:
    assert entity['text'] == ' '.join(out[0]['words'][entity['start']:entity['end']])


@pytest.mark.parametrize('exp,extra,message', [
    ('ner_conll2003:smoke', 'data.train={bad}', r'bad.txt:2: 2 column\(s\)'),
    ('ner_conll2003:smoke', 'data.tag_column=1', r"column 1 holds one value \('NNP'\) on every"),
    ('classify_sst2:smoke', 'data.text_columns=review', "no column 'review'"),
    ('classify_mrpc:smoke', 'data.labels=a,b', "label 'different' is not in the label set"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, exp, extra, message):
  bad = tmp_path / 'bad.txt'
  bad.write_text('EU NNP B-ORG\nrejects O\n')
  out = subprocess.run([sys.executable, os.path.join(ROOT, 'launch.py'), '--exp', exp,
                        '--workdir', str(tmp_path / 'w'), '--config.' + extra.format(bad=bad)],
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 2, out.stderr[-2000:]
  lines = out.stderr.strip().splitlines()
  assert lines[-1].startswith('error: ') and len([x for x in lines if 'Traceback' in x]) == 0
  assert re.search(message, lines[-1])


def test_a_token_tag_zero_file_trains_on_its_tags_and_glue_files_need_no_columns(tmp_path):
  # CoNLL-2003 copies often read `token TAG 0`: the last column is no tag. The tags are found
  # (the run would otherwise learn the constant 0 and report accuracy 1.0).
  from encoder.tasks import classification, tagging
  from experiments import _smoke_data
  config = configs.load_experiment('ner_conll2003:smoke')
  smoke = _smoke_data.smoke_files('ner', 1)[0]
  lines = [' '.join([*line.split()[:1], line.split()[-1], '0']) if line.split() and
           not line.startswith('-DOCSTART-') else line
           for line in open(smoke, encoding='utf-8').read().splitlines()]
  zero = tmp_path / 'ner.txt'
  zero.write_text('\n'.join(lines) + '\n')
  sentences = tagging._read(config, str(zero), True, train=True)
  assert {t for s in sentences for t in s.tags} == {'O', 'B-PER', 'B-LOC', 'B-ORG', 'I-ORG'}
  # classify_sst2 on GLUE-style local files: no data.text_columns needed.
  config = configs.load_experiment('classify_sst2:smoke')
  config.data.text_columns = ''
  examples, _ = classification._read(config, config.data.train, True, [])
  assert len(examples) == 48 and all(len(e.texts) == 1 for e in examples)

