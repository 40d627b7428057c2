"""`python -m encoder.embed`: shards of vectors and ids equal to `Model.embed`, a resumed run
that skips finished shards and ends with the same bytes, and one-line refusals."""

import json
import os

import numpy as np
import pytest

from encoder import embed
from encoder.embedding import shard_store
from tests.embedding.conftest import embed_one_at_a_time, make_texts


def write_beir_corpus(path, texts) -> list[str]:
  """A BEIR corpus.jsonl of `texts` split into title and text; returns the ids."""
  ids = [f'doc{i}' for i in range(len(texts))]
  with open(path, 'w', encoding='utf-8') as f:
    for doc_id, text in zip(ids, texts, strict=True):
      words = text.split()
      f.write(json.dumps({'_id': doc_id, 'title': ' '.join(words[:2]),
                          'text': ' '.join(words[2:])}) + '\n')
  return ids


def run(workdir, corpus, out, *extra) -> int:
  return embed.main(['--model', workdir, '--corpus', str(corpus), '--out', str(out),
                     '--rows', '4', *extra])


def files(directory) -> dict:
  """Every file's bytes; the manifest's content but for the seconds each shard took."""
  out = {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}
  if 'manifest.json' in out:
    manifest = json.loads(out['manifest.json'])
    for shard in manifest['shards']:
      shard.pop('seconds')
    out['manifest.json'] = manifest
  return out


def test_shards_hold_each_documents_embedding_and_id(tiny_workdir, tiny_model, tmp_path, capsys):
  texts = make_texts(11)
  ids = write_beir_corpus(tmp_path / 'corpus.jsonl', texts)
  assert run(tiny_workdir, tmp_path / 'corpus.jsonl', tmp_path / 'out', '--shard_size', '4',
             '--pooling', 'cls') == 0
  assert 'embedded 11 documents in 3 new shard(s)' in capsys.readouterr().out
  names = sorted(os.listdir(tmp_path / 'out'))
  assert names == ['manifest.json'] + [f'shard-0000{i}.{k}' for i in range(3)
                                       for k in ('ids.json', 'npy')]
  assert np.load(tmp_path / 'out' / 'shard-00002.npy').shape == (3, 32)
  got_ids, vectors = shard_store.read_embeddings(str(tmp_path / 'out'))
  assert got_ids == ids
  # BEIR's title + " " + text is the text itself here.
  np.testing.assert_allclose(vectors, embed_one_at_a_time(tiny_model, texts, pooling='cls'),
                             rtol=1e-5, atol=1e-5)


def test_text_only_lines_take_their_line_numbers_as_ids(tiny_workdir, tmp_path):
  (tmp_path / 'c.jsonl').write_text('{"text": "a dog"}\n\n{"text": "the cat sat"}\n')
  assert run(tiny_workdir, tmp_path / 'c.jsonl', tmp_path / 'out') == 0
  assert shard_store.read_embeddings(str(tmp_path / 'out'))[0] == ['1', '3']


def test_a_killed_run_resumes_from_its_finished_shards(tiny_workdir, tmp_path, capsys):
  corpus = tmp_path / 'corpus.jsonl'
  write_beir_corpus(corpus, make_texts(10, seed=4))
  assert run(tiny_workdir, corpus, tmp_path / 'whole', '--shard_size', '3') == 0
  whole = files(tmp_path / 'whole')
  # Stopped after the first shard (as a kill between shards would leave it)...
  assert run(tiny_workdir, corpus, tmp_path / 'out', '--shard_size', '3', '--max_shards',
             '1') == 0
  assert '7 documents left' in capsys.readouterr().out
  manifest = json.loads((tmp_path / 'out' / 'manifest.json').read_text())
  assert [s['index'] for s in manifest['shards']] == [0] and not manifest['complete']
  with pytest.raises(Exception, match='not complete'):
    shard_store.read_embeddings(str(tmp_path / 'out'))
  first = (tmp_path / 'out' / 'shard-00000.npy').stat().st_mtime_ns
  # ...then run again: the finished shard is skipped, the rest computed.
  assert run(tiny_workdir, corpus, tmp_path / 'out', '--shard_size', '3') == 0
  assert 'embedded 7 documents in 3 new shard(s)' in capsys.readouterr().out
  assert (tmp_path / 'out' / 'shard-00000.npy').stat().st_mtime_ns == first
  assert files(tmp_path / 'out') == whole
  # A shard written but not yet in the manifest (killed in between) is computed again.
  manifest = json.loads((tmp_path / 'out' / 'manifest.json').read_text())
  manifest['shards'].pop()
  (tmp_path / 'out' / 'manifest.json').write_text(json.dumps(manifest))
  assert run(tiny_workdir, corpus, tmp_path / 'out', '--shard_size', '3') == 0
  assert 'embedded 1 documents in 1 new shard(s)' in capsys.readouterr().out
  assert files(tmp_path / 'out') == whole


@pytest.mark.parametrize('case, message', [
    ('missing', 'does not exist'),
    ('bad_json', 'line 2: not JSON'),
    ('no_text', 'line 1: a document needs a "text" string'),
    ('other_settings', "made with pooling='mean', not 'cls'"),
    ('other_corpus', 'made with corpus_bytes='),
    ('foreign_dir', 'has no manifest.json'),
    ('bad_size', '--shard_size=0 must be positive'),
])
def test_bad_input_is_a_one_line_error_and_loses_nothing(tiny_workdir, tmp_path, capsys, case,
                                                         message):
  corpus, out, extra = tmp_path / 'corpus.jsonl', tmp_path / 'out', []
  write_beir_corpus(corpus, ['a dog', 'the cat sat'])
  if case in ('other_settings', 'other_corpus'):
    assert run(tiny_workdir, corpus, out, '--pooling', 'mean') == 0
    if case == 'other_settings':
      extra = ['--pooling', 'cls']
    else:
      write_beir_corpus(corpus, ['a dog', 'the cat sat', 'a horse'])
  elif case == 'missing':
    corpus = tmp_path / 'absent.jsonl'
  elif case == 'bad_json':
    corpus.write_text('{"text": "a dog"}\n{"text": \n')
  elif case == 'no_text':
    corpus.write_text('{"title": 3}\n')
  elif case == 'foreign_dir':
    out.mkdir()
    (out / 'notes.txt').write_text('mine')
  elif case == 'bad_size':
    extra = ['--shard_size', '0']
  before = files(out) if out.exists() else {}
  capsys.readouterr()
  assert run(tiny_workdir, corpus, out, *extra) == 2
  err = capsys.readouterr().err
  assert err.startswith('error: ') and err.count('\n') == 1 and message in err, err
  assert (files(out) if out.exists() else {}) == before
