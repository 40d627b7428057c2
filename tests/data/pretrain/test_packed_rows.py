"""Pretraining rows packed from documents: coverage, layout, boundaries, fill, batches, refusals."""

import json

import numpy as np
import pytest
from ml_collections import config_dict

from encoder import saved_config
from encoder.data.pretrain import instances, packed_rows, preparation
from encoder.data.pretrain.pretraining_data import build_pretraining_data
from encoder.errors import ConfigError
from tests.data.conftest import make_config

CLS, SEP, PAD = 2, 3, 0


def _corpus(num_docs=60, seed=0) -> instances.TokenizedCorpus:
  """Documents of 1-12 sentences of 1-20 tokens; token t of the corpus has id 10 + t % 900."""
  rng = np.random.default_rng(seed)
  per_doc = rng.integers(1, 13, num_docs)
  lengths = rng.integers(1, 21, per_doc.sum())
  sent_bounds = np.concatenate([[0], np.cumsum(lengths)])
  doc_bounds = np.concatenate([[0], np.cumsum(per_doc)])
  tokens = (10 + np.arange(sent_bounds[-1]) % 900).astype(np.int32)
  return instances.TokenizedCorpus(tokens, sent_bounds, doc_bounds)


def _doc_of(corpus, token_offsets):
  return np.searchsorted(packed_rows.doc_starts(corpus), token_offsets, side='right') - 1


@pytest.mark.parametrize('layout', packed_rows.LAYOUTS)
def test_each_pass_covers_every_token_once_in_order_and_rows_fit(layout):
  corpus, length = _corpus(), 48
  rows = packed_rows.create_rows(corpus, length, layout, passes=3, seed=0)
  starts, lens = rows[:, instances.A_START], rows[:, instances.A_LEN]
  assert (lens > 0).all() and (rows[:, 2:] == 0).all()  # B empty, NSP 0
  passes = np.flatnonzero(starts == 0)
  assert len(passes) == 3
  for first, end in zip(passes, [*passes[1:], len(rows)], strict=True):
    s, n = starts[first:end], lens[first:end]
    np.testing.assert_array_equal(s[1:], (s + n)[:-1])  # contiguous, disjoint
    assert s[-1] + n[-1] == len(corpus.tokens)
  # The passes cut their rows at different places (a seeded shorter first row).
  assert lens[passes[1]] != lens[0] or lens[passes[2]] != lens[0]
  batch = packed_rows.materialize_packed(
      rows, corpus.tokens, packed_rows.piece_starts(rows, packed_rows.doc_starts(corpus), length),
      length, layout, CLS, SEP, PAD)
  assert batch['input_mask'].sum(1).max() <= length
  np.testing.assert_array_equal(batch['eligible'].sum(1), lens)


def test_documents_layout_puts_each_piece_in_its_own_example():
  corpus, length = _corpus(seed=1), 40
  rows = packed_rows.create_rows(corpus, length, 'documents', passes=1, seed=0)
  breaks = packed_rows.piece_starts(rows, packed_rows.doc_starts(corpus), length)
  b = packed_rows.materialize_packed(rows, corpus.tokens, breaks, length, 'documents', CLS, SEP,
                                     PAD)
  for r, (start, n) in enumerate(rows[:, :2]):
    real = b['input_mask'][r].astype(bool)
    seg, ids, pos = b['input_segmentation'][r], b['input_ids'][r], b['input_positions'][r]
    assert (seg[~real] == 0).all() and (ids[~real] == PAD).all() and (seg[real] > 0).all()
    content = ids[b['eligible'][r]]
    np.testing.assert_array_equal(content, corpus.tokens[start:start + n])
    docs = _doc_of(corpus, np.arange(start, start + n))
    for k in range(1, seg.max() + 1):
      piece = np.flatnonzero(seg == k)
      np.testing.assert_array_equal(piece, np.arange(piece[0], piece[-1] + 1))
      assert ids[piece[0]] == CLS and ids[piece[-1]] == SEP
      assert not np.isin(ids[piece[1:-1]], [CLS, SEP]).any()
      np.testing.assert_array_equal(pos[piece], np.arange(len(piece)))
      piece_docs = docs[np.isin(np.flatnonzero(b['eligible'][r]), piece)]
      assert len(set(piece_docs)) == 1  # one document per example ...
    assert len(set(docs)) == seg.max()  # ... and one example per document in the row


