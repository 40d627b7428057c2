"""The command line: exit codes, one-line errors, --describe and --list."""

import json
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
    (['--eval_suite', 'glue'], 'error: --eval_suite needs --config.init_from=RUN'),
    (['--eval_suite', 'glue', f'--config.init_from={ROOT}/nope'], "init_from '"),
    (['--eval_suite', 'glue', '--config.suite.seedz=2'], "did you mean 'suite.seeds'"),
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


def test_eval_suite_dry_run_lists_each_run_as_its_launch_command(tmp_path):
  run = tmp_path / 'run'
  (run / 'tokenizer').mkdir(parents=True)
  (run / 'config.json').write_text('{"model": {"size": "tiny"}}')
  (tmp_path / 'glue' / 'RTE').mkdir(parents=True)
  (tmp_path / 'glue' / 'RTE' / 'train.tsv').write_text(
      'index\tsentence1\tsentence2\tlabel\n' + ''.join(
          f'{i}\ta\tb\t{"not_" * (i % 2)}entailment\n' for i in range(20)))
  command = ('--eval_suite', 'glue', f'--config.init_from={run}',
             f'--config.suite.data_dir={tmp_path / "glue"}', '--config.suite.seeds=2',
             '--config.train.num_steps=5', '--workdir', str(tmp_path / 'suite'))
  out = launch(*command, '--dry_run')
  assert out.returncode == 0, out.stderr[-2000:]
  # --print_config of a suite lists the same runs rather than training them.
  printed = launch(*command, '--print_config')
  assert printed.returncode == 0 and printed.stdout == out.stdout, printed.stderr[-2000:]
  assert not (tmp_path / 'suite' / 'pretrained').exists()
  lines = out.stdout.splitlines()
  assert len(lines) == 4  # RTE x (pretrained, scratch) x 2 seeds; the other tasks are missing
  assert lines[0].startswith(f"{tmp_path / 'suite' / 'pretrained' / 'rte-seed0'}  --exp "
                             f'classify_rte --config.init_from={run} ')
  assert lines[-1].endswith('--config.train.seed=1 --config.train.num_steps=5')


def test_a_listing_into_a_pipe_closed_early_ends_quietly(tmp_path):
  """`... --dry_run | head -1`: 1,000 runs under a long workdir list ~190 kB, past what a pipe
  holds (64 kB on Linux), so the command is still writing when the reader goes. The variable
  that makes stdout unbuffered is dropped: buffered, as in a user's shell."""
  workdir = tmp_path / ('w' * 150)
  env = {k: v for k, v in os.environ.items() if k != 'PYTHONUNBUFFERED'}
  seeds = ','.join(map(str, range(1000)))
  with subprocess.Popen([sys.executable, os.path.join(ROOT, 'launch.py'), '--exp', 'mlm_nsp_tiny',
                         '--sweep', f'train.seed={seeds}', '--dry_run', '--workdir', str(workdir)],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env) as run:
    assert run.stdout.readline().startswith(str(workdir).encode())
    run.stdout.close()
    stderr = run.stderr.read().decode()
    assert run.wait(timeout=120) == 1, stderr  # not done: "anything else" (docs/CONTRACT.md)
  assert stderr == ''


def test_a_broken_pipe_that_is_not_stdout_still_raises(monkeypatch):
  """Only a closed stdout is quiet: a pipe of the run's own that breaks while stdout is open
  (a worker's) is a fault to show."""
  from encoder import launch as launch_module

  def broken(argv):
    raise BrokenPipeError('a worker went away')

  read_end, write_end = os.pipe()
  with os.fdopen(read_end, 'rb'), open(write_end, 'w') as open_stdout:
    monkeypatch.setattr(launch_module, 'run', broken)
    monkeypatch.setattr(sys, 'stdout', open_stdout)
    monkeypatch.setattr(sys, 'argv', ['launch.py', '--list'])
    with pytest.raises(BrokenPipeError, match='a worker went away'):
      launch_module.main()


NO_JAX = """
import runpy, sys
sys.argv = ['launch.py', *sys.argv[1:]]
try:
  runpy.run_path('launch.py', run_name='__main__')
except SystemExit as e:
  code = e.code
loaded = sorted(m for m in ('jax', 'flax', 'optax', 'orbax') if m in sys.modules)
sys.stderr.write(f'exit {code} loaded {loaded}\\n')
"""


@pytest.mark.parametrize('args', [
    ('--list',), ('--help',), ('--exp', 'mlm_modern_base', '--print_config'),
    ('--exp', 'classify_sst2:smoke', '--print_config'), ('--exp', 'mlm_nsp_tyni'),
    ('--exp', 'mlm_nsp_tiny', '--config.train.num_stpes=3'),
    ('--exp', 'mlm_nsp_tiny', '--config.data.packing=documents', '--print_config'),
    ('--exp', 'mlm_nsp_tiny', '--compile_for', 'v5litepod-16')])
def test_the_command_line_answers_without_jax(args):
  out = subprocess.run([sys.executable, '-c', NO_JAX, *args], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
  assert out.stderr.rstrip().splitlines()[-1].endswith('loaded []'), out.stderr


@pytest.mark.parametrize('flag', ['--print_config', '--describe'])
def test_print_config_and_describe_refuse_what_training_refuses(flag, tmp_path):
  out = launch('--exp', 'mlm_nsp_tiny:smoke', flag, '--config.data.packing=documents',
               '--workdir', str(tmp_path / 'w'))
  assert out.returncode == 2 and out.stdout == ''
  assert out.stderr == ('error: data.packing=documents needs data.nsp=false: NSP reads sentence '
                        'pairs, packed rows have none\n')
  assert not (tmp_path / 'w').exists()


def test_print_config_refuses_electra_settings_without_jax():
  out = subprocess.run([sys.executable, '-c', NO_JAX, '--exp', 'electra_small:smoke',
                        '--print_config', '--config.electra.embedding_sharing=tied'],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
  lines = out.stderr.rstrip().splitlines()
  assert lines[0].startswith("error: electra.embedding_sharing='tied' is not one of shared")
  assert lines[-1] == 'exit 2 loaded []' and out.stdout == ''


def test_print_config_shows_every_model_field_concrete():
  out = launch('--exp', 'mlm_modern_base', '--print_config')
  model = json.loads(out.stdout)['model']
  assert model['vocab_size'].startswith('(from the data:')
  assert None not in model.values()
  assert (model['num_layers'], model['intermediate_size'], model['rope_theta']) == (
      22, 1152, 10_000.0)
