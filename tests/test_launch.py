"""The command line: exit codes, one-line errors, --describe and --list."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def launch(*args, cwd=None):
  env = {**os.environ, 'XLA_FLAGS': '', 'JAX_PLATFORMS': 'cpu'}
  return subprocess.run([sys.executable, os.path.join(ROOT, 'launch.py'), *args],
                        capture_output=True, text=True, cwd=cwd or ROOT, env=env, timeout=300)


def test_describe_ends_with_bert_base_total():
  out = launch('--exp', 'mlm_nsp_base', '--describe')
  assert out.returncode == 0, out.stderr
  assert out.stdout.rstrip().splitlines()[-1] == 'Total parameters: 110,106,428'


def test_list_names_every_experiment():
  out = launch('--list')
  assert out.returncode == 0
  assert 'mlm_nsp_tiny' in out.stdout and 'mlm_nsp_base' in out.stdout


def test_print_config_applies_overrides():
  out = launch('--exp', 'mlm_nsp_tiny', '--print_config', '--config.train.num_steps=7')
  assert out.returncode == 0 and '"num_steps": 7' in out.stdout


@pytest.mark.parametrize('args, message', [
    (['--exp', 'nope'], "error: unknown experiment 'nope'"),
    (['--exp', 'mlm_nsp_tiny', '--config.train.num_stpes=3'], "did you mean 'train.num_steps'"),
    (['--exp', 'mlm_nsp_tiny', '--config.train.num_steps=x'], 'expects an integer'),
    (['--exp', 'mlm_nsp_tiny', '--bogus'], "error: unrecognized argument '--bogus'"),
    ([], 'error: --exp NAME is required'),
    (['--exp', 'mlm_nsp_tiny', '--config.data.packing=documents'], 'needs data.nsp=false'),
])
def test_user_errors_are_one_line_and_exit_2(args, message, tmp_path):
  out = launch(*args, '--workdir', str(tmp_path / 'w'))
  assert out.returncode == 2
  assert out.stderr.count('\n') == 1 and out.stderr.startswith('error: ')
  assert message in out.stderr
  assert not (tmp_path / 'w').exists()


def test_bad_run_inputs_are_one_line_errors_that_leave_the_workdir_alone(tmp_path):
  workdir = tmp_path / 'w'
  workdir.mkdir()
  (workdir / 'config.json').write_text('{"experiment": "mlm_nsp_base", "model": {}}')
  before = (workdir / 'config.json').read_text()
  cases = [
      (['--config.init_from=/nonexistent/run'], "error: no checkpoint at '/nonexistent/run'",
       tmp_path / 'fresh'),
      ([], "belongs to a different run (experiment='mlm_nsp_base' there", workdir),
      (['--config.data.corpus=text:/nonexistent/*.txt'], 'error: ', tmp_path / 'fresh2'),
  ]
  for extra, message, target in cases:
    out = launch('--exp', 'mlm_nsp_tiny:smoke', '--workdir', str(target), *extra)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.count('\n') == 1 and message in out.stderr, out.stderr
  assert (workdir / 'config.json').read_text() == before
  assert sorted(p.name for p in workdir.iterdir()) == ['config.json']
  assert not (tmp_path / 'fresh').exists() and not (tmp_path / 'fresh2').exists()
