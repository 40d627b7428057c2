"""`encoder.load(run).classify/tag/answer` give what the trainer's evaluation gave.

Each run fine-tunes a tiny model for a few steps on the smoke files, evaluating and saving a
checkpoint at its last step; the trainer's eval predictions of that step (the arrays its
`task.evaluate` receives, and the records it writes) are the reference, and the loaded
checkpoint must reproduce them: logits to float32 rounding (the eval batches are padded to
data.max_seq_length, inference batches to a shorter bucket), labels, tags and answer spans
exactly. Two models: BERT-tiny (tanh pooler on [CLS], one dense head) and modern_tiny with
mean pooling, no pooler and the dense -> GELU -> norm -> dense head.
"""

import json
import os

import numpy as np
import pytest

import encoder
from encoder import configs
from encoder.inference.answer import span_logits
from encoder.inference.classify import classify_logits
from encoder.inference.fine_tuned import softmax
from encoder.inference.tag import tag_logits
from encoder.modules.task_models import MASKED_LOGIT
from encoder.tasks import get_task
from encoder.train.trainer import train_and_evaluate

STEPS = 4
EXPERIMENTS = {'classification': 'classify_sst2:smoke', 'regression': 'classify_stsb:smoke',
               'tagging': 'ner_conll2003:smoke', 'span_qa': 'qa_squad:smoke'}
# The modern runs also standardise regression targets: the head's output scale must reach
# inference from config.json.
MODELS = {'bert': (), 'modern': ('model.size=modern_tiny', 'model.pooling=mean',
                                 'data.standardize_targets=true')}
# BERT's runs are slow-marked: its head (one dense layer on the tanh pooler) is also checked
# against the eval records by tests/tasks/test_finetune_runs.py in the default suite, and the
# eight runs together cost ~3 CPU minutes; the modern runs, whose head and pooling differ from
# BERT's, stay in the default suite.
RUNS = [pytest.param(m, t, marks=[pytest.mark.slow] if m == 'bert' else [], id=f'{m}-{t}')
        for m in MODELS for t in EXPERIMENTS]
ATOL = 1e-5


class Run:
  """A fine-tuned workdir, the trainer's eval predictions of its last step and its records."""

  def __init__(self, workdir: str, data, predictions: dict, records: list[dict]):
    self.workdir, self.data, self.predictions, self.records = (
        workdir, data, predictions, records)
    self.eval_set = data.eval_sets[0]
    self.model = encoder.load(workdir)


def _train(arch: str, kind: str, workdir: str) -> Run:
  config = configs.load_experiment(EXPERIMENTS[kind])
  configs.apply_overrides(config, [*MODELS[arch], f'train.num_steps={STEPS}',
                                   f'train.eval_every={STEPS}',
                                   f'train.checkpoint_every={STEPS}'])
  task = get_task(config.task)
  seen = []
  evaluate = task.evaluate

  def capture(data, predictions):
    seen.append((data, predictions))
    return evaluate(data, predictions)

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(task, 'evaluate', capture)
    train_and_evaluate(config, workdir)
  saved = json.load(open(os.path.join(workdir, 'config.json')))
  if arch == 'modern':  # the head and pooling this test is about
    assert {k: saved['model'][k] for k in ('pooling', 'pooler', 'classifier_head')} == {
        'pooling': 'mean', 'pooler': 'none', 'classifier_head': 'mlp'}
    if kind == 'regression':
      assert saved['data']['target_std'] > 0 and saved['data']['target_std'] != 1.0
  steps = [int(d) for d in os.listdir(os.path.join(workdir, 'checkpoints')) if d.isdigit()]
  assert max(steps) == STEPS  # encoder.load reads the step the predictions are of
  with open(os.path.join(workdir, 'predictions', f'eval_step{STEPS}.jsonl')) as f:
    records = [json.loads(line) for line in f]
  data, predictions = seen[-1]
  return Run(workdir, data, predictions, records)


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  """`runs(arch, kind)`: the module's fine-tuned runs, each trained once on first use."""
  done = {}

  def get(arch: str, kind: str) -> Run:
    if (arch, kind) not in done:
      workdir = str(tmp_path_factory.mktemp(f'{arch}_{kind}') / 'run')
      done[arch, kind] = _train(arch, kind, workdir)
    return done[arch, kind]
  return get


