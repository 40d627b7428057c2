"""SQuAD exact match and F1 by the rules of the official v1.1 and v2.0 evaluation scripts.

Answers are normalised (lower case, punctuation removed, the articles a/an/the removed,
whitespace collapsed); EM compares normalised strings, F1 their bags of tokens, and each
question takes its best score over the gold answers. The official scripts print percentages;
we return fractions in [0, 1], as every other task here reports accuracy and F1.

The two scripts differ in two places, both kept: v2.0 drops gold answers that normalise to
nothing (a question left with none is unanswerable, gold ''), and v2.0's F1 is 1 when both
prediction and gold have no tokens (v1.1 says 0).
"""

from __future__ import annotations

import collections
import re
import string

_ARTICLES = re.compile(r'\b(a|an|the)\b', re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
  text = ''.join(ch for ch in text.lower() if ch not in _PUNCTUATION)
  return ' '.join(_ARTICLES.sub(' ', text).split())


def exact(prediction: str, gold: str) -> float:
  return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str, version_2: bool = False) -> float:
  pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
  if version_2 and (not pred or not ref):
    return float(pred == ref)
  same = sum((collections.Counter(pred) & collections.Counter(ref)).values())
  if same == 0:
    return 0.0
  precision, recall = same / len(pred), same / len(ref)
  return 2 * precision * recall / (precision + recall)


def question_scores(prediction: str, golds: list[str], version_2: bool = False
                    ) -> tuple[float, float]:
  """(EM, F1) of one question: the best over its gold answers (v2.0: '' if none is left)."""
  if version_2:
    golds = [g for g in golds if normalize_answer(g)] or ['']
  return (max(exact(prediction, g) for g in golds),
          max(f1(prediction, g, version_2) for g in golds))


def squad_v1(golds: dict[str, list[str]], predictions: dict[str, str]) -> dict:
  """`exact_match` and `f1` over every gold question; a question without a prediction scores 0
  (the official script does the same, after a message)."""
  em = f = 0.0
  for qid, answers in golds.items():
    if qid in predictions:
      e, s = question_scores(predictions[qid], answers)
      em, f = em + e, f + s
  n = max(len(golds), 1)
  return {'exact_match': em / n, 'f1': f / n}


def best_threshold(predictions: dict[str, str], scores: dict[str, float],
                   na_probs: dict[str, float], has_answer: dict[str, bool]
                   ) -> tuple[float, float]:
  """The official `find_best_thresh`: answering exactly the questions whose no-answer score is
  at most the threshold, the best total score and the threshold reaching it (ties: lowest)."""
  current = best = sum(1 for qid in scores if not has_answer[qid])
  threshold = 0.0
  for qid in sorted(na_probs, key=lambda q: na_probs[q]):
    if qid not in scores:
      continue
    if has_answer[qid]:
      current += scores[qid]
    elif predictions[qid]:
      current -= 1
    if current > best:
      best, threshold = current, na_probs[qid]
  return best / max(len(scores), 1), threshold


def squad_v2(golds: dict[str, list[str]], predictions: dict[str, str],
             na_probs: dict[str, float] | None = None,
             search_predictions: dict[str, str] | None = None) -> dict:
  """`exact_match`, `f1`, their `has_ans_`/`no_ans_` parts, and with `na_probs` (the no-answer
  score per question) `best_exact_match`/`best_f1` and their `_threshold`s.

  The threshold search follows the official script; it runs on `search_predictions` when given
  (the best non-null span of every question, so every threshold can be tried), else on
  `predictions` (what the official script sees given our predictions and na-prob files).
  """
  has_answer = {q: bool(answers) for q, answers in golds.items()}  # the script's rule: any gold
  ems, f1s = {}, {}
  for qid, answers in golds.items():
    ems[qid], f1s[qid] = question_scores(predictions.get(qid, ''), answers, version_2=True)
  out = _means(ems, f1s, list(golds), '')
  for prefix, wanted in (('has_ans_', True), ('no_ans_', False)):
    subset = [q for q in golds if has_answer[q] is wanted]
    if subset:
      out.update(_means(ems, f1s, subset, prefix))
  if na_probs is not None:
    search = predictions if search_predictions is None else search_predictions
    raw = {q: question_scores(search.get(q, ''), golds[q], version_2=True) for q in golds}
    for name, k in (('exact_match', 0), ('f1', 1)):
      scores = {q: v[k] for q, v in raw.items()}
      value, threshold = best_threshold(search, scores, na_probs, has_answer)
      out[f'best_{name}'], out[f'best_{name}_threshold'] = value, float(threshold)
  return out


def _means(ems: dict, f1s: dict, qids: list[str], prefix: str) -> dict:
  n = max(len(qids), 1)
  return {f'{prefix}exact_match': sum(ems[q] for q in qids) / n,
          f'{prefix}f1': sum(f1s[q] for q in qids) / n}
