"""Preparation at corpus scale: input shards, same bits for any worker count, resume by shard,
reuse, NotNext within a shard, reading by index (mapped or by byte range), the CLI line."""

import glob
import gzip
import hashlib
import json
import os

import numpy as np
import pytest

from encoder.data.corpus import sources
from encoder.data.permutation import PermutationSampler
from encoder.data.pretrain import preparation, shard_worker
from encoder.data.pretrain.pretraining_data import build_pretraining_data
from encoder.errors import DataError
from tests.data.conftest import make_config, write_corpus


def _digest(directory) -> str:
  h = hashlib.sha256()
  for path in sorted(glob.glob(os.path.join(directory, '**', '*'), recursive=True)):
    if os.path.isfile(path):
      h.update(os.path.relpath(path, directory).encode())
      h.update(open(path, 'rb').read())
  return h.hexdigest()


def _config(corpus_dir, tmp_path, name, **data):
  """The tagged corpus (~34 KB) cut into ~8 KB shards, prepared into tmp_path/name."""
  return make_config(corpus_dir, tmp_path, prepare_shard_mb=8192 / 2**20,
                     prepared_dir=str(tmp_path / name), **data)


def test_big_file_is_cut_at_document_boundaries(tmp_path):
  path = write_corpus(str(tmp_path), num_docs=60)
  with open(path, 'a') as f:
    f.write('  \n\t\nlast doc after a whitespace-only line .\n')
  plan = sources.plan(f'text:{path}', 2000)
  assert len(plan) > 5 and all(len(s['pieces']) == 1 for s in plan)
  cut = [doc for s in plan for doc in sources.read(s)]
  assert cut == sources.load_documents(f'text:{path}')


def test_small_files_share_shards_and_gz_is_read_whole(tmp_path):
  for i in range(6):
    write_corpus(str(tmp_path), num_docs=3, seed=i, name=f'f{i}.txt')
  with open(tmp_path / 'f2.txt', 'rb') as f:
    data = f.read()
  with gzip.open(tmp_path / 'f2.txt.gz', 'wb') as f:
    f.write(data)
  os.remove(tmp_path / 'f2.txt')
  plan = sources.plan(f'text:{tmp_path}/f*', 3000)
  assert len(plan) < 6 and any(len(s['pieces']) > 1 for s in plan)
  assert [d for s in plan for d in sources.read(s)] == \
      sources.load_documents(f'text:{tmp_path}/f*')


PACKINGS = {'pairs': {}, 'packed': {'nsp': False, 'packing': 'documents'}}


@pytest.mark.parametrize('packing', sorted(PACKINGS))
def test_same_bits_for_one_and_two_workers(corpus_dir, tmp_path, packing):
  """The trained tokenizer, tokens and instances (static masks too) do not see the pool."""
  digests = []
  for workers in (1, 2):
    config = _config(corpus_dir, tmp_path, f'w{workers}', dynamic_masking=False,
                     **PACKINGS[packing])
    config.data.tokenizer, config.data.vocab_size = '', 120
    summary = preparation.prepare(config, str(tmp_path / f'run{workers}'), workers=workers)
    assert summary['shards'] >= 3 and summary['workers'] == workers and not summary['reused']
    digests.append(_digest(tmp_path / f'w{workers}'))
  assert digests[0] == digests[1]


def test_finished_is_reused_and_interrupted_resumes_by_shard(corpus_dir, tmp_path, monkeypatch):
  config = _config(corpus_dir, tmp_path, 'p')
  first = preparation.prepare(config, str(tmp_path / 'run'), workers=1)
  before = _digest(tmp_path / 'p')
  assert preparation.prepare(config, str(tmp_path / 'run'), workers=1)['reused']
  # As if killed while shard 2 was written: no manifest, shard 2 without its markers.
  s = preparation.settings(config, str(tmp_path / 'run'))
  os.remove(os.path.join(s['instances_dir'], preparation.MANIFEST))
  os.remove(os.path.join(s['instances_dir'], '00002.json'))
  os.remove(os.path.join(s['dir'], 'tokens', '00002.json'))
  os.remove(os.path.join(s['dir'], 'tokens', '00002.train.tokens.npy'))
  seen = []
  real = shard_worker.instances.tokenize_documents

  def tokenize(docs, tok, **kwargs):
    seen.append(len(docs))
    return real(docs, tok, **kwargs)
  monkeypatch.setattr(shard_worker.instances, 'tokenize_documents', tokenize)
  again = preparation.prepare(config, str(tmp_path / 'run'), workers=1)
  assert len(seen) == 2  # shard 2's train and eval splits, nothing else
  assert _digest(tmp_path / 'p') == before and again['instances'] == first['instances']


