"""Conversion from and to Hugging Face ModernBERT: forward parity with transformers (golden
arrays from tests/golden/make_modernbert_golden.py, and live when torch is installed, on
models built here), bitwise round trips, one-line refusals of what we do not reproduce."""

import json
import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file

import encoder
from encoder.convert import main as convert_main
from encoder.errors import CheckpointError
from encoder.hf import modernbert
from tests.golden.smoke import GOLDEN

TINY = os.path.join(GOLDEN, 'tiny_modernbert')
# float32 on CPU; the golden values were computed by torch (eager attention).
ATOL = 1e-5


def convert(*args) -> None:
  assert convert_main(list(args)) == 0


@pytest.fixture(scope='module')
def tiny(tmp_path_factory) -> str:
  out = str(tmp_path_factory.mktemp('tiny_modernbert') / 'work')
  convert('--from-hf', TINY, '--out', out)
  return out


def our_outputs(workdir: str, ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Last hidden state and MLM logits at every position of our converted model."""
  model = encoder.load(workdir)
  sequence = model.encode(input_ids=ids, input_mask=mask).sequence_output
  positions = np.tile(np.arange(ids.shape[1], dtype=np.int32), (ids.shape[0], 1))
  logits = model._mlm(model._device_params, ids, np.zeros_like(ids), mask, positions)
  return np.asarray(sequence), np.asarray(logits)


def assert_close(ours, theirs, mask, what):
  real = mask.astype(bool)  # padding positions are never read
  diff = np.abs(ours - theirs)[real]
  rel = diff / np.maximum(np.abs(theirs[real]), 1e-6)
  assert diff.max() < ATOL, f'{what}: max abs diff {diff.max():.2e}, max rel {rel.max():.2e}'
  return diff.max()


def test_tiny_modernbert_matches_transformers_golden(tiny):
  golden = np.load(os.path.join(GOLDEN, 'tiny_modernbert.npz'))
  ids, mask = golden['input_ids'], golden['attention_mask']
  assert ids.shape[1] > 8 and mask.min() == 0  # longer than the window; padding in the batch
  hidden, logits = our_outputs(tiny, ids, mask)
  assert_close(hidden, golden['last_hidden_state'], mask, 'last hidden state')
  assert_close(logits, golden['logits'], mask, 'MLM logits')


def test_converted_config_states_modernberts_architecture(tiny):
  cfg = encoder.load(tiny).model_config
  assert (cfg.norm, cfg.position_embedding, cfg.activation, cfg.use_bias) == (
      'pre', 'rope', 'geglu', False)
  assert [cfg.is_local(i) for i in range(4)] == [False, True, True, False]
  assert (cfg.local_window, cfg.rope_theta, cfg.local_rope_theta) == (8, 160_000.0, 10_000.0)


def test_round_trip_is_bitwise(tiny, tmp_path):
  out = str(tmp_path / 'hf')
  convert('--to-hf', tiny, '--out', out)
  original = load_file(os.path.join(TINY, 'model.safetensors'))
  written = load_file(os.path.join(out, 'model.safetensors'))
  original.pop('decoder.weight', None)  # tied to the embeddings: transformers omits it too
  assert sorted(written) == sorted(original)
  for name, value in original.items():
    np.testing.assert_array_equal(written[name], value, err_msg=name)
  hf = json.load(open(os.path.join(out, 'config.json')))
  source = json.load(open(os.path.join(TINY, 'config.json')))
  for key in ('layer_types', 'rope_parameters', 'local_attention', 'hidden_activation',
              'norm_eps', 'vocab_size', 'pad_token_id', 'cls_token_id', 'sep_token_id'):
    assert hf[key] == source[key], key
  with open(os.path.join(out, 'tokenizer.json')) as a:
    with open(os.path.join(TINY, 'tokenizer.json')) as b:
      assert a.read() == b.read()


def test_converted_tokenizer_is_the_byte_level_bpe(tiny):
  model = encoder.load(tiny)
  text = 'The bank approved the loan.'
  from tokenizers import Tokenizer
  reference = Tokenizer.from_file(os.path.join(TINY, 'tokenizer.json'))
  assert model.tokenizer.encode(text) == reference.encode(text, add_special_tokens=False).ids
  assert model.tokenizer.decode(model.tokenizer.encode(text)) == text


def _hf_dir_with(tmp_path, **changes) -> str:
  directory = tmp_path / 'hf'
  shutil.copytree(TINY, directory)
  config = json.load(open(directory / 'config.json'))
  for key, value in changes.items():
    if value is None:
      config.pop(key, None)
    else:
      config[key] = value
  json.dump(config, open(directory / 'config.json', 'w'))
  return str(directory)


@pytest.mark.parametrize('changes, field', [
    ({'rope_parameters': {'full_attention': {'rope_type': 'yarn', 'rope_theta': 1e4,
                                             'factor': 4.0}}},
     'rope_parameters.full_attention.rope_type'),
    ({'rope_scaling': {'rope_type': 'linear', 'factor': 2.0}}, 'rope_scaling'),
    ({'hidden_activation': 'relu'}, 'hidden_activation'),
    ({'mlp_bias': True}, 'mlp_bias'),
    ({'layer_types': ['full_attention', 'full_attention', 'sliding_attention',
                      'full_attention']}, 'layer_types'),
    ({'decoder_bias': False}, 'decoder_bias'),
    ({'model_type': 'deberta-v2'}, "model_type 'deberta-v2'"),
    # JSON of the wrong type, refused like any other value
    ({'layer_types': None, 'global_attn_every_n_layers': 0}, 'global_attn_every_n_layers'),
    ({'rope_parameters': ['default']}, 'rope_parameters'),
    ({'hidden_activation': ['gelu']}, 'hidden_activation'),
])
def test_from_hf_refuses_what_we_do_not_reproduce(tmp_path, changes, field, capsys):
  hf_dir = _hf_dir_with(tmp_path, **changes)
  out = tmp_path / 'out'
  assert convert_main(['--from-hf', hf_dir, '--out', str(out)]) == 2
  err = capsys.readouterr().err.strip()
  assert err.count('\n') == 0 and err.startswith('error: ') and field in err, err
  assert not out.exists()


def test_older_configs_with_global_attn_every_n_layers_convert():
  fields = modernbert.FAMILY.model_fields({
      'model_type': 'modernbert', 'hidden_size': 64, 'num_attention_heads': 4,
      'num_hidden_layers': 7, 'intermediate_size': 96, 'vocab_size': 100,
      'global_attn_every_n_layers': 3, 'local_attention': 128, 'global_rope_theta': 1e5})
  assert (fields['local_window'], fields['global_every'], fields['rope_theta'],
          fields['local_rope_theta']) == (128, 3, 1e5, 1e4)


def test_window_fields_find_the_pattern_or_refuse():
  local, full = 'sliding_attention', 'full_attention'
  assert modernbert.window_fields([full] * 3, 128) == {'local_window': 0, 'global_every': 1}
  assert modernbert.window_fields([local] * 3, 64) == {'local_window': 64, 'global_every': 0}
  assert modernbert.window_fields([full, local, full, local], 8)['global_every'] == 2
  with pytest.raises(CheckpointError, match='layer_types'):
    modernbert.window_fields([local, full, full], 8)


@pytest.mark.parametrize('changes', [
    {},  # ModernBERT's defaults: no biases, GeGLU, a global layer every 3
    {'attention_bias': True, 'mlp_bias': True, 'norm_bias': True, 'classifier_bias': True,
     'hidden_activation': 'silu', 'global_attn_every_n_layers': 2, 'local_attention': 4},
])
def test_live_parity_and_export_load_in_transformers(tmp_path, changes):
  """A random ModernBERT built here in torch, converted, compared; exported back, reloaded by
  transformers' ModernBertForMaskedLM, compared again."""
  torch = pytest.importorskip('torch')
  transformers = pytest.importorskip('transformers')
  from tests.golden import make_modernbert_golden as make
  tok = make.train_tokenizer()
  model = make.random_model(make.tiny_config(tok, **changes), seed=1)
  hf_dir, work, back = (str(tmp_path / n) for n in ('hf', 'work', 'back'))
  model.save_pretrained(hf_dir, safe_serialization=True)
  tok.save(os.path.join(hf_dir, 'tokenizer.json'))
  batch = make.encode(tok, make.BATCH)
  theirs = make.outputs(model, batch)
  convert('--from-hf', hf_dir, '--out', work)
  hidden, logits = our_outputs(work, batch['input_ids'], batch['attention_mask'])
  mask = batch['attention_mask']
  assert_close(hidden, theirs['last_hidden_state'], mask, 'last hidden state')
  assert_close(logits, theirs['logits'], mask, 'MLM logits')
  convert('--to-hf', work, '--out', back)
  reloaded = transformers.ModernBertForMaskedLM.from_pretrained(
      back, attn_implementation='eager').eval()
  again = make.outputs(reloaded, batch)
  for key in ('last_hidden_state', 'logits'):
    np.testing.assert_array_equal(again[key], theirs[key])
  assert torch.equal(reloaded.decoder.weight, reloaded.model.embeddings.tok_embeddings.weight)
