"""sentence-transformers directories: how a model pools, normalises and truncates, in and out.

A sentence-transformers model is a Hugging Face model plus a pipeline in `modules.json`:
`Transformer` (the model, in the module's `path`, with `sentence_bert_config.json` holding
`max_seq_length`), `Pooling` (`1_Pooling/config.json`: which of CLS / mean / max / last token)
and optionally `Normalize` (unit-length vectors). What `embed` must do to give that model's
vectors is those three settings, which `--from-hf` records in the config's `embed` section and
`--to-hf` writes back as the same three modules, so `SentenceTransformer(dir)` loads the
export. A pipeline with anything else (a `Dense` projection, max pooling, ...) is refused in
one line naming the module: its vectors could not be reproduced here.
"""

from __future__ import annotations

import json
import os

from encoder import storage
from encoder.errors import CheckpointError

MODULES = 'modules.json'
_KIND = 'sentence_transformers.models.'
# Pooling's config keys and our `embed.pooling` names (the other modes are refused).
POOLING_MODES = {'pooling_mode_cls_token': 'cls', 'pooling_mode_mean_tokens': 'mean',
                 'pooling_mode_lasttoken': 'last'}
_OTHER_MODES = ('pooling_mode_max_tokens', 'pooling_mode_mean_sqrt_len_tokens',
                'pooling_mode_weightedmean_tokens')


def is_sentence_transformers(directory: str) -> bool:
  return storage.isfile(os.path.join(directory, MODULES))


def read(directory: str) -> tuple[str, dict]:
  """(the directory of its Transformer module, the `embed` fields) of a sentence-transformers
  directory; a one-line CheckpointError for a pipeline `embed` cannot reproduce."""
  modules = _json(os.path.join(directory, MODULES))
  kinds = [str(m.get('type', '')) for m in modules] if isinstance(modules, list) else []
  names = [k[len(_KIND):] if k.startswith(_KIND) else k for k in kinds]
  if not names or names[0] != 'Transformer':
    raise CheckpointError(f"'{directory}/{MODULES}' does not start with a Transformer module "
                          f'(it lists {names or "nothing"}): not a model this converter reads')
  extra = [n for n in names[1:] if n not in ('Pooling', 'Normalize')]
  if extra or names.count('Pooling') != 1 or names.index('Pooling') != 1:
    raise CheckpointError(f"sentence-transformers pipeline {' -> '.join(names)} is not "
                          'Transformer -> Pooling [-> Normalize]: embed could not reproduce '
                          f'its vectors ({", ".join(extra) or "the module order"})')
  model_dir = os.path.join(directory, modules[0].get('path', '') or '')
  fields = {'sentence_transformers': True, 'normalize': 'Normalize' in names,
            'pooling': _pooling(os.path.join(directory, modules[1].get('path', '1_Pooling'))),
            'max_seq_length': 0}
  settings = os.path.join(model_dir, 'sentence_bert_config.json')
  if storage.isfile(settings):
    fields['max_seq_length'] = int(_json(settings).get('max_seq_length') or 0)
  return model_dir, fields


def _pooling(directory: str) -> str:
  config = _json(os.path.join(directory, 'config.json'))
  chosen = [ours for key, ours in POOLING_MODES.items() if config.get(key)]
  other = [key for key in _OTHER_MODES if config.get(key)]
  if other or len(chosen) != 1:
    modes = ', '.join(other + [k for k, v in POOLING_MODES.items() if v in chosen]) or 'none'
    raise CheckpointError(f"sentence-transformers pooling {modes} in '{directory}': embed "
                          f"pools by exactly one of {', '.join(POOLING_MODES)}")
  return chosen[0]


def write(out: str, embed: dict, hidden_size: int, max_length: int) -> None:
  """The modules of a sentence-transformers directory whose Transformer is the Hugging Face
  model already written at `out` (module path ''), pooling and normalising as `embed` says."""
  modules = [{'idx': 0, 'name': '0', 'path': '', 'type': _KIND + 'Transformer'},
             {'idx': 1, 'name': '1', 'path': '1_Pooling', 'type': _KIND + 'Pooling'}]
  if embed['normalize']:
    modules.append({'idx': 2, 'name': '2', 'path': '2_Normalize', 'type': _KIND + 'Normalize'})
    storage.makedirs(os.path.join(out, '2_Normalize'))
  _write_json(os.path.join(out, MODULES), modules)
  _write_json(os.path.join(out, 'sentence_bert_config.json'),
              {'max_seq_length': int(embed['max_seq_length'] or max_length),
               'do_lower_case': False})
  pooling = {'word_embedding_dimension': hidden_size,
             **{key: ours == embed['pooling'] for key, ours in POOLING_MODES.items()},
             **{key: False for key in _OTHER_MODES}, 'include_prompt': True}
  storage.makedirs(os.path.join(out, '1_Pooling'))
  _write_json(os.path.join(out, '1_Pooling', 'config.json'), pooling)


def _json(path: str):
  try:
    return json.loads(storage.read_text(path))
  except FileNotFoundError:
    raise CheckpointError(f"'{path}' is missing: an incomplete sentence-transformers "
                          'directory') from None
  except json.JSONDecodeError as e:
    raise CheckpointError(f"'{path}' is not valid JSON ({e.msg}, line {e.lineno})") from None


def _write_json(path: str, value) -> None:
  with storage.open(path, 'w', encoding='utf-8') as f:
    f.write(json.dumps(value, indent=2) + '\n')
