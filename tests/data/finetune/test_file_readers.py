"""Fine-tuning readers: every local format, TFDS through mock_data, encoding, one-line errors."""

import json

import numpy as np
import pytest

from encoder.data.finetune import file_readers, finetuning_data, tfds_examples
from encoder.data.tokenizer import WordPieceTokenizer
from encoder.errors import DataError
from encoder.tasks import task_inputs

ROWS = [('a fine film', 'it is, truly', 'pos'), ('dull', 'very "dull"', 'neg')]


def _write(path, text: str) -> str:
  path.write_text(text, encoding='utf-8')
  return str(path)


def test_every_classification_format_reads_the_same_examples(tmp_path):
  tsv_text = 'a\tb\tlabel\n' + ''.join(f'{a}\t{b}\t{y}\n' for a, b, y in ROWS)
  tsv = _write(tmp_path / 'd.tsv', tsv_text)
  raw = _write(tmp_path / 'raw.tsv', ''.join(f'x\t{y}\t{a}\t{b}\n' for a, b, y in ROWS))
  csv_text = 'a,b,label\n' + ''.join(
      f'"{a}","{b.replace(chr(34), chr(34) * 2)}",{y}\n' for a, b, y in ROWS)
  csv = _write(tmp_path / 'd.csv', csv_text)
  jsonl = _write(tmp_path / 'd.jsonl', ''.join(
      json.dumps({'a': a, 'b': b, 'label': y}) + '\n' for a, b, y in ROWS))
  reads = [file_readers.read_classification(tsv, 'a,b', 'label'),
           file_readers.read_classification(raw, '2,3', '1', header=False),
           file_readers.read_classification(csv, 'a,b', 'label'),
           file_readers.read_classification(jsonl, 'a,b', 'label')]
  for examples in reads:
    assert [(*e.texts, e.label) for e in examples] == ROWS
  single = file_readers.read_classification(tsv, 'b', 'label')
  assert [e.texts for e in single] == [('it is, truly',), ('very "dull"',)]
  assert reads[0][1].where.endswith('d.tsv:3')


def test_conll_columns_docstart_and_blank_lines(tmp_path):
  path = _write(tmp_path / 'n.txt', '-DOCSTART- -X- O\n\nEU NNP B-ORG\nrejects VBZ O\n\n\n'
                'Peter NNP B-PER\nBlackburn NNP I-PER\n')
  sentences = file_readers.read_conll(path)
  assert [(s.words, s.tags) for s in sentences] == [
      (['EU', 'rejects'], ['B-ORG', 'O']), (['Peter', 'Blackburn'], ['B-PER', 'I-PER'])]
  assert [s.tags for s in file_readers.read_conll(path, 0, 1)] == [['NNP', 'VBZ'], ['NNP', 'NNP']]


@pytest.mark.parametrize('content,call,message', [
    ('a\tlabel\nx\t1\n', lambda p: file_readers.read_classification(p, 'text', 'label'),
     "no column 'text' \\(the file's columns: a, label\\); set --config.data.text_columns"),
    ('', lambda p: file_readers.read_classification(p, 'a', 'label'), 'is empty'),
    ('a\tlabel\n', lambda p: file_readers.read_classification(p, 'a', 'label'), 'no examples'),
    ('x\t1\ny\n', lambda p: file_readers.read_classification(p, '0', '1', header=False),
     r'd.tsv:2: 1 column\(s\)'),
    ('EU B-ORG\nrejects VBZ O\n', lambda p: file_readers.read_conll(p), r'd.tsv:2: 3 column\(s\)'),
    ('\n\n', lambda p: file_readers.read_conll(p), 'is empty'),
])
def test_bad_files_are_one_line_data_errors(tmp_path, content, call, message):
  path = _write(tmp_path / 'd.tsv', content)
  with pytest.raises(DataError, match=message) as e:
    call(path)
  assert '\n' not in str(e.value)


def test_missing_jsonl_field_and_labels_outside_the_set(tmp_path):
  path = _write(tmp_path / 'd.jsonl', '{"a": "x", "label": "pos"}\n{"a": "y"}\n')
  with pytest.raises(DataError, match="d.jsonl:2: no field 'label'"):
    file_readers.read_classification(path, 'a', 'label')
  assert task_inputs.label_ids(['neg', '1', 1], ['f:1', 'f:2', 'f:3'], ['neg', 'pos']) == [0, 1, 1]
  with pytest.raises(DataError, match="f:2: label 'meh' is not in the label set"):
    task_inputs.label_ids(['pos', 'meh'], ['f:1', 'f:2'], ['neg', 'pos'])
  assert task_inputs.infer_names(['2', '0']) == ['0', '1', '2']
  assert task_inputs.infer_names(['pos', 'neg', 'pos']) == ['neg', 'pos']


def _bert_truncate_seq_pair(tokens_a, tokens_b, max_length):
  """Verbatim from google-research/bert run_classifier.py, the reference rule."""
  while True:
    total_length = len(tokens_a) + len(tokens_b)
    if total_length <= max_length:
      break
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def test_pairs_truncate_longest_first_as_bert():
  rng = np.random.default_rng(0)
  for _ in range(200):
    a, b = list(range(rng.integers(0, 20))), list(range(100, 100 + rng.integers(0, 20)))
    budget = int(rng.integers(1, 30))
    ours, theirs = (a[:], b[:]), (a[:], b[:])
    finetuning_data.truncate_pair(*ours, budget)
    _bert_truncate_seq_pair(*theirs, budget)
    assert ours == theirs


def _tokenizer():
  vocab = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'the', 'world', '##wide', 'hello', '.']
  return WordPieceTokenizer(vocab, lower_case=True)


