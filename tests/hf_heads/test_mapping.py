"""Fine-tuned heads to Hugging Face and back without torch: bitwise parameter round trips of
every head of both families, the label fields, the converted workdir's config, and the
one-line refusals of what a Hugging Face class cannot hold."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import encoder
from encoder.convert import main as convert_main
from encoder.hf import bert, heads, modernbert
from encoder.modules.config import model_config
from tests.golden.smoke import ROOT
from tests.hf_heads.helpers import KINDS, TEXTS, fields, fine_tuned_workdir, random_params

FAMILIES = {'bert': bert.FAMILY, 'modern': modernbert.FAMILY}
CASES = [(a, k) for a in FAMILIES for k in KINDS]


def convert(*args) -> None:
  assert convert_main([str(a) for a in args]) == 0


def leaves(tree: dict) -> dict:
  return {'/'.join(k.key for k in path): np.asarray(v)
          for path, v in jax.tree_util.tree_flatten_with_path(tree)[0]}


def without_unused_pooler(arch: str, task: str, flat: dict) -> dict:
  """BERT's token and QA classes have no pooler (add_pooling_layer=False): ours, unread by
  those heads, does not go out."""
  if arch == 'bert' and task != 'classification':
    return {k: v for k, v in flat.items() if not k.startswith('encoder/pooler/')}
  return flat


@pytest.mark.parametrize('arch, kind, changes', [(a, k, {}) for a, k in CASES] + [
    ('modern', 'classification', {'use_bias': True}), ('modern', 'span_qa', {'use_bias': True})])
def test_params_round_trip_bitwise(arch, kind, changes):
  task, _, num_labels = KINDS[kind]
  model = fields(arch, **changes)
  params = random_params(task, model, num_labels)
  family = FAMILIES[arch]
  tensors, architecture = family.ours_to_hf(params, model_config(model), task)
  assert architecture == family.head_architectures[task]
  back, absent = family.hf_to_ours(tensors, model, task)
  expected = without_unused_pooler(arch, task, leaves(params))
  got = leaves(back)
  assert sorted(got) == sorted(expected)
  for name, value in expected.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)
  assert ('pooler' in absent) == (arch == 'bert' and task != 'classification')
  assert all(v.dtype == np.float32 and v.flags.c_contiguous for v in tensors.values())


@pytest.mark.parametrize('kind', list(KINDS))
def test_label_fields_round_trip(kind):
  task, names, num_labels = KINDS[kind]
  hf = json.loads(json.dumps(heads.hf_label_fields(task, names, num_labels)))  # string ids
  assert heads.labels_from_hf(hf, task) == (names, num_labels)
  assert hf.get('problem_type') == {'classification': 'single_label_classification',
                                    'regression': 'regression'}.get(kind)


def test_standardised_regression_scale_is_folded_into_the_export():
  params = random_params('classification', fields('bert'), 1)
  folded = heads.fold_target_scale(params, {'target_mean': 3.0, 'target_std': 2.0})
  dense, new = params['classifier']['dense'], folded['classifier']['dense']
  x = np.ones((1, dense['kernel'].shape[0]), np.float32)
  np.testing.assert_allclose(x @ new['kernel'] + new['bias'],
                             3.0 + 2.0 * (x @ dense['kernel'] + dense['bias']), rtol=1e-6)
  assert heads.fold_target_scale(params, {'target_mean': None, 'target_std': None}) is params


@pytest.fixture(scope='module')
def exported(tmp_path_factory):
  """`exported(arch, kind)`: (our fine-tuned workdir, its --to-hf directory), made once."""
  done = {}

  def get(arch: str, kind: str, **changes) -> tuple[str, str]:
    key = (arch, kind, tuple(sorted(changes.items())))
    if key not in done:
      base = tmp_path_factory.mktemp(f'{arch}_{kind}')
      work = fine_tuned_workdir(str(base / 'run'), arch, kind, **changes)
      convert('--to-hf', work, '--out', base / 'hf')
      done[key] = work, str(base / 'hf')
    return done[key]
  return get


@pytest.mark.parametrize('arch, kind', [('bert', 'classification'), ('modern', 'tagging'),
                                        ('bert', 'span_qa'), ('modern', 'regression')])
def test_cli_round_trip_keeps_task_labels_and_predictions(exported, tmp_path, arch, kind):
  work, hf_dir = exported(arch, kind)
  task, names, num_labels = KINDS[kind]
  hf = json.load(open(os.path.join(hf_dir, 'config.json')))
  assert hf['architectures'] == [FAMILIES[arch].head_architectures[task]]
  assert hf['num_labels'] == num_labels
  assert [hf['id2label'][str(i)] for i in range(num_labels)] == (
      names or [f'LABEL_{i}' for i in range(num_labels)])
  back = tmp_path / 'back'
  convert('--from-hf', hf_dir, '--out', back)
  original, imported = encoder.load(work), encoder.load(str(back))
  saved = imported.config
  assert saved['task'] == task and saved['init_from'] == ''
  assert saved['data']['labels'] == (','.join(names) if names else None)
  assert saved['data']['num_labels'] == (None if task == 'span_qa' else num_labels)
  expected = without_unused_pooler(arch, task, leaves(original.params))
  got = leaves(imported.params)
  for name, value in expected.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)
  if task == 'classification':
    assert imported.classify(TEXTS) == original.classify(TEXTS)
  elif task == 'tagging':
    assert imported.tag(['Paris is in France']) == original.tag(['Paris is in France'])
  else:
    question, context = 'Who visited Oslo?', 'Alice visited Oslo for Acme Inc. in spring.'
    assert imported.answer(question, context) == original.answer(question, context)


def _refused(capsys, *args) -> str:
  assert convert_main([str(a) for a in args]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith('error: ') and '\n' not in err, err
  return err


@pytest.mark.parametrize('arch, changes, field, hint', [
    # A sentence-transformers import's heads pool by mean unless told: the refusal says how
    # to fine-tune one that exports (BERT's classifier reads the pooled [CLS]).
    ('bert', {'pooling': 'mean'}, 'model.pooling=mean',
     'a run fine-tuned with --config.model.pooling=cls exports'),
    ('bert', {'pooler': 'none'}, 'model.pooler=none', None),
    ('modern', {'classifier_head': 'linear'}, "model.classifier_head='linear'", None)])
def test_to_hf_refuses_a_head_the_class_cannot_hold(tmp_path, capsys, arch, changes, field,
                                                    hint):
  work = fine_tuned_workdir(str(tmp_path / 'run'), arch, 'classification', **changes)
  err = _refused(capsys, '--to-hf', work, '--out', tmp_path / 'hf')
  assert field in err and 'does not convert' in err, err
  assert hint is None or hint in err, err
  assert not (tmp_path / 'hf').exists()


def test_bert_token_head_without_a_pooler_exports(exported):
  _, hf_dir = exported('bert', 'tagging', pooler='none')
  hf = json.load(open(os.path.join(hf_dir, 'config.json')))
  assert hf['architectures'] == ['BertForTokenClassification']


@pytest.mark.parametrize('arch, kind, changes, field', [
    ('bert', 'classification', {'problem_type': 'multi_label_classification'}, 'problem_type'),
    ('bert', 'classification', {'id2label': {'0': 'a,b', '1': 'c', '2': 'd'}}, "'a,b'"),
    ('modern', 'classification', {'id2label': {'0': 'a', '2': 'c'}}, 'id2label'),
    ('modern', 'span_qa', {'id2label': {'0': 'a', '1': 'b', '2': 'c'}}, 'num_labels=3'),
    ('bert', 'regression', {'id2label': {'0': 'a', '1': 'b'}}, "problem_type='regression'"),
    # labels that contradict the head's weights
    ('bert', 'classification', {'id2label': {'0': 'a', '1': 'b'}}, 'classifier/dense/bias')])
def test_from_hf_refuses_labels_our_heads_cannot_serve(exported, tmp_path, capsys, arch, kind,
                                                       changes, field):
  _, hf_dir = exported(arch, kind)
  copy = tmp_path / 'hf'
  os.makedirs(copy)
  for name in os.listdir(hf_dir):
    with open(os.path.join(hf_dir, name), 'rb') as src, open(copy / name, 'wb') as dst:
      dst.write(src.read())
  config = json.load(open(copy / 'config.json'))
  config.update(changes)
  config.pop('num_labels')  # transformers 5 derives it from id2label
  json.dump(config, open(copy / 'config.json', 'w'))
  err = _refused(capsys, '--from-hf', copy, '--out', tmp_path / 'out')
  assert field in err, err
  assert not (tmp_path / 'out').exists()


@pytest.mark.slow
def test_init_from_a_converted_fine_tuned_model_trains(exported, tmp_path):
  """A smoke fine-tuning run starts from the imported model's encoder; its own 2-label head
  replaces the imported 3-label one (~15 s)."""
  _, hf_dir = exported('bert', 'classification')
  convert('--from-hf', hf_dir, '--out', tmp_path / 'imported')
  env = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=1'}
  result = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'launch.py'), '--exp', 'classify_sst2:smoke',
       '--workdir', str(tmp_path / 'run'), f'--config.init_from={tmp_path / "imported"}',
       '--config.train.num_steps=2'], capture_output=True, text=True, env=env, cwd=ROOT)
  assert result.returncode == 0, result.stderr[-2000:]
  assert 'freshly initialised: classifier/dense/bias, classifier/dense/kernel' in result.stderr
  assert encoder.load(str(tmp_path / 'run')).classify('A fine film.')['label'] in ('0', '1')
