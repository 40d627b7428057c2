"""Classification metrics against scikit-learn and scipy (independent implementations)."""

import numpy as np
import pytest

from encoder.tasks import metrics

sklearn_metrics = pytest.importorskip('sklearn.metrics')
stats = pytest.importorskip('scipy.stats')


@pytest.mark.parametrize('classes', [2, 3])
def test_accuracy_f1_mcc_match_sklearn(classes):
  rng = np.random.default_rng(classes)
  for _ in range(50):
    gold = rng.integers(0, classes, 60)
    pred = np.where(rng.random(60) < 0.7, gold, rng.integers(0, classes, 60))
    assert metrics.accuracy(gold, pred) == pytest.approx(sklearn_metrics.accuracy_score(gold, pred))
    assert metrics.mcc(gold, pred) == pytest.approx(sklearn_metrics.matthews_corrcoef(gold, pred))
    if classes == 2:
      assert metrics.binary_f1(gold, pred) == pytest.approx(
          sklearn_metrics.f1_score(gold, pred, zero_division=0))
  assert metrics.mcc(np.array([1, 1, 1]), np.array([1, 1, 1])) == 0.0  # undefined -> 0, as sklearn


def test_pearson_spearman_match_scipy_with_ties():
  rng = np.random.default_rng(0)
  for _ in range(50):
    x = rng.integers(0, 6, 40) / 1.0  # many ties, as STS-B's scores have
    y = x + rng.normal(0, 1.5, 40)
    assert metrics.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-10)
    assert metrics.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-10)
    np.testing.assert_allclose(metrics.rankdata(x), stats.rankdata(x))


def test_baselines_equal_sklearns_dummy_predictors():
  """The 'learned nothing' scores: scikit-learn's most-frequent classifier and mean regressor
  fitted on the eval set itself, scored by scikit-learn."""
  dummy = pytest.importorskip('sklearn.dummy')
  rng = np.random.default_rng(3)
  for gold in (rng.choice(2, 50, p=[0.3, 0.7]), rng.choice(2, 40, p=[0.8, 0.2]),
               rng.choice(3, 60, p=[0.2, 0.5, 0.3])):
    which = ('accuracy', 'f1', 'mcc') if gold.max() == 1 else ('accuracy', 'mcc')
    pred = dummy.DummyClassifier(strategy='most_frequent').fit(gold[:, None], gold).predict(
        gold[:, None])
    base = metrics.baseline_scores(gold, which)
    assert base['baseline_accuracy'] == pytest.approx(sklearn_metrics.accuracy_score(gold, pred))
    assert 'baseline_mcc' not in base  # 0 by definition
    if 'f1' in which:
      assert base['baseline_f1'] == pytest.approx(
          sklearn_metrics.f1_score(gold, pred, zero_division=0.0))
  y = rng.uniform(0, 5, 30)
  pred = dummy.DummyRegressor(strategy='mean').fit(y[:, None], y).predict(y[:, None])
  assert metrics.baseline_scores(y, regression=True)['baseline_mse'] == pytest.approx(
      sklearn_metrics.mean_squared_error(y, pred))
