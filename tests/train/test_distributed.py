"""Where a run finds its processes: config, JAX_* variables, or a detected cluster."""

import pytest

from encoder import configs
from encoder.errors import ConfigError
from encoder.train import distributed

CLUSTER_VARS = ('JAX_COORDINATOR_ADDRESS', 'JAX_NUM_PROCESSES', 'JAX_PROCESS_ID', 'SLURM_JOB_ID',
                'SLURM_NTASKS', 'SLURM_STEP_NUM_TASKS', 'OMPI_COMM_WORLD_SIZE',
                'TPU_WORKER_HOSTNAMES', 'MEGASCALE_COORDINATOR_ADDRESS')


@pytest.fixture
def parallel(monkeypatch):
  for name in CLUSTER_VARS:
    monkeypatch.delenv(name, raising=False)
  return configs.load_experiment('mlm_nsp_tiny:smoke').parallel


def test_one_process_by_default(parallel):
  assert distributed.process_arguments(parallel) is None


def test_the_config_names_the_processes(parallel):
  parallel.coordinator_address, parallel.num_processes, parallel.process_id = 'h0:1234', 4, 3
  assert distributed.process_arguments(parallel) == {
      'coordinator_address': 'h0:1234', 'num_processes': 4, 'process_id': 3}


def test_jax_variables_fill_what_the_config_leaves_unset(parallel, monkeypatch):
  monkeypatch.setenv('JAX_COORDINATOR_ADDRESS', '10.0.0.1:8476')
  monkeypatch.setenv('JAX_NUM_PROCESSES', '2')
  monkeypatch.setenv('JAX_PROCESS_ID', '1')
  assert distributed.process_arguments(parallel) == {
      'coordinator_address': '10.0.0.1:8476', 'num_processes': 2, 'process_id': 1}


def test_a_partial_multi_process_config_is_a_config_error(parallel):
  parallel.coordinator_address = 'h0:1234'
  with pytest.raises(ConfigError, match='parallel.num_processes and parallel.process_id'):
    distributed.process_arguments(parallel)


@pytest.mark.parametrize('env', [{'SLURM_JOB_ID': '7', 'SLURM_NTASKS': '16'},
                                 {'OMPI_COMM_WORLD_SIZE': '4'},
                                 {'TPU_WORKER_HOSTNAMES': 'w0,w1,w2,w3'}])
def test_a_detected_cluster_lets_jax_find_the_arguments(parallel, monkeypatch, env):
  for name, value in env.items():
    monkeypatch.setenv(name, value)
  assert distributed.process_arguments(parallel) == {}
  parallel.initialize = 'never'
  assert distributed.process_arguments(parallel) is None


def test_single_task_slurm_jobs_stay_one_process_unless_told(parallel, monkeypatch):
  monkeypatch.setenv('SLURM_JOB_ID', '7')
  monkeypatch.setenv('SLURM_NTASKS', '1')
  assert distributed.process_arguments(parallel) is None
  parallel.initialize = 'always'
  assert distributed.process_arguments(parallel) == {}
