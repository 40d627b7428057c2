"""Entity scores against seqeval (an independent implementation) on random, malformed tags."""

import random
import warnings

import pytest

from encoder.tasks import conlleval

seqeval_metrics = pytest.importorskip('seqeval.metrics')
from seqeval.scheme import IOB2  # noqa: E402

TAGS = ['O', 'O', 'B-PER', 'I-PER', 'B-LOC', 'I-LOC', 'B-ORG', 'I-ORG', 'I-MISC', 'B-MISC']


def _random_corpus(rng: random.Random, sentences: int) -> list[list[str]]:
  return [[rng.choice(TAGS) for _ in range(rng.randint(1, 15))] for _ in range(sentences)]


def _noisy(rng: random.Random, gold: list[list[str]]) -> list[list[str]]:
  """Predictions that share much with the gold tags, so scores are neither 0 nor 1."""
  return [[t if rng.random() < 0.6 else rng.choice(TAGS) for t in s] for s in gold]


@pytest.mark.parametrize('mode,kwargs', [('conlleval', {}),
                                         ('strict', {'mode': 'strict', 'scheme': IOB2})])
def test_entity_scores_match_seqeval_on_thousands_of_random_sequences(mode, kwargs):
  rng = random.Random(mode)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')  # seqeval warns when a corpus has no entities
    for _ in range(150):  # 150 corpora x ~20 sentences: ~3000 sentences, ~24k tags
      gold = _random_corpus(rng, rng.randint(1, 40))
      pred = _noisy(rng, gold)
      ours = conlleval.entity_scores(gold, pred, mode)
      report = seqeval_metrics.classification_report(gold, pred, output_dict=True,
                                                     zero_division=0, **kwargs)
      assert ours['precision'] == pytest.approx(report['micro avg']['precision'], abs=1e-12)
      assert ours['recall'] == pytest.approx(report['micro avg']['recall'], abs=1e-12)
      assert ours['f1'] == pytest.approx(report['micro avg']['f1-score'], abs=1e-12)
      for kind, scores in ours['per_type'].items():
        if scores['support']:
          assert scores['f1'] == pytest.approx(report[kind]['f1-score'], abs=1e-12)
          assert scores['support'] == report[kind]['support']


def test_malformed_tags_read_as_conlleval_does():
  tags = ['I-PER', 'I-PER', 'B-LOC', 'I-ORG', 'O', 'I-LOC', 'B-LOC']
  assert conlleval.chunks(tags) == [('PER', 0, 2), ('LOC', 2, 3), ('ORG', 3, 4), ('LOC', 5, 6),
                                    ('LOC', 6, 7)]
  assert conlleval.chunks(tags, 'strict') == [('LOC', 2, 3), ('LOC', 6, 7)]


def test_iob1_input_becomes_the_same_entities_in_iob2():
  iob1 = ['I-PER', 'I-PER', 'O', 'I-LOC', 'B-LOC', 'I-ORG']
  iob2 = conlleval.to_iob2(iob1)
  assert iob2 == ['B-PER', 'I-PER', 'O', 'B-LOC', 'B-LOC', 'B-ORG']
  assert conlleval.chunks(iob2, 'strict') == conlleval.chunks(iob1)
  assert conlleval.entity_scores([iob1], [iob2])['f1'] == 1.0
