"""encoder.load on a smoke-trained workdir and on converted Hugging Face checkpoints."""

import json
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import encoder
from encoder.convert import main as convert_main
from encoder.errors import CheckpointError, DataError
from encoder.inference.text import seq_bucket
from tests.golden import hf_numpy
from tests.golden.smoke import GOLDEN, ROOT, smoke_workdir

TINY = os.path.join(GOLDEN, 'tiny_bert')


@pytest.fixture(scope='module')
def workdir(tmp_path_factory) -> str:
  return smoke_workdir(tmp_path_factory)


@pytest.fixture(scope='module')
def model(workdir):
  return encoder.load(workdir)


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
  out = str(tmp_path_factory.mktemp('tiny') / 'work')
  assert convert_main(['--from-hf', TINY, '--out', out]) == 0
  return out


def test_load_accepts_workdir_step_and_params_directories(workdir, model):
  step = os.path.join(workdir, 'checkpoints', '2')
  for path in (step, os.path.join(step, 'params'), os.path.join(workdir, 'checkpoints')):
    other = encoder.load(path)
    np.testing.assert_array_equal(other.params['mlm']['output_bias'],
                                  model.params['mlm']['output_bias'])
  assert model.model_config.hidden_size == model.config['model']['hidden_size'] == 128
  assert model.model_config.vocab_size == model.tokenizer.vocab_size


def test_load_imports_no_training_code(workdir):
  code = ('import sys, encoder; m = encoder.load(sys.argv[1]); m.encode(["x"]); '
          'bad = [k for k in sys.modules if k.split(".")[0] == "optax" or '
          'k.startswith(("encoder.train", "encoder.tasks"))]; print(bad); assert not bad')
  result = subprocess.run([sys.executable, '-c', code, workdir], capture_output=True,
                          text=True, cwd=ROOT)
  assert result.returncode == 0, result.stdout + result.stderr[-2000:]


def test_encode_pads_to_buckets_and_ignores_padding(model):
  single = model.encode('The function returns a list.')
  assert single.sequence_output.shape == (1, 16, 128)
  assert single.pooled_output.shape == (1, 128)
  batch = model.encode(['The function returns a list.', 'x ' * 30, ('A question?', 'An answer.')])
  longest = int(batch.input_mask.sum(1).max())
  assert longest > 16 and batch.sequence_output.shape[:2] == (3, seq_bucket(longest, 64))
  n = int(single.input_mask.sum())
  np.testing.assert_allclose(batch.sequence_output[0, :n], single.sequence_output[0, :n],
                             atol=1e-5)
  np.testing.assert_allclose(batch.pooled_output[0], single.pooled_output[0], atol=1e-5)
  ids, segments, _ = model.tokenize([('A question?', 'An answer.')])
  tok = model.tokenizer
  seps = np.flatnonzero(ids[0] == tok.sep_id)
  assert ids[0, 0] == tok.cls_id and len(seps) == 2
  np.testing.assert_array_equal(segments[0, :seps[1] + 1], np.arange(seps[1] + 1) > seps[0])
  direct = model.encode(input_ids=batch.input_ids, input_mask=batch.input_mask,
                        segment_ids=model.tokenize(['The function returns a list.', 'x ' * 30,
                                                    ('A question?', 'An answer.')])[1])
  np.testing.assert_allclose(direct.sequence_output, batch.sequence_output, atol=1e-6)


def test_encode_compiles_once_per_bucket_and_truncates_with_a_warning(model):
  model.encode(['a b'])
  compiled = model._forward._cache_size()
  model.encode(['a b c d'])  # same (1, 16) bucket
  assert model._forward._cache_size() == compiled
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    out = model.encode(['word ' * 200])
  assert out.sequence_output.shape[1] == model.max_length == 64
  assert any('truncated' in str(w.message) for w in caught)


def test_embed_pooling(model):
  texts = ['The function returns a list.', 'Import the module.']
  out = model.encode(texts)
  mean = model.embed(texts, pooling='mean')
  n = out.input_mask[1].sum()
  np.testing.assert_allclose(mean[1], out.sequence_output[1, :n].mean(0), atol=1e-5)
  np.testing.assert_allclose(model.embed(texts, pooling='cls'), out.sequence_output[:, 0])
  with pytest.raises(DataError, match="pooling='max'"):
    model.embed(texts, pooling='max')


def test_fill_mask_on_smoke_checkpoint(model):
  result = model.fill_mask('The [MASK] returns a [MASK].', top_k=4)
  assert len(result) == 2
  for candidates in result:
    assert len(candidates) == 4
    probs = [p for _, p in candidates]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0 + 1e-6
    assert all(isinstance(t, str) and t for t, _ in candidates)
  assert model.fill_mask(['A [MASK].', 'B [MASK].'], top_k=1)[1][0][0]
  with pytest.raises(DataError, match=r'no \[MASK\]'):
    model.fill_mask('No mask here.')


