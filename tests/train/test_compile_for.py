"""`--compile_for`: the run as training builds it, compiled by a TPU's own compiler (libtpu) for
a v5e:2x2 slice on this CPU-only machine.

Every configuration a user can choose compiles for a TPU: BERT and the modern architecture;
pmap and the mesh with data, fsdp and tensor axes; each attention form a TPU runs (explicit,
xla, blockwise, and splash compiled by Mosaic, not interpreted), local windows, packed rows,
causal masks; float32 and bfloat16; each train.rng_impl; remat; gradient accumulation; a
wall-clock budget's step. The configurations share compiles (each covers several choices),
and one topology for the module. Without libtpu (requirements-tpu.txt) those tests skip.
"""

import json
import logging
import os

import jax
import pytest

from encoder import configs, launch
from encoder.errors import ConfigError, OutOfMemoryError
from encoder.train import compile_report, hlo_structure, out_of_memory, targets
from encoder.train.resolve import resolve_config
from encoder.train.run_setup import setup_for_target

MOSAIC = 'tpu_custom_call'  # a Pallas kernel compiled for the TPU (splash)


@pytest.fixture
def own_log(monkeypatch):
  """The 'encoder' logger without the handlers earlier tests gave it (bound to their captured
  stderr): the CLI's own handler writes to this test's."""
  monkeypatch.setattr(logging.getLogger('encoder'), 'handlers', [])


@pytest.fixture(scope='module')
def v5e():
  pytest.importorskip('libtpu', reason='libtpu (pip install -r requirements-tpu.txt) compiles '
                      'for a TPU')
  return targets.target('v5e:2x2')


def compile_steps(target, exp: str, *overrides: str):
  """The run of `exp` with `overrides` set up for `target`, and its train step compiled (an
  Attempt; the CLI's test below compiles an eval step too)."""
  run = setup_for_target(_config(exp, *overrides), target)
  attempt = compile_report.compile_train_step(run, target)
  assert attempt.memory is not None, attempt.refused
  return run, attempt


MESH = ('parallel.strategy=mesh', 'parallel.mesh_shape.data=1', 'parallel.mesh_shape.fsdp=2',
        'parallel.mesh_shape.tensor=2')


def test_modern_splash_on_the_mesh_compiles_by_mosaic(v5e):
  # ModernBERT's architecture (RoPE, a 16-token window on every layer but the first, packed
  # rows) with the form auto takes on a TPU, on all three mesh axes: the kernel runs in a
  # shard_map (the compiler cannot partition it), each device on its rows and heads.
  run, attempt = compile_steps(v5e, 'mlm_modern_tiny:smoke', *MESH, 'model.dtype=bfloat16',
                               'train.rng_impl=unsafe_rbg')
  assert compile_report.attention_forms(run) == {'global': 'splash', 'local': 'splash'}
  assert not run.model.config.pallas_interpret
  train_hlo = attempt.compiled.as_text()
  assert MOSAIC in train_hlo
  assert 'all-gather' in train_hlo and 'reduce-scatter' in train_hlo  # fsdp's weights, grads


def test_modern_splash_under_pmap_with_remat_accumulation_and_rbg(v5e):
  run, attempt = compile_steps(
      v5e, 'mlm_modern_tiny:smoke', 'model.dtype=bfloat16', 'model.remat=true',
      'train.grad_accum_steps=2', 'train.rng_impl=rbg')
  assert run.strategy.name == 'pmap' and 'input_segmentation' in run.batch
  assert MOSAIC in attempt.compiled.as_text()
  assert 'all-reduce' in attempt.compiled.as_text()  # the gradients' psum


def test_blockwise_with_dropout_on_the_mesh_in_float32(v5e):
  # Rows of four 8-token tiles: the blockwise loops, global and local, with attention dropout.
  run, attempt = compile_steps(
      v5e, 'mlm_modern_tiny:smoke', 'model.attention_impl=blockwise',
      'model.attention_block_size=8', 'model.attention_dropout_rate=0.1',
      'model.dropout_rate=0.1', 'parallel.strategy=mesh', 'parallel.mesh_shape.data=2',
      'parallel.mesh_shape.fsdp=2')
  assert compile_report.attention_forms(run) == {'global': 'blockwise', 'local': 'blockwise'}
  assert 'while' in attempt.compiled.as_text()


