"""Instances as create_pretraining_data.py makes them, checked on a tagged corpus."""

import numpy as np
import pytest

from encoder.data.pretrain import instances
from encoder.errors import DataError


def _corpus(num_docs=300, seed=0):
  """Every token is unique (its value is its position), so each maps back to doc and sentence."""
  rng = np.random.default_rng(seed)
  sentences_per_doc = rng.integers(5, 25, num_docs)
  lengths = rng.integers(3, 20, sentences_per_doc.sum())
  sent_bounds = np.concatenate([[0], np.cumsum(lengths)])
  doc_bounds = np.concatenate([[0], np.cumsum(sentences_per_doc)])
  tokens = np.arange(sent_bounds[-1], dtype=np.int32)
  return instances.TokenizedCorpus(tokens, sent_bounds, doc_bounds)


def _doc_of(corpus, token):
  sentence = np.searchsorted(corpus.sent_bounds, token, side='right') - 1
  return np.searchsorted(corpus.doc_bounds, sentence, side='right') - 1


def test_nsp_instances():
  corpus, length = _corpus(1500), 64
  inst = instances.create_instances(corpus, length, 0.1, True, 2, seed=0)
  a0, al, b0, bl, label = inst.T
  assert len(inst) > 10_000
  assert abs(label.mean() - 0.5) < 0.02
  assert (al >= 1).all() and (bl >= 1).all() and (al + bl <= length - 3).all()
  doc_a, doc_a_end = _doc_of(corpus, a0), _doc_of(corpus, a0 + al - 1)
  doc_b, doc_b_end = _doc_of(corpus, b0), _doc_of(corpus, b0 + bl - 1)
  assert (doc_a == doc_a_end).all() and (doc_b == doc_b_end).all()
  nxt = label == 0
  assert (doc_a[nxt] == doc_b[nxt]).all() and (b0[nxt] >= a0[nxt] + al[nxt]).all()
  assert (doc_a[~nxt] != doc_b[~nxt]).all()
  # Untruncated IsNext pairs are exactly consecutive whole sentences.
  full = nxt & (al + bl < length - 3)
  sb = corpus.sent_bounds
  assert full.sum() > 1000
  assert (b0[full] == a0[full] + al[full]).all()
  assert np.isin(a0[full], sb).all() and np.isin(b0[full] + bl[full], sb).all()
  # Short sequences occur (short_seq_prob): some instances are far below the length limit.
  assert np.mean(al + bl < 20) > 0.03


def test_deterministic_and_seeded():
  corpus = _corpus(50)
  a = instances.create_instances(corpus, 64, 0.1, True, 1, seed=0)
  np.testing.assert_array_equal(a, instances.create_instances(corpus, 64, 0.1, True, 1, seed=0))
  assert not np.array_equal(a, instances.create_instances(corpus, 64, 0.1, True, 1, seed=1))


def test_mlm_only_instances_are_full_length_contiguous():
  corpus = _corpus(50)
  inst = instances.create_instances(corpus, 64, 0.1, False, 1, seed=0)
  a0, al, _, bl, label = inst.T
  assert (bl == 0).all() and (label == 0).all() and (al <= 62).all()
  np.testing.assert_array_equal(a0[1:][a0[1:] > 0], (a0 + al)[:-1][a0[1:] > 0])  # no gaps
  assert al.sum() == len(corpus.tokens)  # every token used once
  assert np.mean(al) > 45  # packed near the limit


def test_materialize_layout():
  tokens = np.arange(100, 200, dtype=np.int32)
  inst = np.array([[0, 3, 10, 2, 1], [5, 4, 0, 0, 0]])
  b = instances.materialize(inst, tokens, 10, cls_id=2, sep_id=3, pad_id=0)
  np.testing.assert_array_equal(b['input_ids'][0], [2, 100, 101, 102, 3, 110, 111, 3, 0, 0])
  np.testing.assert_array_equal(b['segment_ids'][0], [0, 0, 0, 0, 0, 1, 1, 1, 0, 0])
  np.testing.assert_array_equal(b['input_mask'][0], [1] * 8 + [0] * 2)
  np.testing.assert_array_equal(b['input_ids'][1], [2, 105, 106, 107, 108, 3, 0, 0, 0, 0])
  np.testing.assert_array_equal(b['segment_ids'][1], [0] * 10)
  np.testing.assert_array_equal(b['nsp_label'], [1, 0])


def test_too_short_sequence_is_a_data_error():
  with pytest.raises(DataError, match='max_seq_length'):
    instances.create_instances(_corpus(5), 4, 0.1, True, 1, seed=0)