def _real(run: Run, width: int) -> np.ndarray:
  return run.eval_set.arrays['input_mask'][:, :width] > 0


@pytest.mark.parametrize('arch, kind', RUNS)
def test_logits_equal_the_trainers_eval_predictions(runs, arch, kind):
  run = runs(arch, kind)
  s, got, model = run.eval_set, run.predictions, run.model
  task = model.config['task']
  n = len(s.examples)
  if task == 'classification':
    logits = classify_logits(model, [tuple(e.texts) if len(e.texts) > 1 else e.texts[0]
                                     for e in s.examples])
    np.testing.assert_allclose(logits, got['logits'][:n], atol=ATOL, rtol=ATOL)
  elif task == 'tagging':
    logits, positions, mask = tag_logits(model, [e.words for e in s.examples])
    width = logits.shape[1]
    np.testing.assert_array_equal(mask, _real(run, width))
    real = _real(run, width)  # every real token's tag, sub-tokens and [CLS]/[SEP] included
    np.testing.assert_array_equal(logits.argmax(-1)[real], got['tags'][:n, :width][real])
    assert [list(p) for p in positions] == [list(p) for p in s.extra]
  else:
    start, end = span_logits(model, s.arrays)
    width = start.shape[1]
    for mine, theirs in ((start, got['start_logits']), (end, got['end_logits'])):
      np.testing.assert_allclose(mine, theirs[:, :width], atol=ATOL, rtol=ATOL)
      assert (theirs[:, width:] == MASKED_LOGIT).all()  # the columns inference leaves out


@pytest.mark.parametrize('arch, kind', RUNS)
def test_classify_tag_answer_equal_the_trainers_eval_records(runs, arch, kind):
  run = runs(arch, kind)
  s, records, model = run.eval_set, run.records, run.model
  task = model.config['task']
  assert len(records) == len(s.examples)
  if task == 'classification':
    out = model.classify([tuple(e.texts) if len(e.texts) > 1 else e.texts[0]
                          for e in s.examples])
    logits = run.predictions['logits'][:len(s.examples)]
    if model.config['data']['num_labels'] == 1:
      np.testing.assert_allclose([o['score'] for o in out], logits[:, 0], atol=ATOL, rtol=ATOL)
      np.testing.assert_allclose([o['score'] for o in out], [r['prediction'] for r in records],
                                 atol=ATOL, rtol=ATOL)
      return
    assert [o['label'] for o in out] == [r['prediction'] for r in records]
    names = model.config['data']['labels'].split(',')
    np.testing.assert_allclose([[o['probabilities'][k] for k in names] for o in out],
                               softmax(logits), atol=1e-6)
    np.testing.assert_allclose([o['probabilities'][o['label']] for o in out],
                               [r['probability'] for r in records], atol=1e-6)
  elif task == 'tagging':
    out = model.tag([e.words for e in s.examples])
    assert [o['tags'] for o in out] == [r['prediction'] for r in records]
  else:
    out = model.answer([e.question for e in s.examples], [e.context for e in s.examples])
    assert [o['text'] for o in out] == [r['prediction'] for r in records]
    assert [(o['start'], o['end']) for o in out] == [
        (r['start'], r['end']) if r['prediction'] else (None, None) for r in records]
    np.testing.assert_allclose([o['score'] for o in out], [r['score'] for r in records],
                               atol=1e-4)  # records round the score to 4 decimals
    # Records round the probability to 6 decimals (5e-7), and the two compiled graphs may
    # differ in the last float32 bits (6.5e-7 more, seen on a Zen 3 CPU).
    np.testing.assert_allclose([o['probability'] for o in out],
                               [r['probability'] for r in records], atol=2e-6)