def test_bert_xla_causal_on_data_and_tensor_axes(v5e):
  run, attempt = compile_steps(
      v5e, 'mlm_nsp_tiny:smoke', 'model.attention_impl=xla', 'model.attention=causal',
      'model.attention_dropout_rate=0.0', 'model.dtype=bfloat16', 'parallel.strategy=mesh',
      'parallel.mesh_shape.data=2', 'parallel.mesh_shape.tensor=2')
  assert compile_report.attention_forms(run) == {'global': 'xla'}
  assert run.strategy.mesh_shape == {'data': 2, 'fsdp': 1, 'tensor': 2}


@pytest.mark.slow  # a fine-tuning task: 10-20 s of compile on 2 cores
def test_a_fine_tuning_task_whose_loss_gathers_the_batch_compiles(v5e):
  # Contrastive embeddings (in-batch negatives): the pmap step gathers every device's outputs
  # (the TPU compiler makes the gather an all-reduce of each device's slice).
  run, attempt = compile_steps(v5e, 'embed_stsb:smoke')
  assert run.task.couples_examples
  assert hlo_structure.structure(attempt.compiled.as_text())['kernels']['all-reduce'] >= 2


def test_compile_for_writes_the_report_of_bert_under_pmap(v5e, tmp_path, capsys, own_log):
  # BERT's recipe as the CLI runs it: float32, dropout (so the train step's attention is the
  # explicit form, the eval step's splash), threefry, a wall-clock budget's progress argument.
  launch.run(['--exp', 'mlm_nsp_tiny:smoke', '--compile_for', 'v5e:2x2', '--workdir',
              str(tmp_path), '--config.train.max_minutes=5',
              '--config.model.attention_dropout_rate=0.1'])
  folder = tmp_path / 'compile' / 'v5e:2x2'
  report = json.loads((folder / 'report.json').read_text())
  chip = report['per_chip_bytes']
  assert report['topology'] == 'v5e:2x2' and report['fits'] is True
  assert report['hbm_bytes'] == v5e.hbm_bytes and 15 * 2 ** 30 < v5e.hbm_bytes <= 16 * 2 ** 30
  assert set(chip) == {'params', 'optimizer', 'batch', 'temporaries', 'code', 'total'}
  assert chip['total'] <= report['hbm_bytes'] and report['compile_s'] > 0
  assert report['model_flops_per_step'] > 0
  assert report['attention'] == {'global': 'explicit'}
  assert report['attention_eval'] == {'global': 'splash'}
  # The compiler's parameter bytes against a count from the shapes (float32, replicated):
  # tiles round small arrays up, by a few percent at this size.
  count = sum(int(x.size) for x in jax.tree.leaves(
      setup_for_target(_config('mlm_nsp_tiny:smoke'), v5e).state.params))
  assert count * 4 <= chip['params'] <= 1.1 * count * 4
  assert 1.9 * chip['params'] <= chip['optimizer'] <= 2.1 * chip['params']  # Adam's moments
  assert MOSAIC not in (folder / 'train_step.hlo.txt').read_text()
  assert MOSAIC in (folder / 'eval_step.hlo.txt').read_text()
  printed = capsys.readouterr().out
  assert 'v5e:2x2' in printed and 'temporaries' in printed and 'fits' in printed


def _config(exp: str, *overrides: str):
  config = configs.load_experiment(exp)
  configs.apply_overrides(config, list(overrides))
  return resolve_config(config)


