"""The NSP loss weight over training: a function of the step, so it can ride on the batch.

Why a ramp: in a small model NSP, once it starts to learn, fills Adam's second moments in the
attention weights MLM needs to leave the unigram plateau (docs/ablations.md); a low weight
until MLM has left it, then BERT's weight of 1, lets both objectives learn. The data puts a
scheduled weight into each train batch (like the masks, a pure function of the step, so resume
is exact); the task scales the NSP gradient by it.
"""

from __future__ import annotations

from encoder.errors import ConfigError


def is_scheduled(train) -> bool:
  """Whether the weight changes over training (`train.nsp_loss_weight_final` is set)."""
  return train.nsp_loss_weight_final is not None


def nsp_weight_at(train, step: int) -> float:
  """The NSP gradient weight at `step`: `train.nsp_loss_weight`, moved linearly to
  `train.nsp_loss_weight_final` (when set) between `nsp_ramp_start` and `nsp_ramp_end`."""
  first, final = float(train.nsp_loss_weight), train.nsp_loss_weight_final
  if final is None:
    return first
  start, end = _ramp(train)
  progress = min(max((step - start) / max(end - start, 1), 0.0), 1.0)
  return first + progress * (float(final) - first)


def check_nsp_schedule(train) -> None:
  if not is_scheduled(train):
    return
  start, end = _ramp(train)
  if not 0 <= start <= end:
    raise ConfigError(f'train.nsp_ramp_start={start} and train.nsp_ramp_end={end} must satisfy '
                      '0 <= start <= end')


def _ramp(train) -> tuple[int, int]:
  return int(train.nsp_ramp_start), int(train.nsp_ramp_end)
