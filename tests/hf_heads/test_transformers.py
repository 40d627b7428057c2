"""Fine-tuned heads against transformers (a reference, never a requirement: skipped without
torch): our exported runs load in AutoModelFor<Task> with no missing or unexpected weights and
give our logits; Hugging Face fine-tuned models built here import and classify, tag and answer
as transformers does."""

import os
import shutil

import numpy as np
import pytest

import encoder
from encoder.convert import main as convert_main
from encoder.data.finetune.finetuning_data import encode_words
from encoder.inference.answer import span_logits
from encoder.inference.classify import classify_logits
from encoder.inference.fine_tuned import softmax
from encoder.inference.tag import tag_logits
from tests.hf_heads.helpers import DIRS, KINDS, TEXTS, WORDS, fine_tuned_workdir

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')

ATOL = 1e-5
AUTO = {'classification': 'AutoModelForSequenceClassification',
        'tagging': 'AutoModelForTokenClassification', 'span_qa': 'AutoModelForQuestionAnswering'}
# The ModernBERT classifier pools by mean here: the route classifier_pooling takes.
CHANGES = {('modern', 'classification'): {'pooling': 'mean'}}


def convert(*args) -> None:
  assert convert_main([str(a) for a in args]) == 0


def hf_outputs(hf, arch: str, ids, segments, mask) -> dict:
  inputs = {'input_ids': torch.from_numpy(np.asarray(ids, np.int64)),
            'attention_mask': torch.from_numpy(np.asarray(mask, np.int64))}
  if arch == 'bert':
    inputs['token_type_ids'] = torch.from_numpy(np.asarray(segments, np.int64))
  with torch.no_grad():
    out = hf(**inputs)
  return {k: v.numpy() for k, v in out.items()}


def assert_close(ours, theirs, real=None, what=''):
  if real is not None:  # our span logits are -1e9 at padding; HF's are not masked
    ours, theirs = ours[real], theirs[real]
  diff = np.abs(ours - theirs).max()
  assert diff < ATOL, f'{what}: max abs diff {diff:.2e}'


def hf_arrays(model, kind: str) -> dict:
  """Real text through our tokenizer, cut to the rows' bucket: what both models read."""
  if kind == 'tagging':
    arrays, _ = encode_words(model.tokenizer, WORDS, model.config['data']['max_seq_length'])
  else:
    ids, seg, mask = model.tokenize(TEXTS, model.config['data']['max_seq_length'])
    arrays = {'input_ids': ids, 'segment_ids': seg, 'input_mask': mask}
  width = int(arrays['input_mask'].sum(1).max())
  return {k: np.asarray(arrays[k])[:, :width] for k in ('input_ids', 'segment_ids', 'input_mask')}


CASES = [pytest.param(a, k, marks=[pytest.mark.slow] if k == 'regression' else [], id=f'{a}-{k}')
         for a in DIRS for k in KINDS]


@pytest.mark.parametrize('arch, kind', CASES)
def test_export_loads_in_transformers_and_gives_our_logits(tmp_path, arch, kind):
  task, names, num_labels = KINDS[kind]
  work = fine_tuned_workdir(str(tmp_path / 'run'), arch, kind, **CHANGES.get((arch, kind), {}))
  convert('--to-hf', work, '--out', tmp_path / 'hf')
  hf, info = getattr(transformers, AUTO[task]).from_pretrained(
      str(tmp_path / 'hf'), output_loading_info=True, attn_implementation='eager')
  assert not any(info.values()), info  # no missing, unexpected or mismatched weights
  assert type(hf).__name__ == ('Bert' if arch == 'bert' else 'ModernBert') + {
      'classification': 'ForSequenceClassification', 'tagging': 'ForTokenClassification',
      'span_qa': 'ForQuestionAnswering'}[task]
  assert hf.config.num_labels == num_labels
  if names:
    assert [hf.config.id2label[i] for i in range(num_labels)] == names
  hf.eval()
  model = encoder.load(work)
  a = hf_arrays(model, kind)
  theirs = hf_outputs(hf, arch, a['input_ids'], a['segment_ids'], a['input_mask'])
  if task == 'classification':
    assert hf.config.problem_type == ('regression' if num_labels == 1 else
                                      'single_label_classification')
    assert_close(classify_logits(model, TEXTS), theirs['logits'], what='logits')
    out = model.classify(TEXTS)
    if names:
      probs = softmax(theirs['logits'])
      assert [o['label'] for o in out] == [names[i] for i in probs.argmax(-1)]
      assert_close(np.array([[o['probabilities'][n] for n in names] for o in out]), probs,
                   what='probabilities')
    else:
      assert_close(np.array([o['score'] for o in out]), theirs['logits'][:, 0], what='scores')
  elif task == 'tagging':
    logits, _, mask = tag_logits(model, WORDS)
    width = a['input_ids'].shape[1]
    assert_close(logits[:, :width], theirs['logits'], mask[:, :width] > 0, 'token logits')
  else:
    start, end = span_logits(model, a)
    real = a['input_mask'] > 0
    assert_close(start, theirs['start_logits'], real, 'start logits')
    assert_close(end, theirs['end_logits'], real, 'end logits')