def test_encoding_keeps_the_word_to_subtoken_alignment():
  tok = _tokenizer()
  arrays, positions = finetuning_data.encode_words(tok, [['Hello', 'worldwide', '.'], ['£']], 8)
  assert arrays['input_ids'][0].tolist() == [2, 8, 6, 7, 9, 3, 0, 0]
  assert positions[0].tolist() == [1, 2, 4]  # 'worldwide' -> world ##wide: labelled at 'world'
  assert arrays['input_ids'][1, :3].tolist() == [2, 1, 3]  # no sub-token -> [UNK]
  cut, kept = finetuning_data.encode_words(tok, [['worldwide'] * 5], 6)
  assert kept[0].tolist() == [1, 3] and cut['input_ids'][0].tolist() == [2, 6, 7, 6, 7, 3]
  pairs = finetuning_data.encode_texts(tok, [('hello the', 'world')], 8)
  assert pairs['input_ids'][0].tolist() == [2, 8, 5, 3, 6, 3, 0, 0]
  assert pairs['segment_ids'][0].tolist() == [0, 0, 0, 0, 1, 1, 0, 0]


def test_tfds_glue_and_conll_through_mock_data():
  import tensorflow_datasets as tfds
  with tfds.testing.mock_data(num_examples=6, num_sub_examples=4):
    sst2, names = tfds_examples.read_glue('glue/sst2', 'train')
    mnli, mnli_names = tfds_examples.read_glue('glue/mnli', 'validation_mismatched')
  # TFDS's random mock gives `tokens` and `ner` different lengths; mock whole examples instead.
  sentences = [(['EU', 'rejects', 'German', 'call'], [3, 0, 7, 0]), (['Peter'], [1])]
  examples = [{'tokens': np.array([w.encode() for w in words], object), 'ner': np.array(tags),
               'pos': np.zeros(len(words), np.int64), 'chunks': np.zeros(len(words), np.int64)}
              for words, tags in sentences]
  with tfds.testing.mock_data(as_data_source_fn=lambda *args, **kwargs: examples):
    conll = tfds_examples.read_tagging('conll2003', 'train')
  assert len(sst2) == 6 and names == ['negative', 'positive']
  assert all(len(e.texts) == 1 and e.label in (0, 1) for e in sst2)
  assert mnli_names == ['entailment', 'neutral', 'contradiction']
  assert all(len(e.texts) == 2 and isinstance(e.texts[1], str) for e in mnli)
  assert [(s.words, s.tags) for s in conll] == [
      (['EU', 'rejects', 'German', 'call'], ['B-ORG', 'O', 'B-MISC', 'O']), (['Peter'], ['B-PER'])]


def test_unprepared_tfds_dataset_says_how_to_build_it(tmp_path):
  with pytest.raises(DataError, match='tfds build glue/sst2') as e:
    tfds_examples.read_glue('glue/sst2', 'train', str(tmp_path))
  assert '\n' not in str(e.value)


def test_glue_column_names_by_default_or_the_one_other_column(tmp_path, encoder_log):
  glue = _write(tmp_path / 'g.tsv', 'sentence\tlabel\nfine film\t1\n')
  assert [e.texts for e in file_readers.read_classification(glue, ['sentence'], 'label',
                                                          defaulted=True)] == [('fine film',)]
  other = _write(tmp_path / 'o.tsv', 'label\treview\n0\tdull\n')
  read = file_readers.read_classification(other, ['sentence'], 'label', defaulted=True)
  assert [(e.texts, e.label) for e in read] == [(('dull',), '0')]
  assert "reading the text from its one other column, 'review'" in encoder_log.text
  # A column the user named is never replaced; two candidates are never guessed between.
  with pytest.raises(DataError, match=r"no column 'sentence' \(the file's columns: label, "
                     'review\\)'):
    file_readers.read_classification(other, ['sentence'], 'label')
  two = _write(tmp_path / 't.tsv', 'a\tb\tlabel\nx\ty\t1\n')
  with pytest.raises(DataError, match=r'columns: a, b, label\); set --config.data.text_columns='
                     r'A\[,B\] and --config.data.label_column=L'):
    file_readers.read_classification(two, ['sentence'], 'label', defaulted=True)


@pytest.mark.parametrize('body,column', [
    ('EU B-ORG 0\nrejects O 0\n\nPeter B-PER 0\n', 1),  # the CoNLL-2003 copy's layout
    ('-DOCSTART- -X- -X- O\n\nEU NNP B-ORG\nrejects VBZ O\n', 2),  # the original's
    ('EU NNP\nrejects VBZ\n', 1),  # no IOB column: the last, refused later as not IOB
])
def test_the_tag_column_is_found_from_the_file(tmp_path, body, column):
  assert file_readers.find_tag_column(_write(tmp_path / 'n.txt', body)) == column


def test_tags_of_one_value_or_not_iob_are_refused(tmp_path):
  path = _write(tmp_path / 'n.txt', 'EU B-ORG 0\nrejects O 0\n')
  zeros = file_readers.read_conll(path, 0, 2)
  with pytest.raises(DataError, match=r"column 2 holds one value \('0'\) on every line"):
    file_readers.check_iob_tags(path, zeros, 2, train=True)
  file_readers.check_iob_tags(path, file_readers.read_conll(path, 0, 1), 1, train=True)
  pos = _write(tmp_path / 'p.txt', 'EU NNP\nrejects VBZ\n')
  with pytest.raises(DataError, match=r'column 1 is not IOB tags \(values: NNP, VBZ\)'):
    file_readers.check_iob_tags(pos, file_readers.read_conll(pos, 0, 1), 1, train=True)

