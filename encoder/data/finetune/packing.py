"""Packed fine-tuning batches (`data.packing=examples`): several short examples share one row.

Why: GLUE sentences are a few dozen tokens, so a batch padded to `data.max_seq_length` computes
mostly padding (length buckets cut that, but still pad each batch to its longest example). A
packed row holds examples back to back, each with its own [CLS] ... [SEP] and sentence A/B ids;
`input_segmentation` (the example's slot in its row, 1, 2, ...; 0 = padding) makes attention
block-diagonal and `input_positions` restart at each example, so an example gives what it gives
alone (tests/modules/test_packing.py). Per-token arrays (2-D, the rule `length_buckets.trim`
uses: tagging's labels and weights) are laid into the rows with the tokens; per-example arrays
(1-D: classification's label and weight) go into `[rows, slots]` with `cls_positions`, where
each slot's [CLS] sits in its row. Empty slots and padding carry weight 0.

Static shapes, a token budget per step: every step is R rows of L tokens (one compile), and
holds as many examples as fit (so around, not exactly, `train.batch_size`). An epoch's plan is a
pure function of (seed, epoch): the examples in `Sampler.permutation(epoch)` order, first-fit
into the R rows of the current step; an example that fits none closes the step and opens the
next. A batch is thus a pure function of its global step (exact resume), every host computes the
global step and takes its contiguous share of the rows, and rows are self-contained, so one
device and eight see the same step.
"""

from __future__ import annotations

import dataclasses
import math
import threading

import numpy as np

from encoder.data.loader import Sampler
from encoder.errors import ConfigError, DataError

Arrays = dict[str, np.ndarray]
MODES = ('none', 'examples')
TARGET_FILL = 0.95  # auto rows: first-fit leaves a few percent of each row empty


def packing_mode(config) -> str:
  """`data.packing` of a fine-tuning run: 'none' or 'examples'; a one-line ConfigError else
  (call it before anything is written)."""
  mode = str(config.data.packing).strip().lower()
  if mode not in MODES:
    pretraining = mode in ('documents', 'full_sentences')
    hint = f' ({mode} packs pretraining rows)' if pretraining else ''
    raise ConfigError(f"data.packing='{config.data.packing}' is not one of "
                      f"{', '.join(MODES)} for fine-tuning{hint}")
  return mode