def test_not_next_partners_are_other_documents_of_the_shard_and_the_coin_is_fair(
    corpus_dir, tmp_path):
  config = _config(corpus_dir, tmp_path, 'p', dupe_factor=5)
  preparation.prepare(config, str(tmp_path / 'run'), workers=1)
  s = preparation.settings(config, str(tmp_path / 'run'))
  labels = []
  for i in range(len(s['plan'])):
    sb = np.load(shard_worker.tokens_path(s['dir'], i, 'train', 'sent_bounds'))
    db = np.load(shard_worker.tokens_path(s['dir'], i, 'train', 'doc_bounds'))
    inst = np.load(shard_worker.instances_path(s['instances_dir'], i, 'train', 'instances'))
    doc_of = np.searchsorted(sb[db], inst[:, [0, 2]], side='right') - 1
    assert len(db) > 2  # every shard has partners to draw from
    assert (doc_of[inst[:, 4] == 1, 0] != doc_of[inst[:, 4] == 1, 1]).all()
    assert (doc_of[inst[:, 4] == 0, 0] == doc_of[inst[:, 4] == 0, 1]).all()
    labels.append(inst[:, 4])
  labels = np.concatenate(labels)
  assert len(labels) > 1000 and abs(labels.mean() - 0.5) < 0.05


def test_permutation_sampler_covers_each_epoch_once_in_constant_memory():
  sampler = PermutationSampler(1000, 64, seed=0)
  stream = np.concatenate([sampler.indices(s) for s in range(63)])  # 4032: 4 whole epochs
  for e in range(4):
    assert sorted(stream[e * 1000:(e + 1) * 1000]) == list(range(1000))
  assert not np.array_equal(stream[:1000], stream[1000:2000])
  halves = [sampler.indices(5, h, 2) for h in range(2)]
  np.testing.assert_array_equal(np.concatenate(halves), sampler.indices(5))
  assert not np.array_equal(PermutationSampler(1000, 64, 1).indices(0), sampler.indices(0))


def test_other_hosts_wait_for_the_manifest_then_stop_with_one_line(corpus_dir, tmp_path):
  config = _config(corpus_dir, tmp_path, 'p', prepare_timeout_s=0)
  with pytest.raises(DataError, match='process 0 did not finish') as e:
    build_pretraining_data(config, str(tmp_path / 'run'), process_index=1, process_count=2)
  assert '\n' not in str(e.value)


def test_tokenizer_sample_is_bounded_and_spread_over_shards(tmp_path):
  path = write_corpus(str(tmp_path), num_docs=60)
  plan = sources.plan(f'text:{path}', 2000)
  sample = preparation.sample_sentences(plan, 3 * len(plan))
  assert len(sample) == 3 * len(plan)
  tags = {line.split()[0] for line in sample}
  assert len(tags) >= len(plan)  # a document from every shard


def test_required_characters_hint_points_the_right_way():
  from encoder.data.tokenizer import train_sentencepiece_sample
  text = [''.join(chr(0x4E00 + i) for i in range(j, j + 40)) for j in range(0, 400, 5)]
  with pytest.raises(DataError, match=r'raise data.vocab_size to at least \d+ or lower '
                     r'data.character_coverage'):
    train_sentencepiece_sample(text, 100)


def test_prepare_data_prints_one_json_line(corpus_dir, tmp_path, capsys):
  from encoder import launch
  argv = ['--exp', 'mlm_nsp_base', '--prepare_data', '--workdir', str(tmp_path / 'run'),
          f'--config.data.corpus=text:{corpus_dir}/corpus.txt',
          f'--config.data.tokenizer={corpus_dir}/vocab.txt',
          f'--config.data.cache_dir={tmp_path}/cache', '--config.data.prepare_workers=1']
  assert launch.run(argv) == 0
  [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith('{')]
  summary = json.loads(line)
  assert {'workers', 'documents', 'tokens', 'instances', 'shards', 'seconds_tokenizer',
          'seconds_prepare', 'mb_per_s'} <= set(summary)
  assert summary['documents'] == 40 and summary['workers'] == 1
  assert summary['prepared_dir'].startswith(f'{tmp_path}/cache/prepared-')


def test_prepare_data_on_a_fine_tuning_experiment_is_a_user_error():
  from encoder import launch
  from encoder.errors import ConfigError
  with pytest.raises(ConfigError, match='prepares pretraining corpora'):
    launch.run(['--exp', 'classify_sst2', '--prepare_data'])
