"""Start/end logits of an example's windows -> its answer, as run_squad's `write_predictions`.

Per window, the `n_best_size` highest start and end positions are paired; a pair is kept when
both lie in the window's context, end >= start, the span has at most `max_answer_length`
tokens, and the window is the one giving the start token its most context (so a token seen by
two windows is judged once). Candidates of all windows are ranked by start + end logit, equal
texts merged, and the text is quoted from the original context by character offsets.

SQuAD 2.0 adds the null answer: its score is the lowest [CLS] start + end logit over the
windows; the question is answered when null score - best non-null score <= the threshold.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from encoder.data.finetune.squad_features import trim_span

NO_SPAN_DIFF = 1e9  # v2's null score difference when no window admits any span (JSON-safe)

@dataclasses.dataclass
class Candidate:
  text: str
  start: int  # character offsets in the context, end exclusive; -1 for the null answer
  end: int
  start_logit: float
  end_logit: float
  probability: float = 0.0

  @property
  def score(self) -> float:
    return self.start_logit + self.end_logit


@dataclasses.dataclass
class Prediction:
  text: str  # '' for "no answer"
  start: int
  end: int
  score: float  # start + end logit of the chosen span (of the null answer when unanswered)
  probability: float  # softmax of the scores over the n-best list
  null_score_diff: float | None  # v2: null score - best non-null score (None for v1)
  nbest: list[Candidate]
  best_span: Candidate | None  # the best non-null candidate, answered or not


def top_indices(logits: np.ndarray, n: int) -> np.ndarray:
  """The n largest positions, highest first (ties: lower position first)."""
  return np.argsort(-logits, kind='stable')[:n]


def window_candidates(start_logits: np.ndarray, end_logits: np.ndarray, offset: int,
                      doc_start: int, doc_length: int, is_max_context: np.ndarray,
                      n_best_size: int, max_answer_length: int
                      ) -> list[tuple[float, float, int, int]]:
  """(start logit, end logit, first, last context token) of every admissible pair."""
  starts, ends = top_indices(start_logits, n_best_size), top_indices(end_logits, n_best_size)
  s, e = np.meshgrid(starts, ends, indexing='ij')
  s, e = s.ravel(), e.ravel()
  in_context = ((s >= offset) & (s < offset + doc_length) & (e >= offset)
                & (e < offset + doc_length))
  ok = in_context & (e >= s) & (e - s + 1 <= max_answer_length)
  ok[ok] &= is_max_context[doc_start + s[ok] - offset]
  return [(float(start_logits[a]), float(end_logits[b]), doc_start + a - offset,
           doc_start + b - offset) for a, b in zip(s[ok], e[ok], strict=True)]


def decode(context: str, spans: np.ndarray, windows: list, logits: list[tuple], best_row:
           np.ndarray, rows: list[int], *, n_best_size: int = 20, max_answer_length: int = 30,
           version_2: bool = False, null_score_diff_threshold: float = 0.0) -> Prediction:
  """The answer of one example from its windows' logits.

  `windows[k]` (a squad_features.Window) was feature row `rows[k]` with logits `logits[k]` =
  (start, end), each [seq]; `best_row[j]` is the row giving context token j its most context.
  """
  prelim, null = [], None
  for window, row, (start_logits, end_logits) in zip(windows, rows, logits, strict=True):
    if version_2:
      score = float(start_logits[0] + end_logits[0])
      if null is None or score < null[0] + null[1]:
        null = (float(start_logits[0]), float(end_logits[0]))
    is_max = best_row == row
    for sl, el, first, last in window_candidates(
        start_logits, end_logits, window.offset, window.doc_start, window.doc_length, is_max,
        n_best_size, max_answer_length):
      prelim.append((sl + el, sl, el, first, last))
  if null is not None:
    prelim.append((null[0] + null[1], null[0], null[1], -1, -1))
  prelim.sort(key=lambda p: -p[0])  # stable: equal scores keep window order, as run_squad
  nbest, seen = [], set()
  for _, sl, el, first, last in prelim:
    if len(nbest) >= n_best_size:
      break
    if first < 0:
      text, start, end = '', -1, -1
    else:
      start, end = trim_span(context, int(spans[first, 0]), int(spans[last, 1]))
      text = context[start:end]
      if not text:  # only whitespace or zero-width tokens: nothing to quote
        continue
    if text in seen:
      continue
    seen.add(text)
    nbest.append(Candidate(text, start, end, sl, el))
  if null is not None and '' not in seen:
    nbest.append(Candidate('', -1, -1, *null))
  if not nbest:
    nbest.append(Candidate('', -1, -1, 0.0, 0.0))
  scores = np.array([c.score for c in nbest])
  probs = np.exp(scores - scores.max())
  probs /= probs.sum()
  for c, p in zip(nbest, probs, strict=True):
    c.probability = float(p)
  best_span = next((c for c in nbest if c.text), None)
  if not version_2:
    top = nbest[0]
    return Prediction(top.text, top.start, top.end, top.score, top.probability, None, nbest,
                      best_span)
  null_entry = next(c for c in nbest if c.start < 0)
  diff = NO_SPAN_DIFF if best_span is None else null[0] + null[1] - best_span.score
  chosen = best_span if diff <= null_score_diff_threshold else null_entry
  return Prediction(chosen.text, chosen.start, chosen.end, chosen.score, chosen.probability,
                    diff, nbest, best_span)


def decode_options(data_config) -> dict:
  """The decoding settings of `data_config` (a ConfigDict or the dict of a saved config)."""
  get = data_config.get
  return {'n_best_size': int(get('n_best_size', 20)),
          'max_answer_length': int(get('max_answer_length', 30)),
          'version_2': bool(get('version_2_with_negative', False)),
          'null_score_diff_threshold': float(get('null_score_diff_threshold', 0.0))}


def decode_all(examples: list, features, start_logits: np.ndarray,
               end_logits: np.ndarray, options: dict) -> list:
  """A Prediction for every example whose windows the logits cover (else None)."""
  by_example: dict[int, list[int]] = {}
  for row, w in enumerate(features.windows):
    by_example.setdefault(w.example, []).append(row)
  out = []
  for i, example in enumerate(examples):
    rows = by_example.get(i, [])
    if not rows or rows[-1] >= len(start_logits):
      out.append(None)
      continue
    out.append(decode(
        example.context, features.spans[i], [features.windows[r] for r in rows],
        [(start_logits[r], end_logits[r]) for r in rows], features.best_window[i], rows,
        **options))
  return out