def test_a_run_that_does_not_fit_is_one_line_and_writes_nothing(v5e, tmp_path, capsys,
                                                                monkeypatch, own_log):
  monkeypatch.setattr('sys.argv', [
      'launch.py', '--exp', 'mlm_nsp_tiny:smoke', '--compile_for', 'v5e:2x2', '--workdir',
      str(tmp_path), '--config.model.attention_impl=explicit',
      '--config.train.batch_size=262144'])
  with pytest.raises(SystemExit) as stopped:
    launch.main()
  assert stopped.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1].startswith('error: v5e:2x2: the train step needs ')
  assert 'Traceback' not in '\n'.join(err)
  for knob in ('train.batch_size', 'model.remat', 'parallel.mesh_shape.fsdp',
               'train.grad_accum_steps'):
    assert knob in err[-1]
  assert not os.listdir(tmp_path)


@pytest.mark.parametrize('name', ['v5litepod-16', 'tpu', 'h100:x'])
def test_a_name_that_is_no_target_says_what_to_type(name):
  with pytest.raises(ConfigError, match='v5e:2x2'):
    targets.target(name)


def test_without_libtpu_the_command_says_what_to_install(monkeypatch):
  real = targets.importlib.util.find_spec
  monkeypatch.setattr(targets.importlib.util, 'find_spec',
                      lambda name: None if name == 'libtpu' else real(name))
  with pytest.raises(ConfigError, match='pip install -r requirements-tpu.txt'):
    targets.target('v5e:2x2')


def test_a_name_libtpu_does_not_know_is_one_line(v5e):
  with pytest.raises(ConfigError, match='libtpu does not know this topology') as refused:
    targets.target('v5e:3x5')
  assert '\n' not in str(refused.value)


def _attempt(batch: int, need: int, capacity: int) -> compile_report.Attempt:
  """A compile that reports `need` bytes (fitting), or a refusal naming them."""
  if need <= capacity:
    return compile_report.Attempt(batch, 0.0, compile_report.StepMemory(need, 0, 0, 0, 0))
  return compile_report.Attempt(batch, 0.0, refused='RESOURCE_EXHAUSTED', needed=need)


@pytest.mark.parametrize('fixed, per_row, capacity, unit, want', [
    (1000, 10, 5000, 4, 400),  # an affine need: the boundary at (5000 - 1000) / 10 rows
    (1000, 10, 5005, 4, 400),
    (1000, 37, 5000, 8, 104),
    (6000, 10, 5000, 4, 0),  # not even one unit fits
])
def test_the_batch_search_finds_the_boundary_in_a_few_compiles(fixed, per_row, capacity, unit,
                                                               want):
  made = []

  def compile_at(batch):
    made.append(batch)
    return _attempt(batch, fixed + per_row * batch, capacity)
  best, attempts = compile_report.search_largest_batch(compile_at, unit, capacity)
  assert (best.batch if best else 0) == want
  assert len(made) == len(set(made)) <= 4
  if want:  # the next batch was compiled and refused: the answer is the boundary
    assert want + unit in made


def test_the_batch_search_confirms_a_line_that_bends():
  # Temporaries that grow faster past 64 rows (a rematerialisation gives up): the prediction
  # from the first two overshoots, later compiles walk back to the boundary.
  def need(batch):
    return 1000 + 10 * batch + (0 if batch <= 64 else 40 * (batch - 64))

  best, attempts = compile_report.search_largest_batch(
      lambda batch: _attempt(batch, need(batch), 3000), 4, 3000)
  want = max(b for b in range(4, 400, 4) if need(b) <= 3000)
  assert best.batch == want and len(attempts) <= 8


def test_the_batch_search_bisects_where_refusals_name_no_bytes():
  """Refusals that name no bytes leave only the fitting compiles' line, which meets the
  capacity past the batch refused: the search halves the bracket (a guess clamped to one
  under the refused batch walked down a row a compile and ended at 2 rows here)."""
  def compile_at(batch):
    made.append(batch)
    if batch > 45:
      return compile_report.Attempt(batch, 0.0, refused='RESOURCE_EXHAUSTED')
    return _attempt(batch, 2940 + batch, 3000)  # the line through 1 and 2 rows: 60 rows

  made = []
  best, _ = compile_report.search_largest_batch(compile_at, 1, 3000)
  assert best.batch == 45 and 46 in made
  assert made[:3] == [1, 2, 60] and made[3] == 31  # the line's guess refused, then halved