def test_full_sentences_layout_has_one_cls_and_a_sep_between_documents():
  corpus, length = _corpus(seed=2), 40
  rows = packed_rows.create_rows(corpus, length, 'full_sentences', passes=1, seed=0)
  breaks = packed_rows.piece_starts(rows, packed_rows.doc_starts(corpus), length)
  b = packed_rows.materialize_packed(rows, corpus.tokens, breaks, length, 'full_sentences', CLS,
                                     SEP, PAD)
  assert 'input_segmentation' not in b
  for r, (start, n) in enumerate(rows[:, :2]):
    ids, total = b['input_ids'][r], b['input_mask'][r].sum()
    assert ids[0] == CLS and (ids[1:total] != CLS).all() and ids[total - 1] == SEP
    docs = len(set(_doc_of(corpus, np.arange(start, start + n))))
    assert (ids[:total] == SEP).sum() == docs
    np.testing.assert_array_equal(ids[b['eligible'][r]], corpus.tokens[start:start + n])


def _packed(corpus_dir, tmp_path, **data):
  return make_config(corpus_dir, tmp_path, nsp=False, packing='documents', **data)


@pytest.mark.parametrize('packing', ['documents', 'full_sentences'])
def test_packed_rows_are_nearly_all_real_tokens_against_bert_pairs(corpus_dir, tmp_path, packing):
  fractions = {}
  for name, fields in (('pairs', {}), (packing, {'nsp': False, 'packing': packing})):
    data = build_pretraining_data(make_config(corpus_dir, tmp_path, **fields),
                                  str(tmp_path / name))
    fractions[name] = np.mean([data.train_batch(s)['input_mask'] for s in range(20)])
  assert fractions[packing] >= 0.95 > fractions['pairs']


def test_packed_batches_resume_exactly_and_hosts_split_the_global_batch(corpus_dir, tmp_path):
  config = _packed(corpus_dir, tmp_path, dynamic_masking=True)
  data = build_pretraining_data(config, str(tmp_path / 'run'))
  batch = data.train_batch(3)
  assert batch['input_segmentation'].shape == batch['input_positions'].shape == (16, 64)
  assert (batch['masked_weights'].sum(1) > 0).all()
  picked = np.take_along_axis(batch['input_segmentation'], batch['masked_positions'], 1)
  assert (picked[batch['masked_weights'] > 0] > 0).all()  # masks fall on real tokens
  it = data.train_iterator({'step': 5})
  resumed = [next(it) for _ in range(3)]
  it.close()
  again = build_pretraining_data(config, str(tmp_path / 'run'))  # as after a restart
  for step, b in zip(range(5, 8), resumed, strict=True):
    expected = again.train_batch(step)
    assert all(np.array_equal(b[k], expected[k]) for k in expected)
  halves = [build_pretraining_data(config, str(tmp_path / f'h{i}'), i, 2).train_batch(3)
            for i in range(2)]
  for k in batch:
    np.testing.assert_array_equal(np.concatenate([h[k] for h in halves]), batch[k])


def test_static_masks_follow_the_packed_rows(corpus_dir, tmp_path):
  data = build_pretraining_data(_packed(corpus_dir, tmp_path, dynamic_masking=False),
                                str(tmp_path / 'run'))
  b = data.train_batch(0)
  w = b['masked_weights'] > 0
  picked = np.take_along_axis(b['input_segmentation'], b['masked_positions'], 1)
  assert w.any() and (picked[w] > 0).all()
  eval_batch = data.eval_batches(1)[0]
  assert 'input_segmentation' in eval_batch
  json.dumps(data.stats)


@pytest.mark.parametrize('fields, message', [
    ({'packing': 'documents', 'nsp': True}, 'needs data.nsp=false'),
    ({'packing': 'examples', 'nsp': False}, 'packs fine-tuning batches'),
    ({'packing': 'rows', 'nsp': False}, "data.packing='rows'"),
])
def test_packing_that_cannot_work_is_refused_in_one_line(corpus_dir, tmp_path, fields, message):
  with pytest.raises(ConfigError, match=message) as err:
    preparation.settings(make_config(corpus_dir, tmp_path, **fields), str(tmp_path / 'run'))
  assert '\n' not in str(err.value)
  assert not (tmp_path / 'cache').exists()  # refused before anything is written


def test_unpacked_preparations_keep_their_folder_names(corpus_dir, tmp_path):
  """packing joins the instance settings only when set, so caches made before it stay valid."""
  plain = preparation.settings(make_config(corpus_dir, tmp_path), str(tmp_path / 'r'))
  old = make_config(corpus_dir, tmp_path).to_dict()
  del old['data']['packing']  # a config.json from before the field existed, completed as read
  config = config_dict.ConfigDict(saved_config.complete(old))
  assert preparation.settings(config, str(tmp_path / 'r'))['instances_dir'] == \
      plain['instances_dir']
  assert 'packing' not in plain['instances']