def test_fill_mask_on_hf_pretraining_checkpoint_matches_reference(tiny):
  model = encoder.load(tiny)
  text = 'Paris is the capital of [MASK].'
  result = model.fill_mask(text, top_k=5)[0]
  ids, seg, mask = model.tokenize([text])
  with open(os.path.join(TINY, 'config.json')) as f:
    config = json.load(f)
  logits, _ = hf_numpy.forward(load_file(os.path.join(TINY, 'model.safetensors')), config, ids,
                               seg, mask)
  position = int(np.flatnonzero(ids[0] == model.tokenizer.mask_id)[0])
  probs = np.exp(logits[0, position] - logits[0, position].max())
  probs /= probs.sum()
  expected = np.argsort(-probs)[:5]
  assert [t for t, _ in result] == [model.tokenizer.id_to_token(i) for i in expected]
  np.testing.assert_allclose([p for _, p in result], probs[expected], atol=1e-5)


def test_fill_mask_needs_an_mlm_head(tmp_path):
  tensors = {k: v for k, v in load_file(os.path.join(TINY, 'model.safetensors')).items()
             if k.startswith('bert.')}
  shutil.copytree(TINY, tmp_path / 'hf')
  save_file(tensors, str(tmp_path / 'hf' / 'model.safetensors'), metadata={'format': 'pt'})
  assert convert_main(['--from-hf', str(tmp_path / 'hf'), '--out', str(tmp_path / 'w')]) == 0
  bare = encoder.load(str(tmp_path / 'w'))
  assert bare.embed(['the bank']).shape == (1, 32)
  with pytest.raises(CheckpointError, match='no MLM head'):
    bare.fill_mask('the [MASK]')


def test_attention_maps_and_plot(model, tmp_path):
  text = 'The bank approved the loan quickly.'
  tokens, maps = model.attention_maps(text)
  assert tokens[0] == '[CLS]' and tokens[-1] == '[SEP]'
  assert maps.shape == (2, 2, len(tokens), len(tokens))
  np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-5)
  fig = model.plot_attention(text, layer=-1, head=None)
  ax = fig.axes[0]
  assert [t.get_text() for t in ax.get_xticklabels()] == tokens
  assert [t.get_text() for t in ax.get_yticklabels()] == tokens
  np.testing.assert_allclose(ax.images[0].get_array(), maps[-1].mean(0), atol=1e-6)
  fig.savefig(tmp_path / 'attention.png')
  assert os.path.getsize(tmp_path / 'attention.png') > 1000
  assert model.plot_attention(text, layer=0, head=1).axes[0].get_title() == 'layer 0, head 1'
  with pytest.raises(DataError, match='out of range'):
    model.plot_attention(text, layer=5)


@pytest.mark.parametrize('method, args, what', [
    ('classify', (['a text'],), 'classification'), ('tag', (['a text'],), 'token tagging'),
    ('answer', ('Who?', 'Me.'), 'question answering')])
def test_task_methods_need_a_task_head(model, method, args, what):
  with pytest.raises(CheckpointError, match=f'has no {what} head .*trained for pretraining'):
    getattr(model, method)(*args)


def test_load_errors_are_one_line(workdir, tmp_path):
  no_tokenizer = tmp_path / 'no_tokenizer'
  shutil.copytree(workdir, no_tokenizer, ignore=shutil.ignore_patterns('tokenizer', 'cache'))
  empty = tmp_path / 'empty'
  empty.mkdir()
  cases = [(tmp_path / 'missing', 'no checkpoint at'), (no_tokenizer, 'no tokenizer/'),
           (empty, 'holds no complete checkpoint'), (TINY, 'is a Hugging Face model')]
  for path, message in cases:
    with pytest.raises(CheckpointError) as error:
      encoder.load(str(path))
    assert message in str(error.value) and '\n' not in str(error.value)


def _with_model_fields(source: str, work, **fields) -> str:
  """A copy of workdir `source` whose config.json sets `fields` of its model section."""
  shutil.copytree(source, work)
  config = json.loads((work / 'config.json').read_text())
  config['model'].update(fields)
  (work / 'config.json').write_text(json.dumps(config))
  return str(work)


def test_load_refuses_a_model_value_training_refuses(tiny, tmp_path, capsys):
  """load() computes attention as suits this machine whatever the run was told, so a name that
  does not exist was once run as `auto` without a word: it is refused as training refuses it,
  by encoder.load and by the commands that load a run through it."""
  from encoder import embed
  from encoder.errors import ConfigError
  from encoder.modules.config import ATTENTION_IMPLS
  work = _with_model_fields(tiny, tmp_path / 'flash9', attention_impl='flash9')
  expected = (f"'{os.path.join(work, 'config.json')}': model.attention_impl='flash9' is not one "
              f"of {', '.join(ATTENTION_IMPLS)}")
  with pytest.raises(ConfigError) as error:
    encoder.load(work)
  assert str(error.value) == expected
  (tmp_path / 'corpus.jsonl').write_text('{"text": "a dog"}\n')
  for command, main in ((['--corpus', str(tmp_path / 'corpus.jsonl'), '--out',
                          str(tmp_path / 'vectors')], embed.main),
                        (['--out', str(tmp_path / 'hf')], convert_main)):
    flag = '--model' if main is embed.main else '--to-hf'
    assert main([flag, work, *command]) == 2
    assert capsys.readouterr().err == f'error: {expected}\n'
  assert not (tmp_path / 'vectors').exists() and not (tmp_path / 'hf').exists()
  # A name training accepts loads on any machine: cudnn (an NVIDIA GPU's) runs as auto here.
  cudnn = encoder.load(_with_model_fields(tiny, tmp_path / 'cudnn', attention_impl='cudnn'))
  assert cudnn.model_config.attention_impl in ATTENTION_IMPLS[1:]
