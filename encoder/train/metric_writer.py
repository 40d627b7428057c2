"""Where metrics go: metrics.jsonl, TensorBoard event files (no TensorFlow) and a progress bar."""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import time

from tqdm.auto import tqdm

from encoder import storage

TB_UPLOAD_SECONDS = 30.0


class MetricWriter:
  """Appends `{"step", "split", <metric>: value}` lines; mirrors them to TensorBoard.

  Only process 0 writes; other hosts get a writer that does nothing, so the loop needs no
  branches. On resume, lines past the restored step are dropped first, so the file reads as
  if the run had never stopped.

  On a bucket, where an object cannot be appended to, the writer keeps the file's text and
  uploads all of it at each write (log and eval steps), so the object is always whole. That
  costs one upload of the whole file per write: a run that writes 10,000 records of ~300 bytes
  ends with 3 MB uploads, ~15 GB sent over its life; a longer run should log less often.
  TensorBoard's event file is written locally and uploaded whole the same way, at most every
  TB_UPLOAD_SECONDS and at close (tensorboardX's own bucket writers upload again when garbage
  collected, and retry for minutes if the bucket has gone by then).
  """

  def __init__(self, workdir: str, enabled: bool = True, resume_step: int = 0):
    self.enabled = enabled
    self.path = os.path.join(workdir, 'metrics.jsonl')
    self.workdir = workdir
    self._tb = None
    self._remote_text = None  # the whole file, on a bucket
    self._staging = None  # the local directory of the event file, for a bucket workdir
    self._uploaded = 0.0
    if not enabled:
      return
    _truncate_after(self.path, resume_step)
    if storage.is_remote(self.path):
      self._remote_text = storage.read_text(self.path) if storage.exists(self.path) else ''
      self._staging = tempfile.mkdtemp(prefix='encoder-events-')
    from tensorboardX import SummaryWriter
    self._tb = SummaryWriter(logdir=self._staging or workdir, flush_secs=30)

  def write(self, step: int, split: str, metrics: dict) -> None:
    if not self.enabled:
      return
    record = {'step': int(step), 'split': split}
    record.update({k: float(v) for k, v in sorted(metrics.items())})
    if self._remote_text is not None:
      self._remote_text += json.dumps(record) + '\n'
      storage.write_atomic(self.path, self._remote_text)
    else:
      with open(self.path, 'a') as f:
        f.write(json.dumps(record) + '\n')
    for name, value in metrics.items():
      if math.isfinite(float(value)):
        self._tb.add_scalar(f'{split}/{name}', float(value), step)
    if self._staging and time.monotonic() - self._uploaded > TB_UPLOAD_SECONDS:
      self._upload_events()

  def _upload_events(self) -> None:
    self._tb.flush()
    for name in os.listdir(self._staging):
      with open(os.path.join(self._staging, name), 'rb') as f:
        storage.write_atomic(os.path.join(self.workdir, name), f.read())
    self._uploaded = time.monotonic()

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()
    if self._staging:
      self._upload_events()
      shutil.rmtree(self._staging, ignore_errors=True)
      self._staging = None


def _truncate_after(path: str, step: int) -> None:
  """Keeps the records up to `step`. A run killed mid-write leaves a last line cut short: it is
  dropped too (its step is past the checkpoint, so it is written again)."""
  if not storage.exists(path):
    return
  lines = _read_lines(path)
  kept = [line + '\n' for line in lines
          if (record_step := _step_of(line)) is not None and record_step <= step]
  if len(kept) != len([line for line in lines if line.strip()]):
    storage.write_atomic(path, ''.join(kept))


def _read_lines(path: str) -> list[str]:
  if storage.is_remote(path):
    return storage.read_bytes(path).decode('utf-8', errors='replace').split('\n')
  with open(path, encoding='utf-8', errors='replace') as f:
    return f.read().split('\n')


def _step_of(line: str) -> int | None:
  """The step of a complete record line; None for a blank or cut-short one."""
  try:
    record = json.loads(line)
  except ValueError:
    return None
  ok = isinstance(record, dict) and isinstance(record.get('step'), int)
  return record['step'] if ok else None


def read_metrics(workdir: str, split: str | None = None) -> list[dict]:
  """The records of the workdir's `metrics.jsonl` (none before its first write), optionally of
  one split: the one reader for the trainer's tests, sweeps and their reports. A last line cut
  short by a kill mid-write is left out (a resume drops it from the file too); a broken line
  anywhere else is not the writer's doing and raises."""
  path = os.path.join(workdir, 'metrics.jsonl')
  if not storage.exists(path):
    return []
  lines = [line for line in _read_lines(path) if line.strip()]
  if lines and _step_of(lines[-1]) is None:
    lines.pop()
  records = [json.loads(line) for line in lines]
  return [r for r in records if split is None or r['split'] == split]


class Progress:
  """A tqdm bar over steps with loss, steps/s, examples/s and ETA, updated at log steps. A run
  with a wall-clock budget (`budgeted`) counts its steps without a total (train.num_steps is
  only a bound then: an ETA from it would mislead) and shows `minutes 12.3/60` instead."""

  def __init__(self, start: int, total: int, batch_size: int, enabled: bool = True,
               budgeted: bool = False):
    self.batch_size = batch_size
    self.bar = tqdm(total=None if budgeted else total, initial=start, unit='step',
                    dynamic_ncols=True, disable=not enabled, file=sys.stderr, mininterval=1.0,
                    smoothing=0.1)
    self._last_step, self._last_time = start, time.perf_counter()

  def rates(self, step: int, examples: int | None = None) -> tuple[float, float]:
    """Steps/s and examples/s since the previous call; `examples` trained since then, when
    given (packed steps hold a varying number), else batch_size per step."""
    now = time.perf_counter()
    elapsed = max(now - self._last_time, 1e-9)
    steps_per_sec = (step - self._last_step) / elapsed
    self._last_step, self._last_time = step, now
    if examples is None:
      return steps_per_sec, steps_per_sec * self.batch_size
    return steps_per_sec, examples / elapsed

  def update(self, step: int, **postfix) -> None:
    self.bar.update(step - self.bar.n)
    if postfix:
      self.bar.set_postfix({k: v if isinstance(v, str) else f'{v:.4g}'
                            for k, v in postfix.items()}, refresh=False)

  def write(self, message: str) -> None:
    if not self.bar.disable:  # in a multi-host run, process 0 alone speaks
      self.bar.write(message, file=sys.stderr)

  def close(self) -> None:
    self.bar.close()
