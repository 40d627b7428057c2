"""Conversion from and to Hugging Face ELECTRA: parity with transformers on random-weight models
built here (transformers and torch are references for these tests, not requirements), the
generator beside the discriminator, and the refusals."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import encoder
from encoder.convert import main as convert_main

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')

WORDS = ('the bank approved a loan quickly and slowly river money was is on of to in it '
         'for with as by at from this that he she they we you').split()
VOCAB = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', *WORDS, *(f'##{c}' for c in 'sedly')]
TEXTS = ['the bank approved a loan quickly', ('money was on the river', 'he is at the bank'),
         'they approved it']
# The discriminator embeds in 16 and projects to 32 (as ELECTRA-Small: 128 to 256); its
# generator is a quarter of its width (8, 1 head, MLP 9 = round(37 / 4)), over the same 16.
DISCRIMINATOR = dict(embedding_size=16, hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=37)
GENERATOR = dict(embedding_size=16, hidden_size=8, num_hidden_layers=2, num_attention_heads=1,
                 intermediate_size=9)


def _config(**shape):
  return transformers.ElectraConfig(vocab_size=len(VOCAB), max_position_embeddings=64,
                                    hidden_act='gelu', **shape)


def _perturbed(model, seed: int):
  """Random weights everywhere (LayerNorms included, which start at 1 and 0), so a mapping that
  swapped or dropped a tensor shows."""
  generator = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for p in model.parameters():
      p.add_(0.05 * torch.randn(p.shape, generator=generator))
  return model.eval()


def _save(model, directory) -> str:
  model.save_pretrained(str(directory), safe_serialization=True)
  (directory / 'vocab.txt').write_text('\n'.join(VOCAB) + '\n')
  (directory / 'tokenizer_config.json').write_text(json.dumps({'do_lower_case': True}))
  return str(directory)


@pytest.fixture(scope='module')
def hf(tmp_path_factory):
  """(discriminator, its directory, a generator sharing its embeddings and its directory, an
  untied generator's directory)."""
  root = tmp_path_factory.mktemp('electra')
  torch.manual_seed(0)
  discriminator = _perturbed(transformers.ElectraForPreTraining(_config(**DISCRIMINATOR)), 1)
  tied = _perturbed(transformers.ElectraForMaskedLM(_config(**GENERATOR)), 2)
  with torch.no_grad():  # trained sharing the discriminator's embeddings, as Google's were
    for name, p in tied.electra.embeddings.named_parameters():
      p.copy_(dict(discriminator.electra.embeddings.named_parameters())[name])
  untied = _perturbed(transformers.ElectraForMaskedLM(_config(**GENERATOR)), 3)
  return (discriminator, _save(discriminator, root / 'discriminator'), tied,
          _save(tied, root / 'generator'), _save(untied, root / 'untied'))


@pytest.fixture(scope='module')
def converted(hf, tmp_path_factory) -> str:
  out = str(tmp_path_factory.mktemp('work') / 'electra')
  assert convert_main(['--from-hf', hf[1], '--generator', hf[3], '--out', out]) == 0
  return out


def _hf_inputs(out) -> dict:
  return {'input_ids': torch.from_numpy(out.input_ids.astype(np.int64)),
          'attention_mask': torch.from_numpy(out.input_mask.astype(np.int64))}


def test_encode_matches_electra_model(hf, converted):
  model = encoder.load(converted)
  assert model.config['task'] == 'electra' and model.model_config.embedding_size == 16
  out = model.encode(TEXTS)
  segment_ids = model.tokenize(TEXTS)[1]
  assert segment_ids.any()  # a pair: the segment table is read too
  with torch.no_grad():
    expected = hf[0].electra(**_hf_inputs(out), token_type_ids=torch.from_numpy(
        segment_ids.astype(np.int64))).last_hidden_state.numpy()
  real = out.input_mask[..., None].astype(bool)
  assert np.abs(np.where(real, out.sequence_output - expected, 0.0)).max() < 1e-5


def test_to_hf_gives_the_same_logits(hf, converted, tmp_path):
  assert convert_main(['--to-hf', converted, '--out', str(tmp_path / 'hf')]) == 0
  exported = transformers.ElectraForPreTraining.from_pretrained(str(tmp_path / 'hf')).eval()
  ids = encoder.load(converted).encode(TEXTS)
  with torch.no_grad():
    want = hf[0](**_hf_inputs(ids)).logits.numpy()
    got = exported(**_hf_inputs(ids)).logits.numpy()
  assert np.abs(got - want).max() < 1e-5
  with open(tmp_path / 'hf' / 'config.json') as f:
    config = json.load(f)
  assert config['architectures'] == ['ElectraForPreTraining'] and config['embedding_size'] == 16


def test_fill_mask_runs_the_generator(hf, converted):
  model = encoder.load(converted)
  # The generator trained sharing the discriminator's embeddings is kept once.
  assert model.config['electra'] == {'generator_size': 0.25, 'discriminator_weight': 50.0,
                                     'embedding_sharing': 'shared'}
  assert 'embeddings' not in model.params['generator']
  text = 'the bank [MASK] a loan'
  top = model.fill_mask(text, top_k=3)[0]
  ids, segments, mask = model.tokenize([text])
  with torch.no_grad():
    logits = hf[2](input_ids=torch.from_numpy(ids.astype(np.int64)),
                   attention_mask=torch.from_numpy(mask.astype(np.int64))).logits
  position = int(np.flatnonzero(ids[0] == VOCAB.index('[MASK]'))[0])
  probs = torch.softmax(logits[0, position], -1).numpy()
  order = np.argsort(-probs)[:3]
  assert [token for token, _ in top] == [VOCAB[i] for i in order]
  np.testing.assert_allclose([p for _, p in top], probs[order], atol=1e-5)


def test_an_untied_generator_keeps_its_embeddings(hf, tmp_path):
  out = str(tmp_path / 'untied')
  assert convert_main(['--from-hf', hf[1], '--generator', hf[4], '--out', out]) == 0
  model = encoder.load(out)
  assert model.config['electra']['embedding_sharing'] == 'none'
  assert 'embeddings' in model.params['generator']
  assert len(model.fill_mask('the [MASK] is here', top_k=2)[0]) == 2


def _cli(*args) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, '-m', 'encoder.convert', *args], capture_output=True,
                        text=True, cwd=os.path.dirname(os.path.dirname(__file__)), check=False)


