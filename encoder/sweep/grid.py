"""A sweep's grid: `--sweep` specs -> typed axes -> one list of overrides per run, and names.

Values are parsed as the config field they set when the spec is read, so a misspelt key or a
value of the wrong type is refused before any run starts, and two spellings of one value
(`0.30`, `0.3`) name the same run. A named sweep may also list whole runs (`Arm`s: a name and
its overrides) where a grid cannot say it, such as a ladder that turns on one change per run,
cumulatively.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import re

from ml_collections import config_dict

from encoder import configs
from encoder.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Arm:
  """One run of a named sweep given whole: `name` (its directory) and its overrides."""
  name: str
  overrides: tuple[str, ...]


def parse_sweep(spec: str, config: config_dict.ConfigDict, experiment,
                user_keys: frozenset = frozenset()) -> list[tuple[str, list]]:
  """`KEY=V1,V2` -> [(KEY, [values typed like config.KEY])]; a bare NAME -> the experiment's
  named sweep, typed the same way.

  A named sweep may fix settings for all its runs (a key with one value, e.g. its step budget);
  a key the user set with `--config.KEY=...` keeps the user's value instead.
  """
  if '=' in spec:
    key, _, values = spec.partition('=')
    texts = [v.strip() for v in values.split(',')]
    if not values.strip() or any(not v for v in texts):
      raise ConfigError(f"--sweep {spec}: give one or more comma-separated values, e.g. {key}=1,2")
    axes = [(key.strip(), texts)]
  else:
    axes = [(key, values) for key, values in named_sweep(experiment, spec)
            if not (len(values) == 1 and key in user_keys)]
  return [(key, [_typed_arm(config, v) if isinstance(v, Arm) else _typed(config, key, str(v))
                 for v in values]) for key, values in axes]


def named_sweep(experiment, name: str) -> list[tuple[str, list]]:
  """The axes of the experiment's sweep `name`: its module's `SWEEPS` maps each name to a list
  of (key, values) axes, or to a function that builds that list (a ladder of Arms)."""
  sweeps = getattr(experiment, 'SWEEPS', None)
  if not sweeps:
    raise ConfigError(f"--sweep {name}: expected KEY=V1,V2 (the experiment names no sweeps)")
  if name not in sweeps:
    exp = experiment.__name__.rpartition('.')[2]
    raise ConfigError(f"unknown sweep '{name}' for {exp} (known: {', '.join(sweeps)})")
  axes = sweeps[name]
  return axes() if callable(axes) else axes


def _typed_arm(config: config_dict.ConfigDict, arm: Arm) -> Arm:
  """`arm` with each override's value typed like its field (the same checks as a grid's)."""
  typed = []
  for item in arm.overrides:
    key, _, text = item.partition('=')
    typed.append(f'{key}={override_text(_typed(config, key, text))}')
  return Arm(_safe(arm.name), tuple(typed))


def _typed(config: config_dict.ConfigDict, key: str, text: str):
  """`text` as `config.KEY` would hold it: set through the override parser (configs.parse_value
  with the field's type) on a copy, so errors read as they do for `--config.KEY=...`."""
  probe = copy.deepcopy(config)
  configs.apply_override(probe, key, text)
  return functools.reduce(getattr, key.split('.'), probe)


def override_text(value) -> str:
  """The override text that parses back to `value`: booleans as `true`/`false`."""
  return str(value).lower() if isinstance(value, bool) else str(value)


def expand(axes: list[tuple[str, list]]) -> list[list[str]]:
  """The grid: every combination as a list of `KEY=VALUE` overrides."""
  return [overrides for _, overrides in named_runs(axes)]


def named_runs(axes: list[tuple[str, list]]) -> list[tuple[str, list[str]]]:
  """Every run of the grid as (directory name, overrides): an axis of `Arm`s contributes each
  arm's overrides and name, the others `KEY=VALUE` (named as `run_name` names them; keys with
  one value across the sweep left out of the name, as `fixed_keys` says)."""
  keys = [key for key, _ in axes]
  if len(set(keys)) != len(keys):
    raise ConfigError(f"--sweep names a key twice: {', '.join(keys)}")
  fixed = fixed_keys(axes)
  out = []
  for combo in itertools.product(*(values for _, values in axes)):
    names, overrides = [], []
    for key, value in zip(keys, combo, strict=True):
      if isinstance(value, Arm):
        names.append(value.name)
        overrides.extend(value.overrides)
      else:
        overrides.append(f'{key}={override_text(value)}')
        if key not in fixed:
          names.append(run_name(overrides[-1:]))
    out.append((_safe(','.join(names)) or 'default', overrides))
  return out


def run_configs(config: config_dict.ConfigDict, axes: list[tuple[str, list]]
                ) -> list[tuple[str, list[str], config_dict.ConfigDict]]:
  """Every run as (name, overrides, config): `named_runs`, each with a copy of `config` that
  has its overrides applied (the sweep runs these; benchmarks and tests read them)."""
  out = []
  for name, overrides in named_runs(axes):
    run = copy.deepcopy(config)
    configs.apply_overrides(run, overrides)
    out.append((name, overrides, run))
  return out


def run_name(overrides: list[str], fixed: frozenset = frozenset()) -> str:
  """`model.attention=causal` + `data.nsp=false` -> `attention=causal,nsp=false`: readable and
  safe as a directory name. Keys in `fixed` (one value across the whole grid) are left out: they
  tell the runs of one sweep nothing apart, and the report lists them with each run."""
  parts = []
  for item in overrides:
    key, _, value = item.partition('=')
    if key not in fixed:
      parts.append(f"{key.split('.')[-1]}={value}")
  return _safe(','.join(parts)) or 'default'


def fixed_keys(axes: list[tuple[str, list]]) -> frozenset:
  """Keys with a single value, when others vary: settings shared by every run of the grid."""
  single = frozenset(key for key, values in axes if len(values) == 1)
  return single if len(single) < len(axes) else frozenset()


def sweep_dir_name(args) -> str:
  """Default sweep directory: the experiment and the swept keys, e.g. `mlm_nsp_tiny-attention`."""
  keys = [spec.partition('=')[0].split('.')[-1] for spec in args.sweep]
  return _safe(f"{args.exp.replace(':', '-')}-{'-'.join(keys)}")


def _safe(name: str) -> str:
  """`name` with every character a directory name should not hold replaced by `_`."""
  return re.sub(r'[^A-Za-z0-9_.,=+-]', '_', name)
