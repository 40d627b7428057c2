"""Two processes on localhost through JAX's distributed runtime (CPU devices, gloo collectives).

Each process is `launch.py` with 4 simulated devices; together they train on the same global
batch as one process with 8 devices, so the losses must match, and the checkpoint they write
together must restore in one process.
"""

import os
import signal
import socket
import subprocess
import time

import jax
import numpy as np
import pytest

from encoder.train.checkpoint import Checkpointer
from encoder.train.metric_writer import read_metrics
from tests.train.conftest import launch_cmd
from tests.train.test_trainer import losses, train

COMMON = ('train.num_steps=4', 'train.log_every=1', 'train.batch_size=16',
          'train.checkpoint_every=4', 'train.eval_every=4')
STRATEGIES = {'pmap': ('parallel.strategy=pmap',),
              'mesh_fsdp': ('parallel.strategy=mesh', 'parallel.mesh_shape.fsdp=2')}


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def start_two_processes(workdir, corpus, cache_dir, *overrides) -> list[subprocess.Popen]:
  address = f'localhost:{free_port()}'
  env = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=4',
         'JAX_PLATFORMS': 'cpu'}
  return [subprocess.Popen(
      launch_cmd(workdir, corpus, cache_dir, *overrides,
                 f'parallel.coordinator_address={address}', 'parallel.num_processes=2',
                 f'parallel.process_id={i}'),
      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (0, 1)]


def launch_two_processes(workdir, corpus, cache_dir, *extra) -> float:
  """Runs process 0 and 1 to completion; returns the wall time."""
  start = time.time()
  procs = start_two_processes(workdir, corpus, cache_dir, *COMMON, *extra)
  outputs = [p.communicate(timeout=600) for p in procs]
  for i, (p, (_, err)) in enumerate(zip(procs, outputs, strict=True)):
    assert p.returncode == 0, f'process {i}:\n{err[-3000:]}'
  log = outputs[0][1]
  assert '2 process(es), 4 local / 8 global cpu device(s); global batch 16 = 8 per process' in log
  assert 'step 4 eval' not in outputs[1][1]  # process 0 alone reports
  return time.time() - start


@pytest.mark.slow
@pytest.mark.parametrize('strategy', list(STRATEGIES))
def test_two_processes_match_one_and_their_checkpoint_restores_in_one(
    strategy, tmp_path, corpus, cache_dir):
  one = tmp_path / 'one'
  train(one, corpus, cache_dir, *COMMON)  # this process: 8 devices, pmap
  seconds = launch_two_processes(tmp_path / 'two', corpus, cache_dir, *STRATEGIES[strategy])
  print(f'two processes ({strategy}): {seconds:.1f} s')
  expected, got = losses(one), losses(tmp_path / 'two')
  assert sorted(got) == [1, 2, 3, 4]
  # Same global batch and masks, dropout off: only float32 summation order differs.
  np.testing.assert_allclose([got[s] for s in expected], list(expected.values()), rtol=2e-5)
  assert len(read_metrics(str(tmp_path / 'two'), 'eval')) == 1  # written once, by process 0

  reference = Checkpointer(str(one), 1, asynchronous=False)
  like = reference.restore(4, None).state
  restored = Checkpointer(str(tmp_path / 'two'), 1, asynchronous=False)
  saved = restored.restore(4, like)
  assert saved.data_state == {'step': 4}
  assert int(saved.state.step) == 4
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-6),
               (saved.state.params, saved.state.opt_state), (like.params, like.opt_state))
  for c in (reference, restored):
    c.close()


@pytest.mark.slow
def test_a_signal_to_one_process_stops_both_at_the_same_step(tmp_path, corpus, cache_dir):
  # A process that stopped alone would leave the other waiting in a collective forever.
  workdir = tmp_path / 'run'
  procs = start_two_processes(workdir, corpus, cache_dir, 'train.num_steps=100000',
                              'train.log_every=5', 'train.eval_every=100000',
                              'train.checkpoint_every=100000', 'train.batch_size=16')
  deadline = time.time() + 300
  while not os.path.exists(workdir / 'metrics.jsonl') or len(read_metrics(str(workdir))) < 2:
    assert time.time() < deadline and procs[0].poll() is None, 'training did not start'
    time.sleep(0.5)
  procs[1].send_signal(signal.SIGTERM)
  outputs = [p.communicate(timeout=300) for p in procs]
  assert [p.returncode for p in procs] == [0, 0], outputs[0][1][-2000:]
  assert 'Stopped by a stop request to another process' in outputs[0][1]
  steps = os.listdir(workdir / 'checkpoints')
  assert len(steps) == 1 and int(steps[0]) % 5 == 0  # together, at a log step
