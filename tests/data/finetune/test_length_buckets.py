"""Length buckets: the sampler's grouping, host agreement and purity; trimmed batches that hold
the same tokens as padded ones; eval predictions restored to eval-set order."""

import numpy as np
import pytest

from encoder import config_schema
from encoder.data.finetune import length_buckets
from encoder.data.finetune.finetuning_data import EvalSet, FinetuningData
from encoder.data.loader import Sampler
from encoder.errors import ConfigError


@pytest.mark.parametrize('spec,max_len,expected', [
    ('auto', 128, (16, 32, 64, 128)), ('', 384, (16, 32, 64, 128, 256, 384)),
    ('none', 128, None), ('NONE', 64, None), ('64,32', 128, (32, 64, 128)),
    ('32,128', 128, (32, 128)), ('auto', 16, (16,)), ('auto', 10, (10,))])
def test_parse_buckets(spec, max_len, expected):
  assert length_buckets.parse_buckets(spec, max_len) == expected


@pytest.mark.parametrize('spec', ['16,x', '256', '1', ','])
def test_bad_buckets_are_config_errors(spec):
  with pytest.raises(ConfigError, match='data.length_buckets'):
    length_buckets.parse_buckets(spec, 128)


def _lengths(n=500, seed=0):
  return np.random.default_rng(seed).integers(3, 120, n)