def slots_per_row(max_len: int) -> int:
  """Examples a row may hold: [CLS] token [SEP] is the shortest useful one."""
  return max(1, max_len // 3)


@dataclasses.dataclass(frozen=True)
class Plan:
  """Where each placed example goes, one entry per example in placement order (so sorted by
  step): its index, step, row, first token in the row, slot in the row, and token count."""
  example: np.ndarray
  step: np.ndarray
  row: np.ndarray
  start: np.ndarray
  slot: np.ndarray
  length: np.ndarray
  bounds: np.ndarray  # [num_steps + 1]: step j's entries are [bounds[j], bounds[j + 1])

  @property
  def num_steps(self) -> int:
    return len(self.bounds) - 1

  def entries(self, step: int) -> slice:
    """Step `step`'s entries (empty past the last step: a filler step of empty rows)."""
    if step >= self.num_steps:
      return slice(0, 0)
    return slice(int(self.bounds[step]), int(self.bounds[step + 1]))


def first_fit(order: np.ndarray, lengths: np.ndarray, rows: int, max_len: int,
              slots: int) -> Plan:
  """Packs the examples `order` (in that order) into steps of `rows` rows of `max_len` tokens
  and at most `slots` examples each: first fit within the current step, a new step when an
  example fits none of its rows. Plain Python: a few rows per step, ~1 s per 400k examples."""
  steps, where, starts, numbers = [], [], [], []
  used, count, step = [0] * rows, [0] * rows, 0
  for length in lengths[order].tolist():
    for r in range(rows):
      if used[r] + length <= max_len and count[r] < slots:
        break
    else:
      step, used, count, r = step + 1, [0] * rows, [0] * rows, 0
    steps.append(step)
    where.append(r)
    starts.append(used[r])
    numbers.append(count[r])
    used[r] += length
    count[r] += 1
  num_steps = step + 1 if len(order) else 0
  steps = np.asarray(steps, np.int64)
  return Plan(np.asarray(order, np.int64), steps, np.asarray(where, np.int64),
              np.asarray(starts, np.int64), np.asarray(numbers, np.int64),
              np.asarray(lengths[order], np.int64),
              np.searchsorted(steps, np.arange(num_steps + 1)))


def rows_per_step(config, lengths: np.ndarray, max_len: int) -> int:
  """`data.pack_rows`, or (0: auto) the rows whose steps hold `train.batch_size` examples on
  average; a multiple of devices x accumulation steps, so every device's share splits into the
  microbatches (an explicit value that is not is a ConfigError).

  Auto starts from the mean train length at TARGET_FILL, then scales by what first-fit really
  packs into steps of that many rows in epoch 0: examples longer than a third of a row leave
  far more of it empty than the mean suggests."""
  import jax  # lazy: packing_mode checks a config without JAX (launch.py --print_config)
  multiple = jax.device_count() * int(config.train.grad_accum_steps)
  given = int(config.data.pack_rows)
  if given < 0 or given % multiple:
    raise ConfigError(f'data.pack_rows={given} must be 0 (auto) or a multiple of '
                      f'{jax.device_count()} devices x {config.train.grad_accum_steps} '
                      f'accumulation steps = {multiple}')
  if given:
    return given
  batch_size = int(config.train.batch_size)
  if not len(lengths):
    return multiple
  rows = math.ceil(batch_size * float(np.mean(lengths)) / (max_len * TARGET_FILL))
  order = Sampler(len(lengths), batch_size, int(config.train.seed)).permutation(0)
  trial = first_fit(order, lengths, rows, max_len, slots_per_row(max_len))
  rows = math.ceil(rows * batch_size * trial.num_steps / len(lengths))
  return max(1, math.ceil(rows / multiple)) * multiple


def padding_values(arrays: Arrays) -> dict[str, object]:
  """What each per-token array holds at padding (the pad id for `input_ids`, else 0), read off
  the first padding position of the encoded arrays, so packed padding looks like unpacked."""
  flat = arrays['input_mask'].reshape(-1)
  first = int(np.argmin(flat)) if flat.size else 0
  padded = flat.size > 0 and flat[first] == 0
  return {k: v.reshape(-1)[first] if padded else 0 for k, v in arrays.items() if v.ndim == 2}


def spans(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(which example, offset in it) of every token of examples of these lengths, in order."""
  which = np.repeat(np.arange(len(lengths)), lengths)
  offsets = np.arange(len(which)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
  return which, offsets


def assemble(arrays: Arrays, plan: Plan, step: int, rows: range, max_len: int, slots: int,
             pads: dict) -> Arrays:
  """The packed arrays of `rows` (a contiguous share) of `step`: per-token arrays [rows, L] plus
  `input_segmentation`, `input_positions`; per-example ones [rows, slots] plus `cls_positions`."""
  span = plan.entries(step)
  keep = (plan.row[span] >= rows.start) & (plan.row[span] < rows.stop)
  example, row = plan.example[span][keep], plan.row[span][keep] - rows.start
  start, slot = plan.start[span][keep], plan.slot[span][keep]
  which, offsets = spans(plan.length[span][keep])
  token_row, token_col = row[which], start[which] + offsets
  n = len(rows)
  out = {}
  for k, v in arrays.items():
    if v.ndim == 2:
      out[k] = np.full((n, max_len), pads[k], v.dtype)
      out[k][token_row, token_col] = v[example[which], offsets]
    else:
      out[k] = np.zeros((n, slots) + v.shape[1:], v.dtype)
      out[k][row, slot] = v[example]
  out['input_segmentation'] = np.zeros((n, max_len), np.int32)
  out['input_segmentation'][token_row, token_col] = slot[which] + 1
  out['input_positions'] = np.zeros((n, max_len), np.int32)
  out['input_positions'][token_row, token_col] = offsets
  out['cls_positions'] = np.zeros((n, slots), np.int32)
  out['cls_positions'][row, slot] = start
  return out


def host_rows(total: int, process_index: int, process_count: int) -> range:
  """Host h's contiguous share of a step's rows."""
  per_host = total // process_count
  return range(process_index * per_host, (process_index + 1) * per_host)


class PackedSampler:
  """(step, host) -> this host's packed rows of global step `step`, over the train arrays."""

  def __init__(self, arrays: Arrays, rows: int, seed: int, global_batch: int):
    self.arrays, self.rows = arrays, int(rows)
    self.lengths = arrays['input_mask'].sum(1).astype(np.int64)
    if not len(self.lengths):
      raise DataError('data.packing=examples: there are no training examples to pack')
    self.max_len = arrays['input_mask'].shape[1]
    self.slots = slots_per_row(self.max_len)
    self.pads = padding_values(arrays)
    self._order = Sampler(len(self.lengths), global_batch, seed)
    self._counts: list[int] = []  # steps of epochs 0, 1, ... planned so far (kept: ints)
    self._plans: dict[int, Plan] = {}
    self._lock = threading.Lock()  # the prefetch thread and the caller may both sample

  def plan(self, epoch: int) -> Plan:
    with self._lock:
      return self._plan(epoch)

  def _plan(self, epoch: int) -> Plan:
    if epoch not in self._plans:
      if len(self._plans) >= 2:
        self._plans.pop(min(self._plans))
      self._plans[epoch] = first_fit(self._order.permutation(epoch), self.lengths, self.rows,
                                     self.max_len, self.slots)
    return self._plans[epoch]

  def locate(self, step: int) -> tuple[Plan, int]:
    """The plan of the epoch global step `step` falls in, and the step within it."""
    with self._lock:
      epoch, first = 0, 0
      while True:
        if epoch == len(self._counts):
          self._counts.append(self._plan(epoch).num_steps)
        if step < first + self._counts[epoch]:
          return self._plan(epoch), step - first
        first += self._counts[epoch]
        epoch += 1

  def batch(self, step: int, process_index: int = 0, process_count: int = 1) -> Arrays:
    plan, j = self.locate(int(step))
    return assemble(self.arrays, plan, j, host_rows(self.rows, process_index, process_count),
                    self.max_len, self.slots, self.pads)

  def describe(self, batch_size: int) -> str:
    """One line for the start of the log: the step's shape and what epoch 0 packs into it."""
    plan = self.plan(0)
    fill = self.lengths.sum() / (plan.num_steps * self.rows * self.max_len)
    return (f'packed fine-tuning (data.packing=examples): {self.rows} rows x {self.max_len} '
            f'tokens per step, up to {self.slots} examples a row; epoch 0 is {plan.num_steps} '
            f'step(s) of {len(self.lengths) / plan.num_steps:.1f} examples on average '
            f'(train.batch_size={batch_size}), real-token fraction {fill:.3f}')


class PackedEval:
  """The eval examples packed in eval-set order into steps of `rows` rows, and the way back."""

  def __init__(self, arrays: Arrays, rows: int, num_batches: int = 0):
    self.arrays, self.rows = arrays, int(rows)
    self.max_len = arrays['input_mask'].shape[1]
    self.slots = slots_per_row(self.max_len)
    lengths = arrays['input_mask'].sum(1).astype(np.int64)
    self.plan = first_fit(np.arange(len(lengths)), lengths, self.rows, self.max_len, self.slots)
    # At least one step (of empty rows when there is no example), as unpacked eval has.
    self.num_steps = max(self.plan.num_steps, 1)
    if num_batches > 0:
      self.num_steps = min(self.num_steps, num_batches)
    self.pads = padding_values(arrays)

  def batches(self, process_index: int = 0, process_count: int = 1) -> list[Arrays]:
    mine = host_rows(self.rows, process_index, process_count)
    return [assemble(self.arrays, self.plan, j, mine, self.max_len, self.slots, self.pads)
            for j in range(self.num_steps)]

  def collate(self, per_batch: list[Arrays], token_fields: dict[str, float]) -> Arrays:
    """Gathered predictions (one dict of global rows per step) -> one array per field in
    eval-set order: per-example fields ([rows, slots, ...]) read at each example's slot,
    per-token ones (`token_fields`, with their padding value) cut out of each example's span
    of its row and padded back to max_seq_length."""
    covered = int(self.plan.bounds[min(self.num_steps, self.plan.num_steps)])
    step, row = self.plan.step[:covered], self.plan.row[:covered]
    fields = {}
    for k in per_batch[0]:
      stacked = np.stack([batch[k] for batch in per_batch])
      if k not in token_fields:
        fields[k] = stacked[step, row, self.plan.slot[:covered]]
        continue
      which, offsets = spans(self.plan.length[:covered])
      out = np.full((covered, self.max_len) + stacked.shape[3:], token_fields[k], stacked.dtype)
      out[which, offsets] = stacked[step[which], row[which],
                                    self.plan.start[:covered][which] + offsets]
      fields[k] = out
    return fields
