"""SIGKILL a training run anywhere; the same command resumes it and ends exactly as if it never
stopped: the same metrics.jsonl values at every step and bit-identical final parameters.

Each case is a chain of launches into one workdir: every launch but the last is killed (at a
named point by tests/train/fault_launch.py, or from outside at a seeded random time), and the
next launch resumes. After every kill, each committed checkpoint (`checkpoints/<step>`) must
restore in full with plain Orbax (else it counts as lost), and the metrics lines already there
must equal the uninterrupted run's. The slow case prints a summary line:
`kill points tried N, resumed identically N, checkpoints lost N`.
"""

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from tests.train.conftest import launch_cmd

DEVICES = 2
COMMON = ('train.num_steps=12', 'train.log_every=1', 'train.eval_every=4',
          'train.checkpoint_every=2', 'train.keep_checkpoints=3')
TIMING = ('steps_per_sec', 'examples_per_sec', 'data_wait_s')  # wall-clock figures
FAULT_LAUNCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fault_launch.py')


@pytest.fixture(scope='module')
def env():
  """Two simulated devices and a persistent compilation cache shared by the launches (and by
  later sessions), so most launches skip their compile. Cached executables are keyed by the
  program and flags, so they are the same programs: results stay bit-identical."""
  cache = os.environ.get('ENCODER_TEST_JAX_CACHE',
                         os.path.join(tempfile.gettempdir(), 'encoder-tests-jax-cache'))
  return {**os.environ, 'XLA_FLAGS': f'--xla_force_host_platform_device_count={DEVICES}',
          'JAX_PLATFORMS': 'cpu', 'JAX_COMPILATION_CACHE_DIR': cache,
          'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '0'}


def command(workdir, corpus, cache_dir, kill='none:0'):
  cmd = launch_cmd(workdir, corpus, cache_dir, *COMMON)
  return [sys.executable, FAULT_LAUNCH, kill, *cmd[2:]]


def records(workdir) -> list[dict]:
  """metrics.jsonl without timing values; a line cut short by a kill is left out."""
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    return []
  out = []
  with open(path) as f:
    for line in f:
      try:
        record = json.loads(line)
      except ValueError:
        continue
      out.append({k: v for k, v in record.items() if k not in TIMING})
  return out


def committed_steps(workdir) -> list[int]:
  directory = os.path.join(workdir, 'checkpoints')
  if not os.path.isdir(directory):
    return []
  return sorted(int(n) for n in os.listdir(directory) if n.isdigit())


def restore(workdir, step) -> dict:
  import orbax.checkpoint as ocp
  step_dir = os.path.join(workdir, 'checkpoints', str(step))
  out = {item: ocp.StandardCheckpointer().restore(os.path.join(step_dir, item))
         for item in ('params', 'train')}
  with open(os.path.join(step_dir, 'data', 'metadata')) as f:
    out['data'] = json.load(f)
  return out


def unreadable(workdir) -> list[int]:
  lost = []
  for step in committed_steps(workdir):
    try:
      restore(workdir, step)
    except Exception:  # noqa: BLE001 - any failure means the checkpoint is lost
      lost.append(step)
  return lost


def same_params(a, b) -> bool:
  import jax
  leaves_a, tree_a = jax.tree.flatten(a)
  leaves_b, tree_b = jax.tree.flatten(b)
  return tree_a == tree_b and all(np.array_equal(x, y) for x, y in
                                  zip(leaves_a, leaves_b, strict=True))


class Reference:
  """The uninterrupted run, started in the background; `.workdir()` waits for it."""

  def __init__(self, tmp_path, corpus, cache_dir, env):
    self.path = str(tmp_path / 'reference')
    self.start = time.time()
    self.proc = subprocess.Popen(command(self.path, corpus, cache_dir), env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    self.seconds = None

  def workdir(self) -> str:
    if self.seconds is None:
      _, err = self.proc.communicate(timeout=600)
      assert self.proc.returncode == 0, err[-3000:]
      self.seconds = time.time() - self.start
    return self.path


def run_chain(workdir, kills, corpus, cache_dir, env, reference: Reference) -> dict:
  """Launches into `workdir` once per kill point (killed there), then once to the end."""
  stats = {'tried': 0, 'identical': 0, 'lost': 0, 'finished_early': 0, 'log': []}
  for kill in kills:
    if isinstance(kill, float):  # an outside SIGKILL after this many seconds
      proc = subprocess.Popen(command(workdir, corpus, cache_dir), env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
      try:
        proc.wait(timeout=kill)
      except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
      _, err = proc.communicate(timeout=600)
    else:
      proc = subprocess.run(command(workdir, corpus, cache_dir, kill), env=env,
                            capture_output=True, text=True, timeout=600)
      err = proc.stderr
    stats['tried'] += 1
    killed = proc.returncode == -signal.SIGKILL
    assert killed or proc.returncode == 0, f'{kill}: exit {proc.returncode}: {err[-3000:]}'
    stats['finished_early'] += not killed
    ref = reference.workdir()
    ref_records = records(ref)
    lost = unreadable(workdir)
    stats['lost'] += len(lost)
    so_far = records(workdir)
    prefix_ok = so_far == ref_records[:len(so_far)]
    stats['log'].append(f'{kill}: killed={killed} committed={committed_steps(workdir)} '
                        f'lost={lost} metrics_prefix_identical={prefix_ok}')
    stats['prefix_ok'] = stats.get('prefix_ok', True) and prefix_ok
  final = subprocess.run(command(workdir, corpus, cache_dir), env=env, capture_output=True,
                         text=True, timeout=600)
  assert final.returncode == 0, final.stderr[-3000:]
  ref = reference.workdir()
  identical = (stats.get('prefix_ok', True) and records(workdir) == records(ref)
               and committed_steps(workdir) == committed_steps(ref)
               and same_params(restore(workdir, 12)['params'], restore(ref, 12)['params']))
  stats['identical'] = stats['tried'] if identical else 0
  stats['final_identical'] = identical
  stats['log'].append(f'final: identical={identical} committed={committed_steps(workdir)}')
  return stats


def test_kill_while_a_checkpoint_is_written_resumes_identically(tmp_path, corpus, cache_dir,
                                                                 env):
  """The default-run subset: one kill, inside the asynchronous write of checkpoint 4 (the
  reference runs alongside the killed launch)."""
  ref = Reference(tmp_path, corpus, cache_dir, env)
  stats = run_chain(str(tmp_path / 'killed'), ['writing:4'], corpus, cache_dir, env, ref)
  print('\n'.join(stats['log']))
  assert stats['tried'] == 1 and stats['finished_early'] == 0
  assert stats['lost'] == 0
  assert stats['identical'] == 1, stats['log']


NAMED_CHAINS = [
    # Before the first checkpoint, inside steps, between steps, in a metrics line, in eval,
    # inside an asynchronous checkpoint write.
    ['dispatched:1', 'dispatched:3', 'stepped:5', 'metrics:7', 'eval:8', 'writing:10'],
    # The first checkpoint half written, a checkpoint written but not renamed, one renamed but
    # not yet recorded, between steps, the last step's checkpoint before its rename.
    ['writing:2', 'commit:4', 'committed:6', 'stepped:9', 'metrics:11', 'commit:12'],
    # While an old step is removed (keep_checkpoints=3: step 2 goes when 8 commits, 4 with 10).
    ['deleting:2', 'deleting:4'],
]


def random_kills(workdir, corpus, cache_dir, env, reference, rng, window) -> dict:
  """Outside SIGKILLs at seeded random times into one workdir until its run completes: each
  launch is killed `uniform(*window)` seconds after it starts (anywhere: imports, data,
  compile, steps, checkpoint writes). A launch that finishes first, after d seconds, moves the
  window to (0.4 d, d): its later part, where the steps and checkpoint writes are, since a
  window that only covers the start-up would kill runs that never progress."""
  stats = {'tried': 0, 'identical': 0, 'lost': 0, 'finished_early': 0, 'log': [],
           'kills': []}
  while not os.path.exists(os.path.join(workdir, 'checkpoints', '12')) and len(
      stats['kills']) < 12:
    delay = round(rng.uniform(*window), 2)
    start = time.time()
    proc = subprocess.Popen(command(workdir, corpus, cache_dir), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
      proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
      proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=600)
    if proc.returncode == 0:
      took = time.time() - start
      window = (0.4 * took, took)
      stats['finished_early'] += 1
      stats['log'].append(f'{delay}s: finished first, in {took:.1f}s')
      continue
    assert proc.returncode == -signal.SIGKILL, err[-3000:]
    stats['kills'].append(delay)
    stats['tried'] += 1
    lost = unreadable(workdir)
    stats['lost'] += len(lost)
    so_far = records(workdir)
    ok = so_far == records(reference.workdir())[:len(so_far)]
    stats['prefix_ok'] = stats.get('prefix_ok', True) and ok
    stats['log'].append(f'{delay}s: killed, committed={committed_steps(workdir)} lost={lost} '
                        f'metrics_prefix_identical={ok}')
  final = run_chain(workdir, [], corpus, cache_dir, env, reference)
  identical = stats.get('prefix_ok', True) and final['final_identical']
  stats['identical'] = stats['tried'] if identical else 0
  stats['log'] += final['log']
  stats['window'] = window
  return stats


@pytest.mark.slow
def test_twenty_kill_points_resume_identically(tmp_path, corpus, cache_dir, env):
  ref = Reference(tmp_path, corpus, cache_dir, env)
  totals = {'tried': 0, 'identical': 0, 'lost': 0, 'finished_early': 0}

  def add(name, stats):
    print(f'{name}:', *stats['log'], sep='\n  ')
    for key in totals:
      totals[key] += stats[key]

  for i, kills in enumerate(NAMED_CHAINS):
    add(f'chain {i}', run_chain(str(tmp_path / f'chain{i}'), kills, corpus, cache_dir, env, ref))
  ref.workdir()
  rng, window, i = random.Random(20261130), (0.5, ref.seconds), 0
  while totals['tried'] < 22 and i < 10:
    stats = random_kills(str(tmp_path / f'random{i}'), corpus, cache_dir, env, ref, rng,
                         window)
    window, i = stats['window'], i + 1
    add(f'random {i}', stats)
  print(f"kill points tried {totals['tried']}, resumed identically {totals['identical']}, "
        f"checkpoints lost {totals['lost']} (random launches that finished before their kill: "
        f"{totals['finished_early']}; reference run {ref.seconds:.0f}s)")
  assert totals['tried'] >= 20
  assert totals['lost'] == 0
  assert totals['identical'] == totals['tried']
