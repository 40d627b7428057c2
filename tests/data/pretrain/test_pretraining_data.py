"""build_pretraining_data end to end: batch format, determinism, resume, sharding, caches."""

import json
import os

import numpy as np
import pytest

from encoder.data.loader import Sampler
from encoder.data.pretrain.pretraining_data import build_pretraining_data
from encoder.errors import DataError
from tests.data.conftest import make_config

FIELDS = {'input_ids': np.int32, 'segment_ids': np.int32, 'input_mask': np.int32,
          'masked_positions': np.int32, 'masked_ids': np.int32, 'masked_weights': np.float32,
          'nsp_label': np.int32}


def _take(it, n):
  return [next(it) for _ in range(n)]


def _equal(a, b):
  return all(np.array_equal(x[k], y[k]) for x, y in zip(a, b, strict=True) for k in FIELDS)


def test_batch_format_and_tokenizer_saved(corpus_dir, tmp_path):
  data = build_pretraining_data(make_config(corpus_dir, tmp_path), str(tmp_path / 'run'))
  it = data.train_iterator()
  batch = next(it)
  it.close()
  assert {k: v.dtype for k, v in batch.items()} == FIELDS
  assert batch['input_ids'].shape == (16, 64) and batch['masked_ids'].shape == (16, 10)
  assert (batch['input_ids'][:, 0] == data.tokenizer.cls_id).all()
  assert os.path.exists(tmp_path / 'run' / 'tokenizer' / 'vocab.txt')
  assert data.stats['train_documents'] + data.stats['eval_documents'] == 40
  assert data.stats['eval_documents'] == 4 and data.stats['train_instances'] > 100
  json.dumps(data.stats)


def test_same_seed_same_batches_other_seed_differs(corpus_dir, tmp_path):
  config = make_config(corpus_dir, tmp_path)
  a = _take(build_pretraining_data(config, str(tmp_path / 'a')).train_iterator(), 3)
  b = _take(build_pretraining_data(config, str(tmp_path / 'b')).train_iterator(), 3)
  assert _equal(a, b)
  config.train.seed = 1
  c = _take(build_pretraining_data(config, str(tmp_path / 'c')).train_iterator(), 3)
  assert not _equal(a, c)


@pytest.mark.parametrize('dynamic', [True, False])
def test_restored_iterator_continues_exactly(corpus_dir, tmp_path, dynamic):
  config = make_config(corpus_dir, tmp_path, dynamic_masking=dynamic)
  data = build_pretraining_data(config, str(tmp_path / 'run'))
  straight = _take(data.train_iterator(), 30)  # several epochs: ~200 instances / 16 per batch
  it = data.train_iterator()
  _take(it, 17)
  state = json.loads(json.dumps(it.state()))
  it.close()
  assert state == {'step': 17}
  again = build_pretraining_data(config, str(tmp_path / 'run'))  # as after a restart
  assert _equal(_take(again.train_iterator(state), 13), straight[17:])


def test_epochs_cover_every_instance_once_and_reshuffle():
  sampler = Sampler(100, 16, seed=0)
  stream = np.concatenate([sampler.indices(s) for s in range(25)])  # 400 = 4 epochs
  for e in range(4):
    assert sorted(stream[e * 100:(e + 1) * 100]) == list(range(100))
  assert not np.array_equal(stream[:100], stream[100:200])


def test_two_hosts_are_disjoint_and_cover_the_global_batch(corpus_dir, tmp_path):
  config = make_config(corpus_dir, tmp_path)
  sampler = Sampler(1000, 16, seed=0)
  for step in range(5):
    whole = sampler.indices(step)
    h0, h1 = sampler.indices(step, 0, 2), sampler.indices(step, 1, 2)
    assert not set(h0) & set(h1)
    np.testing.assert_array_equal(np.concatenate([h0, h1]), whole)
  hosts = [build_pretraining_data(config, str(tmp_path / 'run'), i, 2) for i in range(2)]
  batches = [next(h.train_iterator()) for h in hosts]
  assert batches[0]['input_ids'].shape == (8, 64)
  assert not np.array_equal(batches[0]['input_ids'], batches[1]['input_ids'])
  evals = [h.eval_batches(1)[0] for h in hosts]
  one = build_pretraining_data(config, str(tmp_path / 'run'))
  whole = one.eval_batches(1)[0]
  for k in FIELDS:
    np.testing.assert_array_equal(np.concatenate([e[k] for e in evals]), whole[k])
  # Dynamic masks too: two hosts' train batches are the one-host batch, split.
  for step in (0, 3):
    parts = [h.train_batch(step) for h in hosts]
    for k, v in one.train_batch(step).items():
      np.testing.assert_array_equal(np.concatenate([p[k] for p in parts]), v)


