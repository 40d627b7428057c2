"""SQuAD-format cloze questions over paragraphs of real text: one of a paragraph's sentences
with one content word blanked out is the question, that word (a character span of the
paragraph) the answer. For benchmarks/qa.py and benchmarks/finetune_speed.py."""

from __future__ import annotations

import json
import random
import re

BLANK = '_____'
_WORD = re.compile(r'\b[A-Za-z][a-z]{4,}\b')  # lower-case content words of 5+ letters
_STOP = frozenset('about above after again against because before being below between could '
                  'during every other should their there these those through under until which '
                  'while would where whose value values return returns'.split())


def cloze_paragraphs(documents: list[list[str]], n: int, rng: random.Random,
                     sentences_per_paragraph: int = 3, max_chars: int = 320) -> list[dict]:
  """SQuAD-format paragraphs of one cloze question each, from documents in the given order."""
  out = []
  for doc in documents:
    prose = [s for s in doc if 40 <= len(s) <= 200 and not s.lstrip().startswith(('>>>', '$'))]
    size = sentences_per_paragraph
    for k in range(0, len(prose) - size + 1, size):  # consecutive, non-overlapping paragraphs
      if len(out) >= n:
        return out
      sentences = prose[k:k + size]
      context = ' '.join(sentences)
      which = rng.randrange(size)
      words = [m for m in _WORD.finditer(sentences[which]) if m.group().lower() not in _STOP]
      if len(context) > max_chars or not words:
        continue
      word = rng.choice(words)
      question = sentences[which][:word.start()] + BLANK + sentences[which][word.end():]
      start = sum(len(s) + 1 for s in sentences[:which]) + word.start()
      assert context[start:start + len(word.group())] == word.group()
      out.append({'context': context, 'qas': [{
          'id': f'c{len(out)}', 'question': question,
          'answers': [{'text': word.group(), 'answer_start': start}]}]})
  return out


def write_squad(path: str, paragraphs: list[dict]) -> str:
  """The paragraphs as a SQuAD v1.1 JSON file of one article; returns `path`."""
  with open(path, 'w', encoding='utf-8') as f:
    json.dump({'version': '1.1', 'data': [{'title': 'python_docs', 'paragraphs': paragraphs}]},
              f)
  return path
