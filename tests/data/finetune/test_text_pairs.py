"""Contrastive examples read from each layout (JSONL triplets, TSV scored pairs, headerless
columns, BEIR folders), encoded per role, and batched so every host cuts a role alike."""

import json

import numpy as np
import pytest

from encoder.data.finetune import contrastive_data, text_pairs
from encoder.errors import DataError


class Chars:
  """A tokenizer of one id per character, enough to check the encoding by eye."""
  pad_id, cls_id, sep_id = 0, 1, 2

  def encode_batch(self, texts):
    return [[3 + (ord(c) % 50) for c in t] for t in texts]


def test_jsonl_triplets_with_lists_of_negatives(tmp_path):
  path = tmp_path / 't.jsonl'
  path.write_text(json.dumps({'anchor': 'a', 'positive': 'b', 'negative': ['c', 'd']}) + '\n'
                  + json.dumps({'anchor': 'e', 'positive': 'f', 'negative': 'g'}) + '\n')
  examples = text_pairs.read(str(path), '', 'score')
  assert [(e.anchor, e.positive, e.negatives, e.score) for e in examples] == [
      ('a', 'b', ('c', 'd'), None), ('e', 'f', ('g',), None)]
  arrays = contrastive_data.encode(Chars(), examples, 6, num_negatives=2)
  assert arrays['negative_ids'].shape == (2, 2, 6)
  assert arrays['negative_mask'][1].sum(-1).tolist() == [3, 0]  # the second has one negative
  np.testing.assert_array_equal(arrays['anchor_ids'][0], [1, 3 + ord('a') % 50, 2, 0, 0, 0])


def test_scored_tsv_headerless_columns_and_beir(tmp_path):
  tsv = tmp_path / 's.tsv'
  tsv.write_text('sentence1\tsentence2\tscore\nx y\tx z\t4.5\np\tq\t0\n')
  examples = text_pairs.read(str(tsv), '', 'score')
  assert [e.score for e in examples] == [4.5, 0.0] and examples[0].positive == 'x z'
  plain = tmp_path / 'p.tsv'
  plain.write_text('q1\tdoc one\nq2\tdoc two\n')
  examples = text_pairs.read(str(plain), '0,1', 'score', header=False)
  assert [(e.anchor, e.positive, e.score) for e in examples] == [('q1', 'doc one', None),
                                                                 ('q2', 'doc two', None)]
  beir = tmp_path / 'beir'
  (beir / 'qrels').mkdir(parents=True)
  (beir / 'corpus.jsonl').write_text(''.join(json.dumps(d) + '\n' for d in [
      {'_id': 'd1', 'title': 'T', 'text': 'one'}, {'_id': 'd2', 'title': '', 'text': 'two'}]))
  (beir / 'queries.jsonl').write_text(''.join(json.dumps(q) + '\n' for q in [
      {'_id': 'q1', 'text': 'first'}, {'_id': 'q2', 'text': 'second'}]))
  (beir / 'qrels' / 'train.tsv').write_text('query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t1\n'
                                            'q2\td2\t0\n')
  pairs = text_pairs.read(str(beir), '', 'score', beir_split='train')
  assert [(p.anchor, p.positive) for p in pairs] == [('first', 'T one'), ('first', 'two')]
  arrays = contrastive_data.encode(Chars(), pairs, 8, num_negatives=0)
  assert arrays['group'][0] == arrays['group'][1]  # one query: not each other's negatives


@pytest.mark.parametrize('content, match', [
    ('{"anchor": "a"}\n', 'anchor/positive'),
    ('{"anchor": "a", "positive": null}\n', "no 'positive'"),
    ('{"sentence1": "a", "sentence2": "b", "score": "high"}\n', 'not a finite number'),
    ('not json\n', 'not a JSON object')])
def test_bad_rows_fail_in_one_line_naming_the_line(tmp_path, content, match):
  path = tmp_path / 'bad.jsonl'
  path.write_text(content)
  with pytest.raises(DataError, match=match) as error:
    text_pairs.read(str(path), '', 'score')
  assert '\n' not in str(error.value)


def test_each_role_is_cut_to_its_own_bucket_from_the_global_batch():
  rng = np.random.default_rng(0)
  arrays = {'anchor_mask': (np.arange(64) < rng.integers(2, 12, (8, 1))).astype(np.int32),
            'positive_mask': (np.arange(64) < rng.integers(30, 60, (8, 1))).astype(np.int32),
            'weight': np.ones(8, np.float32)}
  arrays['anchor_mask'][5, :20] = 1  # host 1's row decides the anchors' bucket for both hosts
  arrays.update({f'{role}_ids': arrays[f'{role}_mask'] * 7 for role in ('anchor', 'positive')})
  buckets = (16, 32, 64)
  lengths = contrastive_data.role_lengths(arrays)
  host0 = contrastive_data.cut(arrays, np.arange(4), buckets,
                               contrastive_data.longest_in(lengths, np.arange(8)))
  assert host0['anchor_mask'].shape == (4, 32) and host0['positive_mask'].shape == (4, 64)
  alone = contrastive_data.cut(arrays, np.arange(4), buckets,
                               contrastive_data.longest_in(lengths, np.arange(4)))
  assert alone['anchor_mask'].shape == (4, 16)
