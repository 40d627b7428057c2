"""A train record's window saved part way (with a checkpoint) and resumed adds up to the very
sums of the window never interrupted, bit for bit, for both strategies' metric layouts."""

import json

import numpy as np
import pytest

from encoder.train.strategy import MeshStrategy, PmapStrategy
from encoder.train.train_loop import LogWindow

BATCH = {'input_ids': np.zeros((4, 6), np.int32),
         'input_mask': np.array([[1] * 6, [1] * 4 + [0] * 2, [1] * 3 + [0] * 3, [1] + [0] * 5])}


def _steps(rows: tuple[int, ...]) -> list[dict]:
  """Six steps' psum-ed sums: float32 values whose sum depends on the order of the additions
  (1e8 swallows a 3 it meets alone, not a 6), and an integer count."""
  values = [1e8, 3.0, 3.0, 3.0, -1e8, 0.5]
  return [{'loss': np.full(rows, v, np.float32), 'grad_norm': np.full(rows, v / 2, np.float32),
           'correct': np.full(rows, i, np.int32)} for i, v in enumerate(values)]


@pytest.mark.parametrize('strategy,rows', [(PmapStrategy(), (8,)),
                                           (MeshStrategy.__new__(MeshStrategy), ())])
def test_a_window_saved_part_way_and_resumed_sums_bit_for_bit(strategy, rows):
  steps = _steps(rows)
  straight = LogWindow()
  for sums in steps:
    straight.add(BATCH, sums, 0.0)
  first = LogWindow()
  for sums in steps[:2]:
    first.add(BATCH, sums, 0.0)
  second = LogWindow.resumed(json.loads(json.dumps(first.state(strategy))))  # as checkpointed
  for sums in steps[2:4]:
    second.add(BATCH, sums, 0.0)
  third = LogWindow.resumed(json.loads(json.dumps(second.state(strategy))))
  for sums in steps[4:]:
    third.add(BATCH, sums, 0.0)
  want = straight.state(strategy)
  assert third.state(strategy) == want
  assert want['steps'] == 6 and want['real_tokens'] == 6 * 14 and want['sums']['correct'] == 15
  # Summed in parts and the parts added, the float32 loss comes out otherwise: the check bites.
  parts = [np.float32(sum(np.float32(s['loss'].ravel()[0]) for s in steps[a:b]))
           for a, b in ((0, 2), (2, 4), (4, 6))]
  assert float(parts[0] + parts[1] + parts[2]) != want['sums']['loss']


def test_an_empty_window_saves_nothing_and_resumes_empty():
  assert LogWindow().state(PmapStrategy()) is None
  window = LogWindow.resumed(None)
  assert (window.steps, window.sums, window.carried) == (0, [], None)
