"""Property tests: readers, tokenizers, the override parser, experiment args and convert's
config reader either do the right thing or refuse with one line (an `EncoderError`), whatever
the input; and what a reader returns keeps every label in place.
"""

import csv
import io
import json
import os
import tempfile

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from encoder import configs, convert
from encoder.data.corpus import sources
from encoder.data.finetune import file_readers
from encoder.data.tokenizer import SPECIALS, WordPieceTokenizer, train_sentencepiece
from encoder.errors import ConfigError, DataError, EncoderError
from encoder.tasks import classification, task_inputs

FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
# Any code point, surrogates and controls included: what a JSON escape or a bad file can hold.
ANY_TEXT = st.text(st.characters(codec=None, categories=None), max_size=40)
# Text that survives a file round trip in a column format: no field or line separator, no CR.
FIELD = st.text(st.characters(codec='utf-8', exclude_characters='\t\n\r'), max_size=30)
LABEL = st.text(st.characters(codec='utf-8', exclude_characters='\t\n\r,'), min_size=1,
                max_size=8).filter(lambda s: s.strip() == s and s != '')


def one_line(error: Exception) -> None:
  assert isinstance(error, EncoderError), repr(error)
  assert '\n' not in str(error) and str(error), repr(error)


def write(directory, name: str, data: bytes) -> str:
  path = os.path.join(directory, name)
  with open(path, 'wb') as f:
    f.write(data)
  return path


@pytest.fixture(scope='module')
def scratch():
  with tempfile.TemporaryDirectory() as d:
    yield d


@FAST
@given(rows=st.lists(st.tuples(FIELD, FIELD, LABEL), min_size=1, max_size=8))
@example(rows=[('a\u2028b', 'c\x85d\x0be', 'pos'), ('f', 'g', 'neg')])  # str.splitlines breaks
def test_tsv_rows_come_back_with_their_labels_in_place(scratch, rows):
  assume(all(a.strip() or b.strip() or label.strip() for a, b, label in rows))
  body = 'sentence1\tsentence2\tlabel\n' + ''.join(f'{a}\t{b}\t{c}\n' for a, b, c in rows)
  path = write(scratch, 'rows.tsv', body.encode('utf-8'))
  examples = file_readers.read_classification(path, 'sentence1,sentence2', 'label')
  assert [e.texts for e in examples] == [(a, b) for a, b, _ in rows]
  assert [e.label for e in examples] == [c for _, _, c in rows]
  assert [e.where for e in examples] == [f'{path}:{n}' for n in range(2, len(rows) + 2)]


@FAST
@given(rows=st.lists(st.tuples(st.text(st.characters(codec='utf-8'), max_size=30), LABEL),
                     min_size=1, max_size=8))
def test_csv_rows_with_quotes_commas_and_line_breaks_come_back_intact(scratch, rows):
  buffer = io.StringIO()
  writer = csv.writer(buffer)  # quotes fields holding , " \r or \n; rows end in \r\n
  writer.writerow(['text', 'label'])
  writer.writerows(rows)
  path = write(scratch, 'rows.csv', buffer.getvalue().encode('utf-8'))
  examples = file_readers.read_classification(path, 'text', 'label')
  # Line breaks inside quoted fields read as \n (CRLF files are the norm); nothing else changes.
  assert [(e.texts[0], e.label) for e in examples] == [(t.replace('\r\n', '\n'), c)
                                                      for t, c in rows]


@FAST
@given(rows=st.lists(st.fixed_dictionaries({'text': ANY_TEXT, 'label': st.one_of(
    LABEL, st.integers(0, 5), st.none(), st.just(''), st.lists(st.integers(), max_size=2))}),
    min_size=1, max_size=6))
def test_jsonl_reads_every_row_or_names_the_line_at_fault(scratch, rows):
  lines = [json.dumps(r, ensure_ascii=False).encode('utf-8', 'surrogatepass') for r in rows]
  path = write(scratch, 'rows.jsonl', b'\n'.join(lines) + b'\n')
  try:
    examples = file_readers.read_classification(path, 'text', 'label')
  except DataError as e:
    one_line(e)
    assert f'{path}:' in str(e)
    return
  assert [e.label for e in examples] == [r['label'] for r in rows]
  assert [e.texts[0] for e in examples] == [r['text'] for r in rows]
  assert all(e.label not in (None, '') for e in examples)


@FAST
@given(data=st.binary(max_size=200), fmt=st.sampled_from(['tsv', 'csv', 'jsonl']),
       header=st.booleans(), columns=st.sampled_from(['a', 'a,b', '0', '0,1', '', 'a,b,c']),
       label=st.sampled_from(['label', '1', '', '2']))
