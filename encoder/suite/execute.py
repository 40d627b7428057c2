"""Running the suite's runs: skip the finished, resume the interrupted, record the failed.

Each run's outcome is its workdir's `run_status.json` (the sweep's record, written atomically
after every attempt): `done` with the final dev metrics, `failed` with a one-line error, or
`interrupted`. A rerun of the suite skips `done` runs whose metrics reach their last step and
starts every other one again in its own workdir, where the trainer resumes from its newest
checkpoint. A failed run never stops the others. A run recorded with other settings than the
plan's (another recipe, rate, budget or data slice) stops the rerun before it starts
(`refuse_stale_runs`): its score would not be the table's.

`suite.parallel=1` runs them one after another in this process. `suite.parallel=N` runs N at
once, each a `python -m encoder.suite.worker` process with its share of the host
(`device_share`): on a CPU host its slice of the cores (CPU affinity; XLA sizes its thread pool
from it), on a GPU host its slice of the GPUs (CUDA_VISIBLE_DEVICES), on a TPU VM its chips
(TPU_VISIBLE_CHIPS and the one-process-per-chip-group bounds); JAX in each sees only those.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import traceback

from encoder import storage
from encoder.errors import ConfigError, EncoderError
from encoder.suite.plan import RunSpec
from encoder.sweep.status import finished, read_status, write_status
from encoder.train.metric_writer import read_metrics

log = logging.getLogger('encoder')

SPEC_FILE = 'suite_run.json'
LOG_FILE = 'suite_run.log'


def refuse_stale_runs(runs: list[RunSpec], suite_dir: str) -> None:
  """Stops a rerun whose folder holds a run made with other settings (another recipe, rate,
  budget or data slice): skipping it would put its old score in the new table, resuming it
  would train its checkpoint on under new settings. No run is touched; a new folder is."""
  for spec in runs:
    ran = read_status(spec.workdir).get('overrides')
    if ran is None:
      continue
    before, now = _settings(ran), _settings(spec.overrides)
    changed = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
    if changed:
      ran_text, now_text = (', '.join(f'{k}={s[k]}' for k in changed if k in s) or 'nothing'
                            for s in (before, now))
      raise ConfigError(f'suite folder {suite_dir} holds {spec.name} run with other settings '
                        f'(ran {ran_text}; now {now_text}): pass a new --workdir (no run '
                        'was touched)')


def _settings(overrides) -> dict[str, str]:
  """key -> value as applied (the last of a key wins)."""
  return {k.strip(): v.strip() for k, _, v in (o.partition('=') for o in overrides)}


def is_done(spec: RunSpec) -> bool:
  status = read_status(spec.workdir)
  return status.get('status') == 'done' and finished(spec.workdir, spec.config())


def run_one(spec: RunSpec, keep_weights: bool = False) -> dict:
  """Trains and evaluates one run in this process; returns (and writes) its status record."""
  from encoder.train.trainer import train_and_evaluate  # lazy: the worker's JAX starts here
  previous = read_status(spec.workdir)
  start = time.time()
  record = {**spec.to_json(), 'status': 'failed'}
  try:
    config = spec.config()
    train_and_evaluate(config, spec.workdir)
    record['status'] = 'done' if finished(spec.workdir, config) else 'interrupted'
  except EncoderError as e:
    record['error'] = str(e).split('\n')[0]
  except Exception as e:  # noqa: BLE001 - one broken run must not stop the suite
    record['error'] = f'{type(e).__name__}: {e}'.split('\n')[0]
    log.error('suite: %s failed\n%s', spec.name, traceback.format_exc())
  record['wall_clock_s'] = round(previous.get('wall_clock_s', 0) + time.time() - start, 1)
  if record['status'] == 'done':
    record['as_run'] = as_run(spec.workdir, config)
    evals = read_metrics(spec.workdir, 'eval')
    record['metrics'] = {k: v for k, v in (evals[-1] if evals else {}).items()
                         if k not in ('step', 'split')}
    if not keep_weights:  # the metrics are the result; the weights are ~3x the model each
      storage.rmtree(os.path.join(spec.workdir, 'checkpoints'), ignore_errors=True)
  write_status(spec.workdir, record)
  return record


AS_RUN = ('learning_rate', 'batch_size', 'num_steps', 'num_epochs', 'warmup_steps')


def as_run(workdir: str, config) -> dict:
  """The learning rate and budget the run trained with, after every override (a user's
  `train.learning_rate` beats the recipe's): its config.json, resolved (the steps its epochs
  came to), else the config it was given."""
  path = os.path.join(workdir, 'config.json')
  train = (json.loads(storage.read_text(path))['train'] if storage.exists(path)
           else config.train.to_dict())
  return {k: train.get(k) for k in AS_RUN}


def run_all(runs: list[RunSpec], parallel: int = 1, keep_weights: bool = False,
            after_each=None, share: int = 0) -> bool:
  """Runs every unfinished run; `after_each()` after each one ends (the report is rebuilt).
  Returns False when the suite was interrupted (a signal) before all had run. With `parallel`
  above 1 each run is a worker process; `share` (fewer runs than slots) runs that many at once,
  each with 1/share of the host instead of 1/parallel."""
  todo = []
  for spec in runs:
    if is_done(spec):
      log.info('suite: %s finished already, skipped', spec.name)
    else:
      todo.append(spec)
  if parallel <= 1:
    for spec in todo:
      log.info('suite: %s (%s)', spec.name, spec.experiment)
      record = run_one(spec, keep_weights)
      if after_each:
        after_each()
      if record['status'] == 'interrupted':
        log.info('suite stopped during %s; run the same command to resume', spec.name)
        return False
    return True
  return _run_processes(todo, share or parallel, keep_weights, after_each)


def device_share(slot: int, parallel: int, environ=os.environ) -> tuple[dict, list[int] | None]:
  """The environment and CPU cores of worker `slot` of `parallel`: an equal share of the
  host's cores, and of its GPUs or TPU chips where it has them."""
  env = {}
  cores = sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else []
  share = _share(cores, slot, parallel) or None
  gpus = _accelerators(environ.get('CUDA_VISIBLE_DEVICES'), '/dev', 'nvidia')
  chips = _accelerators(environ.get('TPU_VISIBLE_CHIPS'), '/dev', 'accel')
  if gpus:
    env['CUDA_VISIBLE_DEVICES'] = ','.join(_share(gpus, slot, parallel))
  elif chips:
    mine = _share(chips, slot, parallel)
    env.update(TPU_VISIBLE_CHIPS=','.join(mine), TPU_PROCESS_BOUNDS='1,1,1',
               TPU_CHIPS_PER_PROCESS_BOUNDS=f'1,{len(mine)},1',
               TPU_PROCESS_PORT=str(8476 + slot), TPU_MESH_CONTROLLER_PORT=str(8476 + slot))
  return env, share


