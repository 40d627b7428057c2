"""Corpus specs: text files, python_docs, TFDS (mocked), and one-line DataErrors."""

import gzip

import pytest

from encoder.data.corpus import python_docs, sources
from encoder.data.corpus.sentences import split_sentences
from encoder.errors import DataError


def test_text_files_documents_and_gzip(tmp_path):
  (tmp_path / 'a.txt').write_text('First doc one.\nFirst doc two.\n\n\nSecond doc.\n')
  with gzip.open(tmp_path / 'b.txt.gz', 'wt', encoding='utf-8') as f:
    f.write('Third doc.\n')
  docs = sources.load_documents(f'text:{tmp_path}/*')
  assert docs == [['First doc one.', 'First doc two.'], ['Second doc.'], ['Third doc.']]


@pytest.mark.parametrize('spec,setup,match', [
  ('text:{d}/missing/*.txt', None, 'no files match'),
  ('text:{d}/empty.txt', b'\n\n  \n', 'empty'),
  ('text:{d}/latin1.txt', 'café\n'.encode('latin-1'), 'not UTF-8'),
  ('text:', None, 'needs a path'),
  ('wikipedia', None, 'unknown corpus'),
  ('tfds:this_dataset_does_not_exist', None, "no dataset 'this_dataset_does_not_exist'"),
])
def test_bad_corpus_is_a_one_line_data_error(tmp_path, spec, setup, match):
  if setup is not None:
    (tmp_path / spec.split('/')[-1]).write_bytes(setup)
  with pytest.raises(DataError, match=match) as e:
    sources.load_documents(spec.format(d=tmp_path), data_dir=str(tmp_path))
  assert '\n' not in str(e.value)


def test_tfds_not_prepared_says_how_to_build(tmp_path):
  with pytest.raises(DataError, match='tfds build imdb_reviews'):
    sources.load_documents('tfds:imdb_reviews', data_dir=str(tmp_path))


def test_tfds_reads_through_data_source():
  import tensorflow_datasets as tfds
  with tfds.testing.mock_data(num_examples=7):
    docs = sources.load_documents('tfds:imdb_reviews:test')
  assert len(docs) == 7 and all(isinstance(s, str) and s for d in docs for s in d)


def test_split_sentences():
  text = ('Hello there. This is Mr. Smith, e.g. a test! Is it? yes it is.\n\n'
          'Example:\n\n    x = compute(1)\n    y = 2\n\n=====\n\n>>> print(x)\n')
  assert split_sentences(text) == [
    'Hello there.', 'This is Mr. Smith, e.g. a test!', 'Is it? yes it is.', 'Example:',
    'x = compute(1)', '>>> print(x)']  # 'y = 2' has no word: dropped


def test_python_docs_is_real_deterministic_text(tmp_path):
  docs = sources.load_documents('python_docs', cache_dir=str(tmp_path))
  assert len(docs) > 300 and sum(len(s.split()) for d in docs for s in d) > 100_000
  assert any('assert' in s for s in docs[0] + docs[1] + docs[2])
  assert sources.load_documents('python_docs', cache_dir=str(tmp_path)) == docs  # from cache
  assert python_docs.documents(None) == docs  # rebuilt from scratch: identical