def test_the_batch_search_halves_a_bracket_where_the_need_jumps():
  """ModernBERT-large at 512 tokens on v5e as the TPU compiler answered it: 21-28 rows fit at
  needs it held to 14.4-14.9 GiB (rematerializing on its own), 36, 37 and 40 rows were refused
  at 21-23 GiB. Past 28 rows this fake goes on at 0.07 GiB a row to 32, then jumps. The line
  to the refusal says one row more each time (29, 30, ... 33: five compiles); halving the
  bracket finds the jump in three."""
  gib = 2 ** 30
  capacity = int(15.75 * gib)
  answered = {21: 14.4, 24: 14.61, 26: 14.77, 27: 14.86, 28: 14.93, 36: 21.18, 37: 21.77,
              40: 22.89}  # GiB, the compiler's (docs/scaling/tpu_plan_compiles.jsonl)

  def need(batch):
    if batch in answered:
      return int(answered[batch] * gib)
    return int((14.93 + 0.07 * (batch - 28) if batch <= 32 else 0.6 * batch - 0.42) * gib)

  points = [(b, need(b), need(b) <= capacity) for b in answered]
  made = []
  while (batch := compile_report.next_batch(points, capacity, 1)) is not None:
    made.append(batch)
    points.append((batch, need(batch), need(batch) <= capacity))
  assert max(b for b, _, ok in points if ok) == 32 and 33 in made
  assert len(made) <= 3
  # Fits whose need falls (BERT-large with remat on v6e: 30.87 GiB at 83 rows, 30.86 at 84,
  # refused at 264 needing 87.91): the compiler is squeezing, the bracket is halved.
  v6e = [(1, 5.36, True), (83, 30.87, True), (84, 30.86, True), (264, 87.91, False)]
  assert compile_report.next_batch([(b, int(n * gib), ok) for b, n, ok in v6e],
                                   int(31.25 * gib), 1) == (84 + 264) // 2


def test_a_refusal_far_past_the_capacity_scales_the_next_batch_down_to_it():
  """BERT-large with remat on v6e (31.25 GiB a chip), read from v5e's line at 0.10 GiB a row,
  was refused at 264 rows needing 87.9 GiB: extended at that slope the answer is below one
  row; its batch scaled by capacity over need is the next compile instead."""
  gib = 2 ** 30
  guess = compile_report.next_batch([(264, int(87.91 * gib), False)], int(31.25 * gib), 1,
                                    per_row=0.103 * gib)
  assert guess == int(264 * 31.25 / 87.91)
  # Where the slope lands inside the bracket it is kept: v5p, refused at 948 rows (98.55 GiB
  # of 95.74), 0.104 GiB a row back from it.
  assert compile_report.next_batch([(948, int(98.55 * gib), False)], int(95.74 * gib), 1,
                                   per_row=0.104 * gib) == 920


def test_an_allocation_failure_is_one_line_with_the_knobs():
  config = _config('mlm_modern_tiny:smoke', 'data.max_seq_length=100000')
  error = jax.errors.JaxRuntimeError('RESOURCE_EXHAUSTED: Out of memory allocating '
                                     '32927830016 bytes.')
  with pytest.raises(OutOfMemoryError) as stopped:
    with out_of_memory.said_in_one_line(config, {'global': 'blockwise'}):
      raise error
  line = str(stopped.value)
  assert '\n' not in line and '30.67 GiB' in line
  for knob in ('train.batch_size (8)', 'data.max_seq_length (100000)', 'model.remat',
               'global layers blockwise'):
    assert knob in line


