"""SQuAD EM / F1 on hand-built cases; each expected value is worked out below from the official
scripts' documented rules (normalise: lower case, drop ASCII punctuation, drop a/an/the as
words, collapse whitespace; F1 over token bags; best over gold answers)."""

import pytest

from encoder.tasks import squad_metrics as sm


@pytest.mark.parametrize('text,expected', [
    # lower -> 'the  quick, brown fox!' -> no punctuation -> 'the  quick brown fox'
    # -> 'the' removed -> '   quick brown fox' -> whitespace collapsed
    ('The  Quick, brown fox!', 'quick brown fox'),
    ('An apple a day', 'apple day'),  # articles only as whole words ...
    ('the theory of Anathema', 'theory of anathema'),  # ... 'theory', 'anathema' stay
    ('Café—Über', 'café—über'),  # the em dash is not ASCII punctuation: it stays
    ("Denver's (1990s)", 'denvers 1990s'),  # the apostrophe and brackets go
    ('\tA\n', ''),
])
def test_normalisation(text, expected):
  assert sm.normalize_answer(text) == expected


def test_exact_match_and_token_f1():
  assert sm.exact('the Eiffel Tower.', 'Eiffel Tower') == 1.0  # both 'eiffel tower'
  # pred [eiffel, tower, in, paris], gold [eiffel, tower]: 2 shared, P = 2/4, R = 2/2,
  # F1 = 2 * 0.5 * 1 / 1.5 = 2/3
  assert sm.f1('Eiffel Tower in Paris', 'the Eiffel Tower') == pytest.approx(2 / 3)
  # bags, not sets: [x, x, y] vs [x, y, y] share one x and one y: P = R = 2/3, F1 = 2/3
  assert sm.f1('x x y', 'x y y') == pytest.approx(2 / 3)
  assert sm.f1('Paris', 'Rome') == 0.0
  # v1.1: no shared token -> 0 even when both are empty; v2.0: empty vs empty is 1
  assert sm.f1('', '') == 0.0 and sm.f1('', '', version_2=True) == 1.0
  assert sm.f1('the', 'Paris', version_2=True) == 0.0


def test_best_over_gold_answers_and_v2_gold_filtering():
  # gold 2 'Broncos' = pred 'broncos' after normalisation: EM 1, F1 1
  assert sm.question_scores('the Broncos', ['Denver Broncos', 'Broncos']) == (1.0, 1.0)
  # pred [denver], golds [denver, broncos] (F1 2/3) and [broncos] (0): best 2/3, EM 0
  em, f = sm.question_scores('Denver', ['Denver Broncos', 'Broncos'])
  assert em == 0.0 and f == pytest.approx(2 / 3)
  # v2.0 drops the gold 'The' (normalises to nothing): only 'Paris' is left
  assert sm.question_scores('', ['The', 'Paris'], version_2=True) == (0.0, 0.0)
  assert sm.question_scores('', ['The'], version_2=True) == (1.0, 1.0)  # none left: gold ''
  # v1.1 keeps it: '' == normalised 'The' -> EM 1, but F1 0 (no shared token)
  assert sm.question_scores('', ['The', 'Paris']) == (1.0, 0.0)


def test_v1_averages_over_every_gold_question():
  golds = {'q1': ['Eiffel Tower'], 'q2': ['the Eiffel Tower'], 'q3': ['Seine']}
  preds = {'q1': 'eiffel tower', 'q2': 'Eiffel Tower in Paris'}  # q3 missing: scores 0
  # EM (1 + 0 + 0) / 3; F1 (1 + 2/3 + 0) / 3 = 5/9
  out = sm.squad_v1(golds, preds)
  assert out == pytest.approx({'exact_match': 1 / 3, 'f1': 5 / 9})


def test_v2_breakdown_and_best_thresholds():
  golds = {'a': ['Paris'], 'b': ['Rome'], 'c': [], 'd': []}
  preds = {'a': 'Paris', 'b': 'in Rome city', 'c': '', 'd': 'Berlin'}
  na = {'a': -2.0, 'b': 0.5, 'c': 3.0, 'd': 1.0}
  # per question EM / F1: a 1/1; b 0 / (P 1/3, R 1 -> 0.5); c (gold '', pred '') 1/1; d 0/0
  out = sm.squad_v2(golds, preds, na)
  assert out['exact_match'] == pytest.approx(2 / 4) and out['f1'] == pytest.approx(2.5 / 4)
  assert out['has_ans_exact_match'] == pytest.approx(1 / 2)
  assert out['has_ans_f1'] == pytest.approx(1.5 / 2)
  assert out['no_ans_exact_match'] == pytest.approx(1 / 2) and out['no_ans_f1'] == 0.5
  # find_best_thresh, EM: start at 2 (both unanswerable right when nothing is answered);
  # by na: a (+1 -> 3, best, thr -2), b (+0), d (answered 'Berlin': -1 -> 2), c ('' : 0)
  assert out['best_exact_match'] == pytest.approx(3 / 4)
  assert out['best_exact_match_threshold'] == -2.0
  # F1: 2 -> a 3 (thr -2) -> b 3.5 (thr 0.5, best) -> d 2.5 -> c 2.5
  assert out['best_f1'] == pytest.approx(3.5 / 4) and out['best_f1_threshold'] == 0.5
  # Without na_probs there is no threshold search, as in the official script.
  assert 'best_f1' not in sm.squad_v2(golds, preds)
  # Searching over the best non-null spans instead: c's span 'Oslo' now costs 1 when answered.
  spans = dict(preds, c='Oslo')
  searched = sm.squad_v2(golds, preds, na, spans)
  assert searched['best_f1'] == pytest.approx(3.5 / 4)  # c comes last (na 3.0): never answered
  assert searched['exact_match'] == out['exact_match']  # the headline numbers are unchanged
