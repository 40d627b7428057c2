"""Packed fine-tuning batches: the plan is a pure function of the step and visits every example
once per epoch, rows hold whole examples within L tokens, per-example fields sit in their
slots, predictions come back in eval order, and hosts' shares make up the global rows."""

import numpy as np
import pytest
from ml_collections import config_dict

from encoder.data.finetune import packing
from encoder.data.finetune.finetuning_data import EvalSet, FinetuningData
from encoder.errors import ConfigError

MAX_LEN = 64


def _config(packing_mode='examples', rows=8, batch=8, accum=1, buckets='none', seed=1):
  return config_dict.ConfigDict({
      'train': {'seed': seed, 'batch_size': batch, 'grad_accum_steps': accum},
      'data': {'prefetch': 0, 'length_buckets': buckets, 'bucket_window': 3,
               'packing': packing_mode, 'pack_rows': rows}})


def _arrays(lengths, seed=0):
  """Encoded-looking examples: [CLS]=2 then random ids, A/B ids, per-token labels and weights,
  and the example's own index as its per-example `label`."""
  rng = np.random.default_rng(seed)
  n = len(lengths)
  mask = (np.arange(MAX_LEN)[None] < np.asarray(lengths)[:, None]).astype(np.int32)
  ids = rng.integers(5, 100, (n, MAX_LEN)).astype(np.int32) * mask
  ids[:, 0] = np.where(mask[:, 0] > 0, 2, 0)
  segments = (np.arange(MAX_LEN)[None] >= np.asarray(lengths)[:, None] // 2) * mask
  return {'input_ids': ids, 'segment_ids': segments.astype(np.int32), 'input_mask': mask,
          'labels': ids % 7, 'label_weights': mask.astype(np.float32),
          'label': np.arange(n, dtype=np.int32), 'weight': np.ones(n, np.float32)}


def _lengths(n, seed=0, low=3, high=40):
  return np.random.default_rng(seed).integers(low, high, n)


def _data(train, evals=(), process_index=0, process_count=1, **config):
  evals = evals or [_arrays(_lengths(5, 9))]
  sets = [EvalSet(f'set{i}', list(range(len(e['label']))), e) for i, e in enumerate(evals)]
  return FinetuningData(_config(**config), None, train, sets, ('weight',), process_index,
                        process_count, token_predictions={'tags': -1})


def _examples_of(batch):
  """The example ids (per-example `label`) of a packed batch's filled slots."""
  return batch['label'][batch['weight'] > 0]


def test_every_example_once_per_epoch_and_steps_are_a_pure_function_of_step():
  train = _arrays(_lengths(200))
  data = _data(train)
  sampler = data._packed
  counts = [sampler.plan(e).num_steps for e in range(3)]
  assert data.steps_per_epoch == counts[0]
  first = 0
  for count in counts:
    seen = np.concatenate([_examples_of(data.train_batch(s)) for s in range(first, first + count)])
    assert sorted(seen) == list(range(200))
    first += count
  # A resumed loader (a fresh object, steps asked for in another order) gives the same batches.
  again = _data(train)
  for step in reversed(range(sum(counts) + 2)):
    got, expected = again.train_batch(step), data.train_batch(step)
    for k in expected:
      np.testing.assert_array_equal(got[k], expected[k])
  other = _data(train, seed=2)
  assert not np.array_equal(_examples_of(other.train_batch(0)), _examples_of(data.train_batch(0)))


def test_rows_hold_whole_examples_within_max_len_and_fields_sit_in_their_slots():
  train = _arrays(_lengths(120, 1))
  data = _data(train)
  slots = packing.slots_per_row(MAX_LEN)
  for step in range(data.steps_per_epoch):
    batch = data.train_batch(step)
    assert batch['input_ids'].shape == (8, MAX_LEN) and batch['label'].shape == (8, slots)
    assert (batch['input_mask'].sum(1) <= MAX_LEN).all()
    for r in range(8):
      filled = np.flatnonzero(batch['weight'][r] > 0)
      assert np.array_equal(filled, np.arange(len(filled)))  # slots fill from the left
      for slot in filled:
        e, start = batch['label'][r, slot], batch['cls_positions'][r, slot]
        n = train['input_mask'][e].sum()
        span = slice(start, start + n)
        # The example's tokens, A/B ids and per-token labels, whole, at its [CLS].
        for k in ('input_ids', 'segment_ids', 'labels', 'label_weights', 'input_mask'):
          np.testing.assert_array_equal(batch[k][r, span], train[k][e, :n])
        assert batch['input_ids'][r, start] == 2
        assert (batch['input_segmentation'][r, span] == slot + 1).all()
        np.testing.assert_array_equal(batch['input_positions'][r, span], np.arange(n))
      # Padding is what unpacked padding is: segmentation 0, no mask, no weight.
      pad = batch['input_segmentation'][r] == 0
      assert pad.sum() == MAX_LEN - batch['input_mask'][r].sum()
      assert not batch['input_mask'][r][pad].any() and not batch['label_weights'][r][pad].any()
      assert not batch['input_ids'][r][pad].any()
      assert not batch['weight'][r, len(filled):].any()


def test_first_fit_closes_a_step_when_an_example_fits_no_row():
  lengths = np.array([40, 40, 30, 20, 50, 10])
  plan = packing.first_fit(np.arange(6), lengths, rows=2, max_len=64, slots=21)
  # 40 -> row 0; 40 -> row 1; 30 fits neither: step 1 row 0; 20 -> step 1 row 0 (50 used);
  # 50 -> step 1 row 1; 10 -> step 1 row 0 (60 used).
  assert plan.step.tolist() == [0, 0, 1, 1, 1, 1]
  assert plan.row.tolist() == [0, 1, 0, 0, 1, 0]
  assert plan.start.tolist() == [0, 0, 0, 30, 0, 50]
  assert plan.slot.tolist() == [0, 0, 0, 1, 0, 2]
  assert plan.bounds.tolist() == [0, 2, 6]
  # The slot count caps a row too: three 2-token examples, two slots a row.
  capped = packing.first_fit(np.arange(3), np.array([2, 2, 2]), 1, 64, 2)
  assert capped.step.tolist() == [0, 0, 1]


def test_the_run_length_counts_packed_steps_per_epoch():
  from encoder.train import resolve
  train = _arrays(_lengths(100, 2))
  data = _data(train)
  t = config_dict.ConfigDict({'num_steps': 0, 'num_epochs': 2.0, 'batch_size': 8,
                              'warmup_steps': None, 'warmup_fraction': 0.1})
  fields = resolve.length_fields(t, 100, data.steps_per_epoch)
  assert fields['train.num_steps'] == 2 * data.steps_per_epoch
  assert data.steps_per_epoch < 100 / 8  # 8 rows of 64 hold more than 8 examples of ~21 tokens


def test_eval_predictions_come_back_in_eval_order_for_slot_and_token_fields():
  """A stand-in model that predicts each token's id (x2) and each example's index: collated
  packed predictions equal those of the unpacked path, at full length."""
  evals = [_arrays(_lengths(23, 3), seed=1), _arrays(_lengths(9, 4), seed=2)]
  train = _arrays(_lengths(40, 5))
  results = {}
  for mode in ('none', 'examples'):
    data = _data(train, evals, packing_mode=mode)
    batches = data.eval_batches()
    if mode == 'examples':
      assert len(batches) < 4  # 32 examples of ~21 tokens in steps of 8 rows x 64
      assert sorted(np.concatenate([_examples_of(b) for b in batches])) == \
          sorted(np.r_[np.arange(23), np.arange(9)])
    results[mode] = data.collate_predictions(
        [{'tags': np.where(b['input_mask'] > 0, b['input_ids'] * 2, -1),
          'logits': np.stack([b['label'], b['label'] + 1], -1).astype(np.float32)}
         for b in batches])
  for k in ('tags', 'logits'):
    np.testing.assert_array_equal(results['examples'][k], results['none'][k])
  assert results['examples']['tags'].shape == (32, MAX_LEN)


def test_length_buckets_are_ignored_when_packing(encoder_log):
  data = _data(_arrays(_lengths(50)), buckets='auto')
  assert data.buckets is None and data.train_batch(0)['input_ids'].shape == (8, MAX_LEN)
  assert "data.length_buckets='auto' is ignored with data.packing=examples" in encoder_log.text
  assert 'rows x 64 tokens per step' in encoder_log.text


def test_a_prefix_of_packed_eval_steps_covers_the_first_examples():
  evals = [_arrays(_lengths(60, 6))]
  data = _data(_arrays(_lengths(16)), evals, rows=8)
  whole = data.eval_batches()
  assert len(whole) > 1
  first = data.eval_batches(1)
  got = data.collate_predictions([{'logits': b['label'][..., None]} for b in first])['logits']
  np.testing.assert_array_equal(got[:, 0], np.arange(len(got)))
  assert 0 < len(got) == len(_examples_of(whole[0])) < 60


def test_host_shares_concatenate_to_the_global_rows():
  train, evals = _arrays(_lengths(90, 7)), [_arrays(_lengths(30, 8))]
  one = _data(train, evals)
  hosts = [_data(train, evals, h, 4) for h in range(4)]
  for step in (0, 3, one.steps_per_epoch + 1):
    whole = one.train_batch(step)
    for k in whole:
      np.testing.assert_array_equal(np.concatenate([h.train_batch(step)[k] for h in hosts]),
                                    whole[k])
  parts = [h.eval_batches() for h in hosts]
  for i, batch in enumerate(one.eval_batches()):
    for k in batch:
      np.testing.assert_array_equal(np.concatenate([p[i][k] for p in parts]), batch[k])


def test_auto_rows_aim_at_the_batch_size_in_multiples_of_devices_x_accumulation():
  import jax
  devices = jax.device_count()
  lengths = _lengths(400, 9)
  for accum in (1, 2):
    rows = packing.rows_per_step(_config(rows=0, batch=64, accum=accum), lengths, MAX_LEN)
    assert rows % (devices * accum) == 0
  data = _data(_arrays(lengths), rows=0, batch=64)
  per_step = 400 / data.steps_per_epoch
  assert 0.9 * 64 <= per_step < 64 * 1.5  # around the batch size (rounding up adds rows)


@pytest.mark.parametrize('overrides,message', [
    ({'packing_mode': 'documents'}, "data.packing='documents' is not one of none, examples"),
    ({'packing_mode': 'tokens'}, "data.packing='tokens'"),
    ({'rows': 3}, r'data.pack_rows=3 must be 0 \(auto\) or a multiple of'),
    ({'rows': 8, 'accum': 3}, 'x 3 accumulation steps'),
    ({'rows': -8}, 'data.pack_rows=-8'),
])
def test_bad_packing_settings_are_one_line_config_errors(overrides, message):
  with pytest.raises(ConfigError, match=message) as e:
    _data(_arrays(_lengths(20)), **overrides)
  assert '\n' not in str(e.value)