def hf_fine_tuned(directory: str, arch: str, task: str, names: list[str] | None,
                  **config_changes):
  """A random Hugging Face model of `task` on the tiny config of `arch` (noise on every
  parameter), saved with its tokenizer files."""
  kwargs = dict(config_changes)
  if names:
    kwargs.update(id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
  config = transformers.AutoConfig.from_pretrained(DIRS[arch], attn_implementation='eager',
                                                   **kwargs)
  torch.manual_seed(0)
  hf = getattr(transformers, AUTO[task]).from_config(config).eval()
  with torch.no_grad():
    for p in hf.parameters():
      p.add_(0.1 * torch.randn_like(p))
  hf.save_pretrained(directory)
  for name in ('vocab.txt', 'tokenizer_config.json', 'tokenizer.json'):
    if os.path.exists(os.path.join(DIRS[arch], name)):
      shutil.copy(os.path.join(DIRS[arch], name), directory)
  return hf


IMPORTS = [('bert', 'classification', {}), ('modern', 'classification',
                                            {'classifier_pooling': 'mean'}),
           ('bert', 'tagging', {}), ('modern', 'span_qa', {})]


@pytest.mark.parametrize('arch, kind, changes', IMPORTS, ids=[f'{a}-{k}' for a, k, _ in IMPORTS])
def test_hf_fine_tuned_model_imports_with_its_head(tmp_path, arch, kind, changes):
  task, names, _ = KINDS[kind]
  hf = hf_fine_tuned(str(tmp_path / 'hf'), arch, task, names, **changes)
  convert('--from-hf', tmp_path / 'hf', '--out', tmp_path / 'work')
  model = encoder.load(str(tmp_path / 'work'))
  assert model.config['task'] == task
  if changes.get('classifier_pooling'):
    assert model.model_config.pooling == changes['classifier_pooling']
  a = hf_arrays(model, kind)
  theirs = hf_outputs(hf, arch, a['input_ids'], a['segment_ids'], a['input_mask'])
  if task == 'classification':
    probs = softmax(theirs['logits'])
    out = model.classify(TEXTS)
    assert [o['label'] for o in out] == [hf.config.id2label[int(i)] for i in probs.argmax(-1)]
    assert_close(np.array([[o['probabilities'][n] for n in names] for o in out]), probs,
                 what='probabilities')
  elif task == 'tagging':
    _, positions = encode_words(model.tokenizer, WORDS, model.config['data']['max_seq_length'])
    expected = [[names[int(i)] for i in row[pos].argmax(-1)]
                for row, pos in zip(theirs['logits'], positions, strict=True)]
    assert [o['tags'] for o in model.tag(WORDS)] == expected
  else:
    start, end = span_logits(model, a)
    real = a['input_mask'] > 0
    assert_close(start, theirs['start_logits'], real, 'start logits')
    assert_close(end, theirs['end_logits'], real, 'end logits')