def test_a_window_holds_the_plain_samplers_examples_in_short_batches():
  lengths, g, w = _lengths(), 16, 10
  grouped = length_buckets.LengthGroupedSampler(lengths, g, seed=3, window=w,
                                         buckets=(16, 32, 64, 128))
  plain = Sampler(len(lengths), g, seed=3)
  for window in range(3):
    steps = range(window * w, (window + 1) * w)
    got = [grouped.indices(s) for s in steps]
    # The same examples as the plain sampler's W batches, so epochs see each example once.
    assert sorted(np.concatenate([i for i, _ in got])) == \
        sorted(np.concatenate([plain.indices(s) for s in steps]))
    for idx, length in got:
      longest = lengths[idx].max()
      assert length >= longest and (length == 16 or length // 2 < longest)
  # Grouping pays: the padded tokens are far fewer than with random batches of the same length.
  grouped_pad = sum(grouped.indices(s)[1] * g for s in range(30))
  random_pad = sum(length_buckets.bucket_of((16, 32, 64, 128), lengths[plain.indices(s)].max()) * g
                   for s in range(30))
  assert grouped_pad < 0.8 * random_pad


def test_batches_are_a_pure_function_of_seed_and_step_and_hosts_agree():
  lengths = _lengths()
  make = lambda: length_buckets.LengthGroupedSampler(lengths, 16, 5, 4, (16, 32, 64, 128))  # noqa: E731
  a, b = make(), make()
  forward = [a.indices(s) for s in range(12)]
  backward = [b.indices(s) for s in reversed(range(12))][::-1]  # a resumed loader's order
  for (i, la), (j, lb) in zip(forward, backward, strict=True):
    assert la == lb and np.array_equal(i, j)
  hosts = [make().indices(7, h, 4) for h in range(4)]
  assert len({length for _, length in hosts}) == 1  # every host pads step 7 alike
  assert np.array_equal(np.concatenate([i for i, _ in hosts]), make().indices(7)[0])
  other = length_buckets.LengthGroupedSampler(lengths, 16, 6, 4, (16, 32, 64, 128))
  assert not np.array_equal(other.indices(0)[0], forward[0][0])


def test_bucket_window_must_be_positive():
  with pytest.raises(ConfigError, match='bucket_window'):
    length_buckets.LengthGroupedSampler(_lengths(), 16, 0, 0, (16, 128))


def _config(spec, batch=8, window=3):
  c = config_schema.finetuning_config('buckets', 'classification')
  c.train.update({'seed': 1, 'batch_size': batch})
  c.data.update({'prefetch': 0, 'length_buckets': spec, 'bucket_window': window})
  return c


def _arrays(lengths, max_len=64, seed=0):
  rng = np.random.default_rng(seed)
  n = len(lengths)
  mask = (np.arange(max_len)[None] < np.asarray(lengths)[:, None]).astype(np.int32)
  ids = rng.integers(5, 100, (n, max_len)).astype(np.int32) * mask
  return {'input_ids': ids, 'segment_ids': np.zeros_like(ids), 'input_mask': mask,
          'labels': ids % 7, 'label_weights': mask.astype(np.float32),
          'label': np.arange(n, dtype=np.int32)}


def _data(spec, train, evals):
  sets = [EvalSet(f'set{i}', list(range(len(e['label']))), e) for i, e in enumerate(evals)]
  return FinetuningData(_config(spec), None, train, sets, ('label_weights',),
                        token_predictions={'tags': -1})


def test_train_batches_are_cut_to_their_bucket_and_lose_no_token():
  lengths = _lengths(200, 1) % 60 + 2
  train = _arrays(lengths)
  data = _data('16,32', train, [_arrays(lengths[:10])])
  assert data.buckets == (16, 32, 64)
  seen = set()
  for step in range(25):
    batch = data.train_batch(step)
    length = batch['input_ids'].shape[1]
    seen.add(length)
    rows = batch['label']  # example ids
    assert length in (16, 32, 64) and batch['input_mask'].sum(1).max() <= length
    for k in ('input_ids', 'input_mask', 'labels', 'label_weights'):
      np.testing.assert_array_equal(batch[k], train[k][rows, :length])
      assert not train[k][rows, length:].any()  # nothing but padding was cut
  assert len(seen) > 1


def test_eval_predictions_come_back_in_eval_order_at_full_length():
  """A stand-in model that predicts each row's own tokens: the collated predictions of the
  bucketed batches equal those of the padded ones, row for row."""
  evals = [_arrays(np.random.default_rng(2).integers(2, 64, 13), seed=1),
           _arrays(np.random.default_rng(3).integers(2, 64, 6), seed=2)]
  train = _arrays(np.full(16, 8))
  results = {}
  for spec in ('none', 'auto'):
    data = _data(spec, train, evals)
    batches = data.eval_batches()
    if spec == 'auto':
      assert len({b['input_ids'].shape[1] for b in batches}) > 1
    # Filler rows (to a whole batch) carry weight 0, every real row weight 1.
    weights = np.concatenate([b['label_weights'].max(1) > 0 for b in batches])
    assert weights.sum() == 19 - (np.concatenate([e['input_mask'].sum(1) for e in evals]) == 0
                                  ).sum()
    predictions = data.collate_predictions(
        [{'tags': np.where(b['input_mask'] > 0, b['input_ids'] * 2, -1),
          'logits': np.stack([b['label'], b['label'] + 1], 1).astype(np.float32)}
         for b in batches])
    results[spec] = predictions
  np.testing.assert_array_equal(results['auto']['tags'], results['none']['tags'])
  labels = np.r_[np.arange(13), np.arange(6)]
  for spec in ('none', 'auto'):  # per-example fields are not padded, per-token ones are
    np.testing.assert_array_equal(results[spec]['logits'], np.stack([labels, labels + 1], 1))
  expected = np.where(evals[0]['input_mask'] > 0, evals[0]['input_ids'] * 2, -1)
  np.testing.assert_array_equal(results['none']['tags'][:13], expected)


def test_a_prefix_of_eval_batches_covers_the_first_examples():
  evals = [_arrays(np.random.default_rng(4).integers(2, 64, 30))]
  data = _data('auto', _arrays(np.full(16, 8)), evals)
  batches = data.eval_batches(2)
  got = data.collate_predictions([{'label': b['label']} for b in batches])['label']
  np.testing.assert_array_equal(got, np.arange(16))


def test_hosts_pad_eval_batches_alike_and_share_them():
  evals = [_arrays(np.random.default_rng(5).integers(2, 64, 21))]
  train = _arrays(np.full(16, 8))
  c = _config('auto')
  one = FinetuningData(c, None, train, [EvalSet('e', list(range(21)), evals[0])],
                       ('label_weights',))
  hosts = [FinetuningData(c, None, train, [EvalSet('e', list(range(21)), evals[0])],
                          ('label_weights',), h, 2) for h in range(2)]
  whole = one.eval_batches()
  parts = [h.eval_batches() for h in hosts]
  for i, batch in enumerate(whole):
    for k in batch:
      np.testing.assert_array_equal(np.concatenate([p[i][k] for p in parts]), batch[k])
