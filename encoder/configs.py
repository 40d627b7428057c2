"""Experiments and typed `--config.KEY=VALUE` overrides.

An experiment is `experiments/NAME.py` with `get_config(arg) -> ConfigDict` and a one-line
`DESCRIPTION`. Overrides are parsed by the type of the field they replace, so a typo or a
wrong type is a `ConfigError` naming the closest key, never a silently added field.
"""

from __future__ import annotations

import ast
import copy
import difflib
import importlib
import json
import math
import pkgutil
from typing import Any

from ml_collections import config_dict

from encoder.errors import ConfigError

EXPERIMENTS_PACKAGE = 'experiments'


def list_experiments() -> dict[str, str]:
  """Every experiment name with its one-line description."""
  package = importlib.import_module(EXPERIMENTS_PACKAGE)
  result = {}
  for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
    if info.name.startswith('_'):
      continue
    module = importlib.import_module(f'{EXPERIMENTS_PACKAGE}.{info.name}')
    if hasattr(module, 'get_config'):
      result[info.name] = getattr(module, 'DESCRIPTION', (module.__doc__ or '').split('\n')[0])
  return result


def experiment_module(spec: str):
  """The module of experiment `NAME[:ARG]`; ConfigError naming the closest if unknown."""
  name = spec.partition(':')[0]
  known = list_experiments()
  if name not in known:
    hint = difflib.get_close_matches(name, known, n=1)
    did_you_mean = f"; did you mean '{hint[0]}'?" if hint else ''
    raise ConfigError(
        f"unknown experiment '{_shown(name)}'{did_you_mean} (see --list)")
  return importlib.import_module(f'{EXPERIMENTS_PACKAGE}.{name}')


def load_experiment(spec: str) -> config_dict.ConfigDict:
  """`NAME[:ARG]` -> the experiment's config with its variant options applied."""
  arg = spec.partition(':')[2]
  return experiment_module(spec).get_config(arg or None)


def flatten_keys(config: config_dict.ConfigDict, prefix: str = '') -> list[str]:
  """Dotted paths of every leaf field."""
  keys = []
  for key, value in config.items():
    path = f'{prefix}{key}'
    if isinstance(value, config_dict.ConfigDict):
      keys.extend(flatten_keys(value, path + '.'))
    else:
      keys.append(path)
  return keys


def nested_get(tree: dict, keys: list[str]):
  """`tree[k1][k2]...`, or None where a key is missing (a field added to the code since a
  config.json was written, a parameter a checkpoint lacks)."""
  for key in keys:
    if not isinstance(tree, dict) or key not in tree:
      return None
    tree = tree[key]
  return tree


def nested_set(tree: dict, keys: list[str], value) -> None:
  """`tree[k1][k2]... = value`, making the dicts on the way."""
  *parents, leaf = keys
  for key in parents:
    tree = tree.setdefault(key, {})
  tree[leaf] = value


def _shown(text: str) -> str:
  """The override text as quoted in an error: one line, not too long."""
  shown = repr(text)[1:-1]
  return shown if len(shown) <= 60 else shown[:57] + '...'


def parse_value(text: str, field_type: type | None, key: str) -> Any:
  """Parses an override's text as the type of the field it replaces."""
  if field_type is bool:
    lowered = text.strip().lower()
    if lowered in ('true', '1', 'yes'):
      return True
    if lowered in ('false', '0', 'no'):
      return False
    raise ConfigError(f"--config.{key} expects true or false, got '{_shown(text)}'")
  if field_type is int:
    try:
      return int(text.replace('_', ''))
    except ValueError:
      try:  # accept 1e4 as an integer when it is one
        as_float = float(text)
      except ValueError:
        as_float = None
      if as_float is not None and as_float.is_integer():
        return int(as_float)
      raise ConfigError(f"--config.{key} expects an integer, got '{_shown(text)}'") from None
  if field_type is float:
    try:
      value = float(text.replace('_', '') if text.strip('_') else text)
    except ValueError:
      value = None
    if value is None or not math.isfinite(value):
      why = '' if value is None else ' (NaN and infinity are refused)'
      raise ConfigError(f"--config.{key} expects a number, got '{_shown(text)}'{why}")
    return value
  if field_type is str:
    return text
  try:  # an untyped field (None or a container): a Python literal, else the string itself
    return ast.literal_eval(text)
  except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
    return text


def apply_override(config: config_dict.ConfigDict, key: str, text: str) -> None:
  """Sets `config.<key>` from the override text, strictly."""
  *parents, leaf = key.split('.')
  node = config
  for part in parents:
    child = node.get(part) if isinstance(node, config_dict.ConfigDict) else None
    if not isinstance(child, config_dict.ConfigDict):
      _unknown_key(config, key)
    node = child
  if leaf not in node:
    _unknown_key(config, key)
  if isinstance(node[leaf], config_dict.ConfigDict):
    raise ConfigError(f"--config.{key} is a group of fields; set one of its keys, "
                      f"e.g. --config.{key}.{next(iter(node[leaf].keys()))}=...")
  value = parse_value(text, node.get_type(leaf), key)
  try:
    node[leaf] = value
  except TypeError as e:
    raise ConfigError(f'--config.{key}={_shown(text)}: {e}') from None


def _unknown_key(config: config_dict.ConfigDict, key: str) -> None:
  close = difflib.get_close_matches(key, flatten_keys(config), n=1, cutoff=0.5)
  hint = f"; did you mean '{close[0]}'?" if close else ''
  raise ConfigError(f"unknown config key '{_shown(key)}'{hint} (see --print_config)")


def apply_overrides(config: config_dict.ConfigDict, overrides: list[str]) -> None:
  """Applies `KEY=VALUE` strings (the `--config.` prefix already stripped) in order."""
  for item in overrides:
    key, sep, text = item.partition('=')
    if not sep:
      raise ConfigError(f"override '--config.{_shown(item)}' needs a value: "
                        f'--config.{_shown(key)}=VALUE')
    apply_override(config, key.strip(), text)


def to_json(config: config_dict.ConfigDict) -> str:
  return json.dumps(config.to_dict(), indent=2, sort_keys=True)


def from_json(text: str) -> config_dict.ConfigDict:
  return config_dict.ConfigDict(json.loads(text))


def with_fields(config: config_dict.ConfigDict, fields: dict[str, Any]
                ) -> config_dict.ConfigDict:
  """A copy of `config` with the dotted `fields` set (the original is left as it is)."""
  config = copy.deepcopy(config)
  for key, value in fields.items():
    *parents, leaf = key.split('.')
    node = config
    for part in parents:
      node = node[part]
    node[leaf] = value
  return config
