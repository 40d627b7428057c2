"""Length buckets: each fine-tuning batch is padded to the shortest of a few static lengths that
holds its longest example, instead of to `data.max_seq_length`.

Why static buckets and not each batch's own longest length: every new input shape is a new XLA
compile, so the lengths must be few and known (`data.length_buckets`: powers of two from 16 up
to max_seq_length by default). Why group by length: a random batch of 32 usually holds one long
example, so bucketing alone saves little; sorting the examples of `data.bucket_window` global
batches by length, cutting the sorted run into batches and shuffling those batches keeps every
batch short while the order stays random at the scale of the window (Hugging Face's
`group_by_length` does the same with "megabatches").

Everything is a pure function of (seed, step): window w of W batches holds the examples the plain
`Sampler` gives for steps [wW, (w+1)W), so one epoch still visits every example once per copy,
resume is exact, and every host computes the same global batch and so the same bucket (from the
longest example of the global batch, not of its own share).
"""

from __future__ import annotations

import threading

import numpy as np

from encoder.data.loader import Sampler
from encoder.errors import ConfigError

_WINDOW_TAG = 0x4255434B
MIN_BUCKET = 16


def parse_buckets(spec, max_len: int) -> tuple[int, ...] | None:
  """`data.length_buckets` -> ascending lengths ending at max_len; None pads to max_len.

  'auto' (or '') is 16, 32, 64, ... below max_len, then max_len; 'none' turns bucketing off;
  '32,64,128' lists them (max_len is added when missing, so every example fits).
  """
  text = str(spec).strip().lower()
  if text == 'none':
    return None
  if text in ('', 'auto'):
    lengths, n = [], MIN_BUCKET
    while n < max_len:
      lengths.append(n)
      n *= 2
    return (*lengths, max_len)
  try:
    lengths = sorted({int(v) for v in text.split(',') if v.strip()})
  except ValueError:
    raise ConfigError(f"data.length_buckets='{spec}': use auto, none, or lengths like "
                      '32,64,128') from None
  if not lengths or lengths[0] < 2 or lengths[-1] > max_len:
    raise ConfigError(f"data.length_buckets='{spec}': lengths must lie in 2..data.max_seq_length"
                      f'={max_len}')
  return tuple(lengths) if lengths[-1] == max_len else (*lengths, max_len)


def bucket_of(buckets: tuple[int, ...], longest: int) -> int:
  """The shortest bucket holding `longest` tokens."""
  return buckets[int(np.searchsorted(buckets, longest))]


class LengthGroupedSampler:
  """(step, host) -> (indices, padded length): batches of similar lengths, in random order."""

  def __init__(self, lengths: np.ndarray, global_batch: int, seed: int, window: int,
               buckets: tuple[int, ...]):
    if int(window) < 1:
      raise ConfigError(f'data.bucket_window={window}: use 1 or more (global batches grouped '
                        'by length)')
    self.lengths, self.buckets = np.asarray(lengths), buckets
    self.global_batch, self.seed, self.window = int(global_batch), int(seed), int(window)
    self._base = Sampler(len(self.lengths), self.global_batch, self.seed)
    self._windows: dict[int, np.ndarray] = {}
    self._lock = threading.Lock()  # the prefetch thread and the caller may both sample

  def _batches(self, w: int) -> np.ndarray:
    """Window w as [window, global_batch] indices: sorted by length, the batches shuffled."""
    with self._lock:
      if w not in self._windows:
        if len(self._windows) >= 2:
          self._windows.pop(min(self._windows))
        first = w * self.window
        idx = np.concatenate([self._base.indices(s) for s in range(first, first + self.window)])
        by_length = idx[np.argsort(self.lengths[idx], kind='stable')]
        batches = by_length.reshape(self.window, self.global_batch)
        order = np.random.default_rng([self.seed, _WINDOW_TAG, w]).permutation(self.window)
        self._windows[w] = batches[order]
      return self._windows[w]

  def indices(self, step: int, process_index: int = 0, process_count: int = 1
              ) -> tuple[np.ndarray, int]:
    w, j = divmod(int(step), self.window)
    rows = self._batches(w)[j]
    per_host = self.global_batch // process_count
    length = bucket_of(self.buckets, int(self.lengths[rows].max()))
    return rows[process_index * per_host:(process_index + 1) * per_host], length


def trim(arrays: dict[str, np.ndarray], rows: np.ndarray, length: int) -> dict[str, np.ndarray]:
  """The rows' arrays cut to `length` tokens: 2-D arrays are per token, others per example."""
  return {k: v[rows, :length] if v.ndim == 2 else v[rows] for k, v in arrays.items()}
