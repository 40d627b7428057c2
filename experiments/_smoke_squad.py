"""Tiny SQuAD-format files for the `:smoke` variants of qa_squad and qa_squad_v2.

Each context tells of four visits (who, where, for which company) in one paragraph longer than
a smoke window, so windows, strides and the max-context rule all run; names carry accents and
CJK, and some sentences are joined by two spaces, so the answers' character offsets are tested
too. Questions ask who went to a place; v2.0 adds unanswerable ones (a place the paragraph
never mentions). Written once, deterministically and atomically, under the temp directory.
"""

from __future__ import annotations

import json
import os
import random
import tempfile

PEOPLE = ['Alice', 'Bruno', 'Chen Wei', 'Dmitri', 'Zoë', 'Farah', 'Mårten', '山田']
PLACES = ['Paris', 'Lagos', 'Oslo', 'Lima', 'Kyōto', 'Québec', 'Cairo', '東京']
ORGS = ['Acme', 'Globex', 'Initech', 'Umbrella']


def _paragraph(rng: random.Random, version_2: bool, index: int) -> dict:
  people, places = rng.sample(PEOPLE, 4), rng.sample(PLACES, 5)
  context, qas = '', []
  for k, (person, place) in enumerate(zip(people, places[:4], strict=False)):
    if context:
      context += '  ' if k % 2 else ' '
    start = len(context)
    context += f'{person} visited {place} for {rng.choice(ORGS)} Inc. in spring.'
    qas.append({'id': f'q{index}-{k}', 'question': f'Who visited {place}?',
                'answers': [{'text': person, 'answer_start': start}]})
    if version_2:
      qas[-1]['is_impossible'] = False
  if version_2:
    qas.append({'id': f'q{index}-none', 'question': f'Who visited {places[4]}?', 'answers': [],
                'is_impossible': True})
  return {'context': context, 'qas': qas}


def _write(path: str, content: dict) -> str:
  if not os.path.exists(path):
    tmp = f'{path}.{os.getpid()}.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
      json.dump(content, f, ensure_ascii=False)
    os.replace(tmp, path)
  return path


def smoke_files(version_2: bool) -> tuple[str, str]:
  """(train path, eval path) of tiny SQuAD v1.1 (or v2.0) JSON files, written if absent."""
  directory = os.path.join(tempfile.gettempdir(), 'encoder_smoke_data')
  os.makedirs(directory, exist_ok=True)
  version = '2.0' if version_2 else '1.1'
  paths = []
  for split, n in (('train', 8), ('eval', 4)):
    rng = random.Random(f'squad-{version}-{split}')
    data = [{'title': f'visits {i}', 'paragraphs': [_paragraph(rng, version_2, i)]}
            for i in range(n)]
    name = f'squad{version}_{split}.json'
    paths.append(_write(os.path.join(directory, name), {'version': version, 'data': data}))
  return paths[0], paths[1]