def test_a_run_whose_step_cannot_allocate_stops_in_one_line_after_its_last_checkpoint(
    tmp_path, corpus, cache_dir, capsys, monkeypatch, own_log):
  """The third step's allocation fails (as 8 rows of 100k tokens do on a 24 GiB host): exit 2,
  one error line, the checkpoint of step 2 the newest, nothing after it."""
  from encoder.train import trainer
  from tests.train.conftest import smoke_overrides
  real_setup = trainer.setup_train_loop

  def setup(config, workdir):
    run = real_setup(config, workdir)
    step, calls = run.train_step, []

    def failing(*args):
      calls.append(1)
      if len(calls) == 3:
        raise jax.errors.JaxRuntimeError(
            'RESOURCE_EXHAUSTED: Out of memory allocating 32927830016 bytes.')
      return step(*args)
    run.train_step = failing
    return run
  monkeypatch.setattr(trainer, 'setup_train_loop', setup)
  monkeypatch.setattr('sys.argv', [
      'launch.py', '--exp', 'mlm_nsp_tiny:smoke', '--workdir', str(tmp_path),
      *(f'--config.{o}' for o in smoke_overrides(corpus, cache_dir))])
  with pytest.raises(SystemExit) as stopped:
    launch.main()
  assert stopped.value.code == 2
  err = capsys.readouterr().err
  assert 'Traceback' not in err
  assert err.strip().splitlines()[-1].startswith('error: out of memory on cpu while the run '
                                                 'stepped: allocating 30.67 GiB failed')
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['2']


def test_the_pmap_strategy_laid_out_on_devices_steps_as_pmap_does():
  """What `--compile_for` compiles for the pmap strategy (its body in a shard_map over the
  target's devices) runs here on the 8 CPU devices: with dropout, the same update and sums as
  the pmap step, so the program compiled for a TPU is the one pmap would run there."""
  import numpy as np
  from jax.sharding import NamedSharding, PartitionSpec

  from benchmarks.common.synthetic import random_batch
  from encoder.train.resolve import resolve_without_data
  from encoder.train.run_setup import setup_steps
  from encoder.train.sharding import unreplicate
  from encoder.train.strategy import TargetPmapStrategy

  config = resolve_without_data(_config('mlm_nsp_tiny:smoke', 'model.dropout_rate=0.1',
                                        'model.attention_dropout_rate=0.1',
                                        'train.batch_size=8'))
  run = setup_steps(config)
  batch = random_batch(config, 8)
  state = unreplicate(run.state)
  want_state, want_sums = run.train_step(run.state, run.strategy.place_batch(batch))
  target = TargetPmapStrategy(jax.devices())
  train, _ = target.steps(run.model, run.task, run.tx, 1)
  whole = NamedSharding(target.mesh, PartitionSpec())
  rows = NamedSharding(target.mesh, PartitionSpec('batch'))
  got_state, got_sums = train(jax.device_put(state, whole), jax.device_put(batch, rows))
  for want, got in zip(jax.tree.leaves(unreplicate(want_state)), jax.tree.leaves(got_state),
                       strict=True):
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-7)
  for key, value in got_sums.items():
    np.testing.assert_allclose(np.asarray(value), np.asarray(want_sums[key])[0], rtol=1e-5)


@pytest.mark.slow  # five to eight compiles of the tiny model
def test_fit_answers_a_batch_that_compiles_and_one_more_row_a_device_does_not(v5e, tmp_path,
                                                                              own_log):
  # Explicit attention over 2,048 tokens: tens of MB a row, so the boundary is tens of rows.
  overrides = ['--config.model.attention_impl=explicit', '--config.data.max_seq_length=2048',
               '--config.model.max_position_embeddings=2048']
  launch.run(['--exp', 'mlm_nsp_tiny:smoke', '--compile_for', 'v5e:2x2', '--fit', '--workdir',
              str(tmp_path), *overrides])
  report = json.loads((tmp_path / 'compile' / 'v5e:2x2' / 'report.json').read_text())
  largest = report['largest_batch']
  assert report['fits'] and report['global_batch'] == largest
  assert len(report['fit_attempts']) <= 8
  config = _config('mlm_nsp_tiny:smoke', *(o.removeprefix('--config.') for o in overrides),
                   f'train.batch_size={largest + 4}')
  above = compile_report.compile_train_step(setup_for_target(config, v5e), v5e)
  assert not compile_report.fits(above, v5e)
