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