def _share(items: list, slot: int, parallel: int) -> list:
  """Slot `slot`'s contiguous share of `items` (every slot gets one where there are fewer)."""
  if not items:
    return []
  if len(items) < parallel:
    return [items[slot % len(items)]]
  size = len(items) // parallel
  return items[slot * size:(slot + 1) * size]


def _accelerators(visible: str | None, dev: str, prefix: str) -> list[str]:
  """The visible accelerator ids: the variable's list, else the /dev/<prefix>N devices."""
  if visible:
    return [v.strip() for v in visible.split(',') if v.strip()]
  with contextlib.suppress(OSError):
    return sorted((n[len(prefix):] for n in os.listdir(dev)
                   if n.startswith(prefix) and n[len(prefix):].isdigit()), key=int)
  return []


def _start(spec: RunSpec, slot: int, parallel: int, keep_weights: bool) -> subprocess.Popen:
  previous = read_status(spec.workdir)
  write_status(spec.workdir, {**spec.to_json(), 'status': 'running',
                              'wall_clock_s': previous.get('wall_clock_s', 0)})
  spec_path = os.path.join(spec.workdir, SPEC_FILE)
  storage.write_atomic(spec_path, json.dumps({'spec': spec.to_json(),
                                              'keep_weights': keep_weights}, indent=2))
  env, cores = device_share(slot, parallel)
  preexec = (lambda: os.sched_setaffinity(0, cores)) if cores else None
  log_file = open(os.path.join(spec.workdir, LOG_FILE), 'ab')  # noqa: SIM115 - the child's
  process = subprocess.Popen([sys.executable, '-m', 'encoder.suite.worker', spec_path],
                             stdout=log_file, stderr=subprocess.STDOUT,
                             env={**os.environ, **env}, preexec_fn=preexec)
  log_file.close()
  log.info('suite: %s started (slot %d%s)', spec.name, slot,
           f', cores {cores}' if cores else '')
  return process


def _run_processes(todo: list[RunSpec], parallel: int, keep_weights: bool,
                   after_each) -> bool:
  """Up to `parallel` worker processes at once; a signal stops them all (each saves)."""
  running: dict[int, tuple[subprocess.Popen, RunSpec]] = {}
  queue, stopping = list(todo), []

  def stop(signum, frame):  # the workers save and exit at their next step
    stopping.append(signum)
    for process, _ in running.values():
      process.send_signal(signal.SIGTERM)

  previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
  try:
    while queue or running:
      for slot in range(parallel):
        if slot not in running and queue and not stopping:
          spec = queue.pop(0)
          running[slot] = (_start(spec, slot, parallel, keep_weights), spec)
      time.sleep(0.2)
      for slot, (process, spec) in list(running.items()):
        if process.poll() is None:
          continue
        del running[slot]
        _record_crash(spec, process.returncode, interrupted=bool(stopping))
        if after_each:
          after_each()
      if stopping and not running:
        return False
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)
  return True


def _record_crash(spec: RunSpec, returncode: int, interrupted: bool) -> None:
  """A worker that died without writing its outcome (its record still says `running`: killed,
  out of memory) is recorded as failed with its last output line, or as interrupted when the
  suite itself stopped it."""
  status = read_status(spec.workdir)
  if status.get('status') != 'running':
    return
  status['status'] = 'interrupted' if interrupted else 'failed'
  if not interrupted:
    status['error'] = f'worker exited with status {returncode}: {_last_line(spec.workdir)}'
  write_status(spec.workdir, status)


def _last_line(workdir: str) -> str:
  path = os.path.join(workdir, LOG_FILE)
  if not storage.isfile(path):
    return ''
  lines = [line for line in storage.read_text(path).splitlines() if line.strip()]
  errors = [line for line in lines if line.startswith('error:')]
  return (errors or lines or [''])[-1][:300]