def test_classification_reader_on_any_bytes(scratch, data, fmt, header, columns, label):
  path = write(scratch, f'any.{fmt}', data)
  try:
    examples = file_readers.read_classification(path, columns, label, header)
  except DataError as e:
    one_line(e)
    return
  for e in examples:
    assert all(isinstance(t, str) for t in e.texts)
    assert label == '' or e.label not in (None, '')


@FAST
@given(sentences=st.lists(st.lists(st.tuples(
    st.text(st.characters(codec='utf-8', categories=['L', 'N', 'P', 'S']), min_size=1,
             max_size=6),
    st.sampled_from(['O', 'B-PER', 'I-PER', 'B-LOC', 'I-ORG'])), min_size=1, max_size=5),
    min_size=1, max_size=4))
def test_conll_sentences_come_back_word_for_word(scratch, sentences):
  assume(all(w != '-DOCSTART-' for s in sentences for w, _ in s))
  body = '\n\n'.join('\n'.join(f'{w} X {t}' for w, t in s) for s in sentences) + '\n'
  path = write(scratch, 'ner.txt', body.encode('utf-8'))
  read = file_readers.read_conll(path)
  assert [(s.words, s.tags) for s in read] == [([w for w, _ in s], [t for _, t in s])
                                              for s in sentences]


@FAST
@given(data=st.binary(max_size=200), token=st.integers(-3, 3), tag=st.integers(-3, 3))
def test_conll_reader_on_any_bytes(scratch, data, token, tag):
  path = write(scratch, 'any.conll', data)
  try:
    sentences = file_readers.read_conll(path, token, tag)
  except DataError as e:
    one_line(e)
    return
  assert all(len(s.words) == len(s.tags) > 0 for s in sentences)


@FAST
@given(data=st.binary(max_size=300))
def test_text_corpus_on_any_bytes(scratch, data):
  path = write(scratch, 'corpus.txt', data)
  try:
    docs = sources.load_documents(f'text:{path}')
  except DataError as e:
    one_line(e)
    return
  assert docs and all(doc and all(s.strip() == s and s for s in doc) for doc in docs)


def test_invalid_utf8_is_named_by_file_and_line(scratch):
  path = write(scratch, 'latin.tsv', b'text\tlabel\nok\tpos\ncaf\xe9\tneg\n')
  with pytest.raises(DataError, match=r'latin.tsv:3: not UTF-8'):
    file_readers.read_classification(path, 'text', 'label')
  path = write(scratch, 'latin.txt', b'one line.\n\ncaf\xe9 au lait.\n')
  with pytest.raises(DataError, match=r'latin.txt:3: not UTF-8'):
    sources.load_documents(f'text:{path}')


@FAST
@given(values=st.lists(st.one_of(LABEL, st.sampled_from(['²', '٣', '1', '0', '-1', 'nan'])),
                       min_size=1, max_size=6))
def test_label_ids_never_shift_a_label(values):
  names = task_inputs.infer_names(values)
  try:
    ids = task_inputs.label_ids(values, ['f:1'] * len(values), names)
  except DataError as e:
    one_line(e)
    return
  for value, i in zip(values, ids, strict=True):
    assert names[i] == value or (value.isascii() and value.isdigit() and int(value) == i)


@pytest.mark.parametrize('value', ['nan', 'inf', '-inf', 'abc', None, True])
def test_regression_targets_must_be_finite_numbers(value):
  from ml_collections import config_dict
  example = file_readers.TextExample(('a',), value, 'f.tsv:7')
  with pytest.raises(DataError, match='f.tsv:7: label .* is not a finite number'):
    classification._labels(config_dict.ConfigDict(), [example], None, True)


@pytest.fixture(scope='module')
def tokenizers(corpus):
  docs = sources.load_documents(f'text:{corpus}')
  vocab = [*SPECIALS, *'abcdefghijklmnopqrstuvwxyz', 'the', '##s', '##ing', '中', '😀']
  return [train_sentencepiece(docs, 300), WordPieceTokenizer(vocab, lower_case=True)]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(ANY_TEXT, st.just(''), st.just('中文 😀 \x00\x07 e\u0301'),
                      st.text(max_size=5).map(lambda t: t * 2000)))
def test_tokenizers_encode_any_text_into_vocabulary_ids(tokenizers, text):
  for tok in tokenizers:
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    tok.decode(ids)


@FAST
@given(key=st.one_of(st.sampled_from(configs.flatten_keys(configs.load_experiment(
    'mlm_nsp_tiny'))), ANY_TEXT), value=st.one_of(ANY_TEXT, st.sampled_from(
        ['1e400', 'nan', 'inf', '1_000', '[' * 300, 'None', 'true', '٣', ' 7 ', '1e3'])),
    sep=st.sampled_from(['=', '']))