def test_eval_batches_are_fixed(corpus_dir, tmp_path):
  config = make_config(corpus_dir, tmp_path)
  first = build_pretraining_data(config, str(tmp_path / 'a')).eval_batches(3)
  config.train.seed = 7
  data = build_pretraining_data(config, str(tmp_path / 'b'))
  assert _equal(first, data.eval_batches(3)) and _equal(first, data.eval_batches(3))
  assert len(first) == 3 and first[0]['input_ids'].shape == (16, 64)


def test_eval_batches_spread_over_the_held_out_set_when_it_is_larger(corpus_dir, tmp_path):
  # Held-out instances come shard by shard: a prefix would be the first shard's documents.
  # Fewer rows than the set holds are taken evenly across it; as many or more take it all.
  config = make_config(corpus_dir, tmp_path, eval_fraction=0.4)
  data = build_pretraining_data(config, str(tmp_path / 'run'))
  n = data.stats['eval_instances']
  whole = np.concatenate([b['input_ids'] for b in data.eval_batches(-(-n // 16))])
  assert len({r.tobytes() for r in whole[:n]}) == len({r.tobytes() for r in whole})
  one = data.eval_batches(1)[0]['input_ids']  # 16 rows of n > 16
  assert n > 32
  spread = [int(i) for i in np.arange(16) * n // 16]
  np.testing.assert_array_equal(one, whole[spread])
  assert not np.array_equal(one, whole[:16])  # not the first shard's first rows


def test_static_masks_repeat_across_epochs(corpus_dir, tmp_path):
  config = make_config(corpus_dir, tmp_path, dynamic_masking=False, dupe_factor=2)
  data = build_pretraining_data(config, str(tmp_path / 'run'))
  n = data.stats['train_instances']
  first = data.train_batch(0)
  idx0 = data._sampler.indices(0)
  # Find a later step holding instance idx0[0] again and compare its row.
  for step in range(1, 10 * n // 16):
    idx = data._sampler.indices(step)
    hit = np.flatnonzero(idx == idx0[0])
    if hit.size:
      later = data.train_batch(step)
      np.testing.assert_array_equal(later['input_ids'][hit[0]], first['input_ids'][0])
      np.testing.assert_array_equal(later['masked_positions'][hit[0]], first['masked_positions'][0])
      break
  else:
    pytest.fail('instance never seen again')


def test_whole_word_masking_keeps_words_whole(corpus_dir, tmp_path):
  config = make_config(corpus_dir, tmp_path, whole_word_masking=True)
  data = build_pretraining_data(config, str(tmp_path / 'run'))
  starts, sep = data.tokenizer.word_starts, data.tokenizer.sep_id
  checked = 0
  for batch in _take(data.train_iterator(), 10):
    for row in range(len(batch['input_ids'])):
      w = batch['masked_weights'][row] > 0
      pos, ids = batch['masked_positions'][row][w], batch['masked_ids'][row][w]
      original = batch['input_ids'][row].copy()
      original[pos] = ids
      chosen = set(pos.tolist())
      for p in pos:
        if not starts[original[p]] and p > 1 and original[p - 1] != sep:
          assert p - 1 in chosen  # the word's previous piece is masked too
        if p + 1 < len(original) and batch['input_mask'][row][p + 1] and \
           not starts[original[p + 1]]:
          assert p + 1 in chosen  # ... and so is its next piece
          checked += 1
  assert checked > 20


def test_mlm_only(corpus_dir, tmp_path):
  data = build_pretraining_data(make_config(corpus_dir, tmp_path, nsp=False), str(tmp_path / 'r'))
  batch = data.train_batch(0)
  assert (batch['nsp_label'] == 0).all() and (batch['segment_ids'] == 0).all()
  assert ((batch['input_ids'] == data.tokenizer.sep_id).sum(1) == 1).all()


def test_restart_uses_the_cache(corpus_dir, tmp_path, monkeypatch):
  config = make_config(corpus_dir, tmp_path)
  build_pretraining_data(config, str(tmp_path / 'run'))
  from encoder.data.pretrain import instances

  def fail(*args, **kwargs):
    raise AssertionError('re-tokenized or rebuilt instances on restart')
  monkeypatch.setattr(instances, 'tokenize_documents', fail)
  monkeypatch.setattr(instances, 'create_instances', fail)
  build_pretraining_data(config, str(tmp_path / 'run'))
  config.data.max_seq_length = 32  # a changed setting rebuilds
  with pytest.raises(AssertionError, match='rebuilt'):
    build_pretraining_data(config, str(tmp_path / 'run'))


def test_trains_a_sentencepiece_tokenizer_when_none_given(corpus_dir, tmp_path):
  config = make_config(corpus_dir, tmp_path)
  config.data.tokenizer, config.data.vocab_size = '', 120
  data = build_pretraining_data(config, str(tmp_path / 'run'))
  assert data.tokenizer.mask_id == 4
  assert os.path.exists(tmp_path / 'run' / 'tokenizer' / 'tokenizer.model')
  assert data.train_batch(0)['input_ids'].max() < data.tokenizer.vocab_size


def test_too_small_corpus_is_a_data_error(tmp_path):
  (tmp_path / 'corpus.txt').write_text('only one document .\nwith two lines .\n')
  config = make_config(tmp_path, tmp_path)
  config.data.tokenizer = ''
  with pytest.raises(DataError, match='at least 2') as e:
    build_pretraining_data(config, str(tmp_path / 'run'))
  assert '\n' not in str(e.value)


def test_nsp_pairs_on_tagged_text(corpus_dir, tmp_path):
  """Sentences read 'dN sM ...': IsNext B continues A's document, NotNext B is another's."""
  config = make_config(corpus_dir, tmp_path, short_seq_prob=0.0)
  data = build_pretraining_data(config, str(tmp_path / 'run'))
  tok, checked = data.tokenizer, 0
  for step in range(80):
    b = data.train_batch(step)
    for r in range(len(b['input_ids'])):
      ids = b['input_ids'][r].copy()
      w = b['masked_weights'][r] > 0
      ids[b['masked_positions'][r][w]] = b['masked_ids'][r][w]
      tokens = [tok.id_to_token(i) for i in ids]
      seg, mask = b['segment_ids'][r], b['input_mask'][r]
      tags = [[(t[0], int(t[1:])) for t, s, m in zip(tokens, seg, mask, strict=True)
               if m and s == side and t[:1] in 'ds' and t[1:].isdigit()] for side in (0, 1)]
      docs = [{v for k, v in side if k == 'd'} for side in tags]
      assert len(docs[0]) <= 1 and len(docs[1]) <= 1  # each segment lies in one document
      if not (docs[0] and docs[1]):
        continue
      if b['nsp_label'][r] == 1:
        assert docs[0] != docs[1]
      else:
        assert docs[0] == docs[1]
        sent = [[v for k, v in side if k == 's'] for side in tags]
        if mask.sum() < 64 and sent[0] and sent[1]:  # untruncated: B starts right after A
          assert sent[1][0] == sent[0][-1] + 1 and sent[0] == list(range(sent[0][0],
                                                                         sent[0][-1] + 1))
          checked += 1
  assert checked > 100


def test_bad_state_and_batch_size_are_user_errors(corpus_dir, tmp_path):
  from encoder.errors import ConfigError
  config = make_config(corpus_dir, tmp_path)
  data = build_pretraining_data(config, str(tmp_path / 'run'))
  with pytest.raises(DataError, match='state'):
    data.train_iterator({'stp': 3})
  with pytest.raises(ConfigError, match='multiple of the host count'):
    build_pretraining_data(config, str(tmp_path / 'run'), 0, 3)
