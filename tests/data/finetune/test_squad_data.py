"""SQuAD reading and windows: long contexts, exact character offsets, one-line errors, TFDS."""

import json
import logging
import unicodedata

import numpy as np
import pytest

from encoder.data.finetune import squad_examples, squad_features
from encoder.data.finetune.squad_examples import QAExample
from encoder.data.tokenizer import WordPieceTokenizer, train_sentencepiece
from encoder.errors import ConfigError, DataError

# Real-looking text with what breaks naive offsets: accents (which an uncased WordPiece strips),
# CJK (split per character), an emoji (an [UNK] for our WordPiece), runs of spaces, a tab.
SENTENCES = ['Zoë met Mårten at the café in Québec.', 'They flew to 東京タワー for the 😀 party.',
             'The  naïve   plan worked\tin (1990s) style.', 'Chen Wei visited Lagos on Friday.']
ANSWERS = ['Zoë', 'Mårten', 'Québec.', '東京タワー', '😀 party.', 'naïve   plan', '(1990s)',
           'Chen Wei', 'Friday.']


def _context(repeats: int = 3) -> str:
  return ' '.join(f'{s}' for _ in range(repeats) for s in SENTENCES)


def _char_wordpiece() -> WordPieceTokenizer:
  """A character-level WordPiece vocabulary (no emoji): every word splits into c ##c ##c."""
  chars = set()
  for ch in _context() + 'who where when what ?':
    base = unicodedata.normalize('NFD', ch.lower())
    chars.update(c for c in base if unicodedata.category(c) != 'Mn' and not c.isspace())
  chars.discard('😀')
  vocab = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'] + sorted(chars) + [
      f'##{c}' for c in sorted(chars)]
  return WordPieceTokenizer(vocab, lower_case=True)


@pytest.fixture(scope='module')
def tokenizers():
  sp = train_sentencepiece([SENTENCES * 5, ['who met whom ?', 'where did they fly ?']], 120)
  return {'wordpiece': _char_wordpiece(), 'sentencepiece': sp}