def test_overrides_apply_or_refuse_in_one_line(key, value, sep):
  config = configs.load_experiment('mlm_nsp_tiny')
  try:
    configs.apply_overrides(config, [f'{key}{sep}{value}'])
  except ConfigError as e:
    one_line(e)
    return
  configs.to_json(config)  # what a run saves as config.json


@FAST
@given(name=st.one_of(st.sampled_from(list(configs.list_experiments())), ANY_TEXT),
       arg=st.one_of(st.just('smoke'), ANY_TEXT, st.lists(st.sampled_from(
           ['smoke', '', 'fast', 'sst2', ' ']), max_size=3).map(','.join)))
def test_experiment_args_load_or_refuse_in_one_line(name, arg):
  try:
    configs.load_experiment(f'{name}:{arg}')
  except ConfigError as e:
    one_line(e)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        ANY_TEXT, inner, max_size=3), max_leaves=8)
HF_KEYS = ['num_hidden_layers', 'hidden_size', 'num_attention_heads', 'intermediate_size',
           'vocab_size', 'hidden_act', 'model_type', 'max_position_embeddings',
           # ModernBERT's
           'hidden_activation', 'rope_parameters', 'rope_scaling', 'layer_types',
           'global_attn_every_n_layers', 'local_attention', 'head_dim', 'classifier_pooling',
           'attention_bias', 'mlp_bias', 'norm_eps', 'global_rope_theta']
# Every registered family's config, with sizes that pass so the checks after them are reached.
FAMILY_CONFIGS = st.builds(
    lambda family, sizes, rest: {**sizes, **rest, 'model_type': family},
    st.sampled_from(['bert', 'modernbert']),
    st.fixed_dictionaries({k: st.integers(1, 8) for k in (
        'num_hidden_layers', 'hidden_size', 'num_attention_heads', 'intermediate_size',
        'vocab_size')}),
    st.dictionaries(st.sampled_from(HF_KEYS), JSON | st.integers(0, 8), max_size=8))


@FAST
@given(config=st.one_of(JSON, st.dictionaries(st.sampled_from(HF_KEYS), JSON, max_size=8),
                        FAMILY_CONFIGS))
def test_convert_reads_any_config_json_or_refuses_in_one_line(config):
  try:
    fields = convert.model_fields(config)
  except EncoderError as e:
    one_line(e)
    return
  assert fields['hidden_size'] % fields['num_heads'] == 0 and fields['num_layers'] >= 1


def test_convert_refuses_a_truncated_safetensors_file(scratch):
  directory = os.path.join(scratch, 'hf')
  os.makedirs(directory, exist_ok=True)
  write(directory, 'model.safetensors', b'\x10\x00\x00\x00\x00\x00\x00\x00{"a": ')
  with pytest.raises(EncoderError, match='cannot read .*model.safetensors') as e:
    convert.read_safetensors(directory)
  one_line(e.value)


BAD_TFDS = ['', 'no_such_dataset_xyz', 'glue/no_such_config', 'ImDb Reviews', '../../etc',
            'imdb_reviews:no_split[', 'a' * 300, '\x00', 'é/中']


def test_bad_tfds_names_are_one_line_errors(tmp_path):
  from encoder.data.finetune import tfds_examples
  for name in BAD_TFDS:
    with pytest.raises(DataError) as e:
      sources.load_documents(f'tfds:{name}', data_dir=str(tmp_path))
    one_line(e.value)
  for read in (tfds_examples.read_glue, tfds_examples.read_tagging):
    for name in ('glue/sst2', 'glue/nope', 'nope', ''):
      with pytest.raises(DataError) as e:
        read(name, 'train', str(tmp_path))
      one_line(e.value)


def test_words_cut_by_truncation_are_reported_not_dropped_silently(caplog):
  import logging

  import numpy as np

  from encoder.tasks import tagging
  sentences = [file_readers.TaggedSentence(['a', 'b'], ['O', 'O'], 'f:1'),
               file_readers.TaggedSentence(['a', 'b', 'c'], ['O', 'B-X', 'I-X'], 'f:4')]
  logger = logging.getLogger('encoder')
  logger.addHandler(caplog.handler)
  try:
    tagging._report_cut_words(sentences, [np.array([1, 2]), np.array([1])], 3)
  finally:
    logger.removeHandler(caplog.handler)
  assert {r.getMessage() for r in caplog.records} == {
      "warning: 2 of 5 words (in 1 sentences, first at f:4) lie past data.max_seq_length=3 "
      "sub-tokens: they are not trained on, and are predicted 'O' in eval"}
