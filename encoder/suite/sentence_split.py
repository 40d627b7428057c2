"""A held-out dev slice of whole sentences for a training file that holds every phrase of
each sentence's parse tree (GLUE's SST-2: 67,349 phrases from 6,885 sentences).

Held out phrase by phrase, such a slice scores phrases the model trained on: 62% of a held-out
tenth of SST-2's phrases lie verbatim inside a training phrase (measured 2026-12-05), and the
average held-out phrase is 9 words against the 19 of a sentence. GLUE's own dev set is whole
sentences that no training phrase comes from, so the slice is built the same way: the dev set
is whole sentences (the phrases inside no longer phrase), and every phrase inside a dev
sentence leaves the training set.
"""

from __future__ import annotations


def spans(words: list[str]) -> set[str]:
  """Every contiguous run of `words`, joined by single spaces."""
  out = set()
  for start in range(len(words)):
    text = words[start]
    out.add(text)
    for word in words[start + 1:]:
      text = f'{text} {word}'
      out.add(text)
  return out


def whole_sentences(texts: list[str]) -> set[int]:
  """Indices of the texts that lie inside no longer text (word-wise): the sentences."""
  words = [t.split() for t in texts]
  inside: set[str] = set()
  sentences = set()
  for i in sorted(range(len(texts)), key=lambda i: -len(words[i])):
    if ' '.join(words[i]) not in inside:
      sentences.add(i)
      inside |= spans(words[i])
  return sentences


def outside(texts: list[str], dev: list[int], order: list[int]) -> list[int]:
  """The indices in `order` whose text lies inside none of the `dev` texts (nor is one)."""
  held: set[str] = set()
  for i in dev:
    held |= spans(texts[i].split())
  return [i for i in order if ' '.join(texts[i].split()) not in held]