def test_a_generator_that_does_not_fit_is_refused_in_one_line(hf, tmp_path):
  wide = _save(transformers.ElectraForMaskedLM(_config(**{**GENERATOR, 'intermediate_size': 12})),
               tmp_path / 'wide')
  result = _cli('--from-hf', hf[1], '--generator', wide, '--out', str(tmp_path / 'work'))
  assert result.returncode == 2 and not (tmp_path / 'work').exists()
  assert result.stderr == ("error: --generator: its layers, hidden size, heads, MLP (2, 8, 1, 12) "
                           "does not fit the discriminator's generator ((2, 8, 1, 9))\n")


def test_a_token_classifier_converts_both_ways_with_its_head(tmp_path):
  torch.manual_seed(4)
  config = _config(**DISCRIMINATOR, num_labels=3, id2label={0: 'O', 1: 'B-X', 2: 'I-X'},
                   label2id={'O': 0, 'B-X': 1, 'I-X': 2})
  tagger = _perturbed(transformers.ElectraForTokenClassification(config), 5)
  work, back = str(tmp_path / 'work'), str(tmp_path / 'back')
  assert convert_main(['--from-hf', _save(tagger, tmp_path / 'tagger'), '--out', work]) == 0
  model = encoder.load(work)
  assert model.config['task'] == 'tagging' and model.config['data']['labels'] == 'O,B-X,I-X'
  assert convert_main(['--to-hf', work, '--out', back]) == 0  # factorized: ELECTRA's class
  exported = transformers.AutoModelForTokenClassification.from_pretrained(back).eval()
  assert type(exported).__name__ == 'ElectraForTokenClassification'
  inputs = _hf_inputs(model.encode(TEXTS))
  with torch.no_grad():
    np.testing.assert_allclose(exported(**inputs).logits.numpy(), tagger(**inputs).logits.numpy(),
                               atol=1e-5)