def _examples(context: str) -> list[QAExample]:
  out = []
  for k, text in enumerate(ANSWERS):
    start = context.index(text, len(context) // 3 * (k % 3))  # answers early, middle and late
    out.append(QAExample(f'q{k}', f'where {k}?', context, [(text, start)], False, f'f:q{k}'))
  return out


@pytest.mark.parametrize('kind', ['wordpiece', 'sentencepiece'])
def test_long_contexts_every_answer_recoverable_from_its_window(tokenizers, kind):
  tok, context = tokenizers[kind], _context()
  examples = _examples(context)
  f = squad_features.build_features(tok, examples, max_seq_length=40, doc_stride=16,
                                    max_query_length=8, labels=True)
  assert f.stats['questions_truncated'] == 0 and f.stats['answers_in_no_window'] == 0
  spans = f.spans[0]
  assert len(spans) > 3 * 40  # the context needs many windows
  for index, example in enumerate(examples):
    rows = [r for r, w in enumerate(f.windows) if w.example == index]
    assert len(rows) > 5
    # Windows start doc_stride apart, hold at most max_seq_length tokens and cover the context.
    starts = [f.windows[r].doc_start for r in rows]
    assert np.all(np.diff(starts) == 16)
    last = f.windows[rows[-1]]
    assert last.doc_start + last.doc_length == len(spans)
    assert f.arrays['input_mask'][rows].sum(1).max() <= 40
    labelled = [r for r in rows if f.arrays['start_positions'][r] > 0]
    assert labelled, example.answers
    text, begin = example.answers[0]
    for r in labelled:
      w = f.windows[r]
      first = w.doc_start + f.arrays['start_positions'][r] - w.offset
      last = w.doc_start + f.arrays['end_positions'][r] - w.offset
      assert context[spans[first, 0]:spans[last, 1]] == text
      assert spans[first, 0] == begin
    # The window rows hold the context's own ids: [CLS] question [SEP] context [SEP].
    w, r = f.windows[labelled[0]], labelled[0]
    ids = f.arrays['input_ids'][r]
    assert ids[0] == tok.cls_id and ids[w.offset - 1] == tok.sep_id
    assert f.arrays['segment_ids'][r, w.offset - 1] == 0
    assert f.arrays['segment_ids'][r, w.offset:w.offset + w.doc_length + 1].min() == 1
  # Windows not holding the answer point at [CLS].
  assert (f.arrays['start_positions'] == 0).sum() > 0
  assert np.all((f.arrays['start_positions'] == 0) == (f.arrays['end_positions'] == 0))


@pytest.mark.parametrize('kind', ['wordpiece', 'sentencepiece'])
def test_token_offsets_round_trip_to_the_original_text(tokenizers, kind):
  tok, text = tokenizers[kind], 'x  Zoë\tcafé  東京タワー 😀  naïve ﬁne  '
  (ids, spans), = squad_features.token_spans(tok, [text])
  assert ids == tok.encode(text)
  assert np.all(np.diff(spans[:, 0]) >= 0) and np.all(spans[:, 1] >= spans[:, 0])
  pieces = [text[b:e] for b, e in spans if e > b]
  assert all(p == p.strip() for p in pieces)
  # Every character that is not whitespace is inside exactly the tokens that cover it, in order.
  assert ''.join(pieces) == ''.join(text.split())
  for word in ('Zoë', 'café', '東京タワー', '😀', 'naïve'):
    b = text.index(word)
    first = np.flatnonzero(spans[:, 0] == b)
    last = np.flatnonzero(spans[:, 1] == b + len(word))
    assert len(first) and len(last), word


def test_questions_longer_than_max_query_length_are_cut_and_logged(tokenizers, caplog):
  tok, context = tokenizers['wordpiece'], SENTENCES[0]
  long_q = QAExample('q', 'who ' * 30, context, [('Zoë', 0)], False, 'f:q')
  logger = logging.getLogger('encoder')
  logger.addHandler(caplog.handler)
  try:
    f = squad_features.build_features(tok, [long_q], 40, 16, 8, labels=True)
  finally:
    logger.removeHandler(caplog.handler)
  assert f.stats['questions_truncated'] == 1
  assert 'questions cut to data.max_query_length=8' in caplog.text
  assert f.windows[0].offset == 8 + 2 and f.arrays['start_positions'][0] == 10
  with pytest.raises(ConfigError, match='leaves no room'):
    squad_features.build_features(tok, [long_q], 11, 4, 8)


def test_an_answer_longer_than_a_window_is_counted_and_labelled_cls(tokenizers):
  tok, context = tokenizers['wordpiece'], _context(1)
  example = QAExample('q', 'what?', context, [(context[:-1], 0)], False, 'f:q')
  f = squad_features.build_features(tok, [example], 32, 8, 8, labels=True)
  assert f.stats['answers_in_no_window'] == 1 and f.arrays['start_positions'].max() == 0


def _squad_file(tmp_path, qas, context='Zoë met Mårten in Québec.', name='d.json'):
  path = tmp_path / name
  path.write_text(json.dumps({'version': '1.1', 'data': [
      {'title': 't', 'paragraphs': [{'context': context, 'qas': qas}]}]}), encoding='utf-8')
  return str(path)


def _qa(qid, text, start, **extra):
  return {'id': qid, 'question': 'who?', 'answers': [{'text': text, 'answer_start': start}],
          **extra}


def test_reads_squad_json_v1_and_v2(tmp_path):
  path = _squad_file(tmp_path, [_qa('a', 'Mårten', 8),
                                {'id': 'b', 'question': 'where?', 'answers': [],
                                 'plausible_answers': [{'text': 'Québec', 'answer_start': 18}],
                                 'is_impossible': True}])
  a, b = squad_examples.read_squad_json(path)
  assert (a.qid, a.answers, a.is_impossible, a.title) == ('a', [('Mårten', 8)], False, 't')
  assert (b.answers, b.is_impossible) == ([], True)
  assert a.where == f'{path}: data[0].paragraphs[0].qas[0] (id a)'
  assert squad_examples.answer_span(a) == (8, 14)


@pytest.mark.parametrize('content,message', [
    ('{"data": [', r'd.json: not valid JSON \(Expecting value at line 1 column 11\)'),
    ('{"version": "1.1"}', "d.json: no 'data' field"),
    ('{"data": [{"paragraphs": [{"qas": []}]}]}',
     r"d.json: data\[0\].paragraphs\[0\]: no 'context' field"),
    ('{"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "q", "question": "?", '
     '"answers": [{"text": "x"}]}]}]}]}',
     r"qas\[0\] \(id q\).answers\[0\]: no 'answer_start' field"),
    ('{"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "q", "question": 3, '
     '"answers": []}]}]}]}', r"'question' should be str, got int"),
    ('{"data": []}', 'holds no questions'),
])
def test_malformed_files_are_one_line_errors_naming_file_and_entry(tmp_path, content, message):
  path = tmp_path / 'd.json'
  path.write_text(content)
  with pytest.raises(DataError, match=message) as e:
    squad_examples.read_squad_json(str(path))
  assert '\n' not in str(e.value)


def test_duplicate_ids_and_missing_files(tmp_path):
  path = _squad_file(tmp_path, [_qa('a', 'Zoë', 0), _qa('a', 'Zoë', 0)])
  with pytest.raises(DataError, match=r'qas\[1\] \(id a\): id repeats'):
    squad_examples.read_squad_json(path)
  with pytest.raises(DataError, match='does not exist'):
    squad_examples.read_squad_json(str(tmp_path / 'none.json'))


def test_answer_start_mismatch_errors_or_is_fixed_as_asked(tmp_path, tokenizers):
  context = 'Paris is big. I love Paris.'
  path = _squad_file(tmp_path, [_qa('a', 'Paris', 19)], context)  # 'Paris' is at 0 and 21
  ex, = squad_examples.read_squad_json(path)
  with pytest.raises(DataError, match=r"d.json: data\[0\].paragraphs\[0\].qas\[0\] \(id a\): "
                     r"answer_start=19 points at 'e Par', not the answer 'Paris'") as e:
    squad_examples.answer_span(ex)
  assert 'data.answer_start_mismatch=nearest' in str(e.value)
  assert squad_examples.answer_span(ex, 'nearest') == (21, 26)  # |21 - 19| < |0 - 19|
  assert squad_examples.answer_span(ex, 'skip') is None
  f = squad_features.build_features(tokenizers['wordpiece'], [ex], 32, 8, 8, labels=True,
                                    mismatch='nearest')
  assert f.stats['answers_moved'] == 1
  f = squad_features.build_features(tokenizers['wordpiece'], [ex], 32, 8, 8, labels=True,
                                    mismatch='skip')
  assert f.stats['answers_skipped'] == 1 and not f.windows
  nowhere = QAExample('b', 'q', context, [('Rome', 3)], False, 'f:b')
  with pytest.raises(DataError, match="f:b: answer 'Rome' does not occur in the context"):
    squad_examples.answer_span(nowhere, 'nearest')


def _tfds_row(qid, context, question, answers, impossible=None):
  row = {'id': qid.encode(), 'title': b't', 'context': context.encode(),
         'question': question.encode(),
         'answers': {'text': np.array([a.encode() for a, _ in answers], object),
                     'answer_start': np.array([s for _, s in answers], np.int32)}}
  if impossible is not None:
    row['is_impossible'] = np.bool_(impossible)
    row['plausible_answers'] = {'text': np.array([], object),
                                'answer_start': np.array([], np.int32)}
  return row


@pytest.mark.parametrize('version', ['v1.1', 'v2.0'])
def test_tfds_squad_through_mock_data(version):
  import tensorflow_datasets as tfds
  v2 = version == 'v2.0'
  rows = [_tfds_row('a', 'Zoë met Mårten.', 'who met?', [('Zoë', 0), ('Zoë', 0)],
                    False if v2 else None)]
  if v2:
    rows.append(_tfds_row('b', 'Zoë met Mårten.', 'where?', [], True))
  with tfds.testing.mock_data(as_data_source_fn=lambda *args, **kwargs: rows):
    examples = squad_examples.read_squad_tfds(f'squad/{version}', 'validation')
  assert [(e.qid, e.question, e.context, e.answers, e.is_impossible) for e in examples][:1] == [
      ('a', 'who met?', 'Zoë met Mårten.', [('Zoë', 0), ('Zoë', 0)], False)]
  assert examples[0].where == f'tfds:squad/{version}:validation[0] (id a)'
  if v2:
    assert examples[1].is_impossible and examples[1].answers == []
  with tfds.testing.mock_data(num_examples=2):  # random rows: answer lists of unequal length
    with pytest.raises(DataError, match=r'answer texts but \d+ answer_starts'):
      squad_examples.read_squad_tfds(f'squad/{version}', 'train')


def test_a_lone_surrogate_from_a_bad_json_escape_keeps_offsets_valid(tokenizers):
  text = json.loads('"Zo\\u00eb \\ud800 caf\\u00e9"')  # 'Zoë \ud800 café'
  for tok in tokenizers.values():
    (_, spans), = squad_features.token_spans(tok, [text])
    quoted = {text[b:e] for b, e in spans if e > b}
    assert 'Zoë' in quoted or {'Z', 'o', 'ë'} <= quoted
    assert text[spans[-1, 0]:spans[-1, 1]] in ('café', 'é')
