"""n-best span decoding on hand-built logits: run_squad's rules, and quoting by offsets."""

import numpy as np
import pytest

from encoder.data.finetune.squad_features import Window, max_context_rows
from encoder.tasks.span_decoding import decode

# 'Zoë' '東京' 'visited' 'the' 'café' with two spaces before 'visited'.
CONTEXT = 'Zoë 東京  visited the café.'
SPANS = np.array([[0, 3], [4, 6], [8, 15], [16, 19], [20, 24], [24, 25]])
OFFSET = 3  # [CLS] q [SEP]: context tokens start at row position 3
LOW = -10.0


def _logits(seq: int, starts: dict, ends: dict) -> tuple[np.ndarray, np.ndarray]:
  s, e = np.full(seq, LOW), np.full(seq, LOW)
  for p, v in starts.items():
    s[p] = v
  for p, v in ends.items():
    e[p] = v
  return s, e


def _one_window(starts, ends, **options):
  window = Window(0, 0, len(SPANS), OFFSET)
  best = max_context_rows([(0, len(SPANS))], [0], len(SPANS))
  return decode(CONTEXT, SPANS, [window], [_logits(12, starts, ends)], best, [0], **options)


def test_best_pair_is_quoted_from_the_original_context():
  # token 1 ('東京') at position 4, token 2 ('visited') at 5: the span keeps both spaces
  p = _one_window({4: 5.0}, {5: 4.0})
  assert (p.text, p.start, p.end) == ('東京  visited', 4, 15)
  assert p.score == 9.0 and p.null_score_diff is None
  assert p.probability == pytest.approx(
      np.exp(9.0) / sum(np.exp(c.score) for c in p.nbest))
  p = _one_window({3: 5.0}, {3: 5.0})
  assert p.text == 'Zoë'
  p = _one_window({7: 5.0}, {8: 5.0})  # 'café' + '.' (tokens 4, 5)
  assert p.text == 'café.'


def test_rejected_pairs():
  # end before start: the best start (pos 6) with the best end (pos 4) is rejected; the best
  # admissible pair is start 6 with the second end (pos 7): 'the café'
  p = _one_window({6: 9.0, 3: 1.0}, {4: 9.0, 7: 2.0})
  assert p.text == 'the café'
  # a start in the question (pos 1) or on [CLS] (pos 0) is never an answer
  p = _one_window({1: 20.0, 0: 19.0, 5: 1.0}, {5: 1.0})
  assert p.text == 'visited'
  # a span past the context (pos 9 is [SEP], 10 padding) is rejected
  p = _one_window({8: 5.0}, {9: 20.0, 10: 19.0, 8: 1.0})
  assert p.text == '.'
  # max_answer_length counts tokens: 'Zoë 東京  visited' is 3, rejected at 2
  assert _one_window({3: 5.0}, {5: 5.0, 4: 1.0}).text == 'Zoë 東京  visited'
  assert _one_window({3: 5.0}, {5: 5.0, 4: 1.0}, max_answer_length=2).text == 'Zoë 東京'
  # n_best_size limits the candidates: of 20, (3, 3) 'Zoë' wins with 2.9 + 9; with 1, only
  # start 6 and end 3 are tried, which is no span: v1 then answers '' (run_squad's 'empty')
  assert _one_window({6: 3.0, 3: 2.9}, {3: 9.0, 6: 8.0}).text == 'Zoë'
  p = _one_window({6: 3.0, 3: 2.9}, {3: 9.0, 6: 8.0}, n_best_size=1)
  assert (p.text, p.start, len(p.nbest)) == ('', -1, 1)


def test_only_the_max_context_window_may_start_an_answer():
  # Two windows over 6 tokens: [0, 4) and [2, 6). Token 2 ('visited') sits at the edge of the
  # first (1 token after it) and in the middle-left of the second (0 before it): scores
  # min(2, 1) + 0.04 = 1.04 vs min(0, 3) + 0.04; the first window owns token 2, the second
  # owns token 3 (min(3, 0) vs min(1, 2)).
  windows = [Window(0, 0, 4, OFFSET), Window(0, 2, 4, OFFSET)]
  best = max_context_rows([(0, 4), (2, 4)], [0, 1], 6)
  assert best.tolist() == [0, 0, 0, 1, 1, 1]
  # The second window is very sure of a span starting at token 2 (its pos 3): not admissible.
  first = _logits(12, {5: 1.0}, {5: 1.0})
  second = _logits(12, {3: 9.0, 4: 2.0}, {4: 9.0})
  p = decode(CONTEXT, SPANS, windows, [first, second], best, [0, 1])
  assert p.text == 'the'  # second window, start token 3 at its pos 4: score 2 + 9
  assert [c.text for c in p.nbest][:2] == ['the', 'visited']


def test_equal_texts_are_merged_keeping_the_best():
  context = 'the cat saw the cat'
  spans = np.array([[0, 3], [4, 7], [8, 11], [12, 15], [16, 19]])
  best = max_context_rows([(0, 5)], [0], 5)
  # 'the cat' twice: tokens (0, 1) score 3 + 3, tokens (3, 4) score 2 + 2
  logits = _logits(12, {3: 3.0, 6: 2.0}, {4: 3.0, 7: 2.0})
  p = decode(context, spans, [Window(0, 0, 5, OFFSET)], [logits], best, [0])
  texts = [c.text for c in p.nbest]
  assert texts.count('the cat') == 1 and p.nbest[0].score == 6.0 and p.start == 0
  assert 'the cat saw the cat' in texts


def test_v2_null_score_is_the_lowest_over_windows_and_the_threshold_decides():
  windows = [Window(0, 0, 4, OFFSET), Window(0, 2, 4, OFFSET)]
  best = max_context_rows([(0, 4), (2, 4)], [0, 1], 6)
  a = _logits(12, {0: 4.0, 3: 3.0}, {0: 4.0, 3: 3.0})  # null 8, 'Zoë' 6
  b = _logits(12, {0: 1.0, 6: 2.0}, {0: 2.0, 6: 2.0})  # null 3 (the lower), '.' (pos 6) 4
  p = decode(CONTEXT, SPANS, windows, [a, b], best, [0, 1], version_2=True)
  # null 3; best non-null 'Zoë' 6: diff 3 - 6 = -3 <= threshold 0, answered
  assert p.text == 'Zoë' and p.null_score_diff == pytest.approx(-3.0)
  assert '' in [c.text for c in p.nbest] and p.best_span.text == 'Zoë'
  p = decode(CONTEXT, SPANS, windows, [a, b], best, [0, 1], version_2=True,
             null_score_diff_threshold=-4.0)
  assert p.text == '' and p.start == -1 and p.score == pytest.approx(3.0)
  assert p.best_span.text == 'Zoë'  # still reported, for the threshold search
