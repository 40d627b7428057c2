"""The one parser of `--exp NAME:OPTION,OPTION`: every experiment hands it its named variants.

A variant is a function that edits the config in place (`smoke` shrinks a run to seconds on one
CPU). Options apply left to right; an unknown one is a ConfigError listing the known ones, so a
typo never silently runs the full-size experiment.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ml_collections import config_dict

from encoder.errors import ConfigError

Variants = dict[str, Callable[[config_dict.ConfigDict], Any]]


def apply_variants(config: config_dict.ConfigDict, arg: str | None,
                   options: Variants) -> config_dict.ConfigDict:
  """Applies each comma-separated option of `arg` (the text after `NAME:`) to `config`."""
  for option in filter(None, (arg or '').split(',')):
    if option not in options:
      shown = repr(option)[1:-1]  # one line, whatever was typed
      raise ConfigError(f"unknown variant '{shown}' for experiment {config.experiment} "
                        f"(known: {', '.join(options)})")
    options[option](config)
  return config
