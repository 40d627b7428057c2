"""The mesh strategy on 8 simulated devices: same updates as pmap, parameters split by FSDP."""

import jax
import numpy as np
import pytest

from encoder import configs
from encoder.errors import ConfigError
from encoder.tasks import get_task
from encoder.train import sharding
from encoder.train.optim import make_optimizer
from encoder.train.resolve import resolve_config
from encoder.train.run_setup import setup_steps
from encoder.train.strategy import make_strategy


def tiny_setup(*overrides):
  config = configs.load_experiment('mlm_nsp_tiny:smoke')
  configs.apply_overrides(config, ['model.dropout_rate=0.0', 'model.attention_dropout_rate=0.0',
                                   'train.batch_size=16', *overrides])
  config = resolve_config(config)
  config.model.vocab_size = config.data.vocab_size
  task = get_task(config.task)
  model, tx = task.build_model(config), make_optimizer(config.train)
  return config, task, model, tx


def random_batches(config, num: int, seed: int = 0) -> list[dict]:
  """Pretraining batches with real variety: tokens, padding, masked positions, NSP labels."""
  rng = np.random.default_rng(seed)
  b, seq, preds = config.train.batch_size, config.data.max_seq_length, 5
  out = []
  for _ in range(num):
    lengths = rng.integers(seq // 2, seq + 1, b)
    mask = (np.arange(seq)[None] < lengths[:, None]).astype(np.int32)
    out.append({
        'input_ids': rng.integers(5, config.data.vocab_size, (b, seq)).astype(np.int32) * mask,
        'segment_ids': (np.arange(seq)[None] >= lengths[:, None] // 2).astype(np.int32) * mask,
        'input_mask': mask,
        'masked_positions': rng.integers(1, seq // 2, (b, preds)).astype(np.int32),
        'masked_ids': rng.integers(5, config.data.vocab_size, (b, preds)).astype(np.int32),
        'masked_weights': (rng.random((b, preds)) < 0.8).astype(np.float32),
        'nsp_label': rng.integers(0, 2, b).astype(np.int32)})
  return out


def run_steps(strategy_overrides, batches, accum: int = 1):
  """Losses of a few train steps and the final params (host numpy), under one strategy, set up
  as the trainer sets a run up."""
  config, *_ = tiny_setup(*strategy_overrides, f'train.grad_accum_steps={accum}')
  run = setup_steps(config)
  strategy, task, placed = run.strategy, run.task, run.state
  losses = []
  for batch in batches:
    placed, sums = run.train_step(placed, strategy.place_batch(batch))
    losses.append(task.reduce_metrics(strategy.sum_metrics([sums]))['loss'])
  params = jax.tree.map(np.asarray, strategy.to_checkpoint(placed).params)
  return losses, params, placed


MESHES = {
    'data=8': ['parallel.strategy=mesh'],
    'fsdp=8': ['parallel.strategy=mesh', 'parallel.mesh_shape.data=1',
               'parallel.mesh_shape.fsdp=8'],
    'data=2,fsdp=2,tensor=2': ['parallel.strategy=mesh', 'parallel.mesh_shape.data=2',
                               'parallel.mesh_shape.fsdp=2', 'parallel.mesh_shape.tensor=2'],
}


@pytest.fixture(scope='module')
def pmap_run():
  config, *_ = tiny_setup()
  batches = random_batches(config, 3)
  return batches, run_steps([], batches)


@pytest.mark.parametrize('mesh', list(MESHES))
def test_mesh_gives_the_same_losses_and_params_as_pmap(mesh, pmap_run):
  batches, (pmap_losses, pmap_params, _) = pmap_run
  losses, params, _ = run_steps(MESHES[mesh], batches)
  print(f'{mesh}: losses {losses} (pmap {pmap_losses})')
  # Same global batch, dropout off: only float32 summation order differs between layouts.
  np.testing.assert_allclose(losses, pmap_losses, rtol=2e-5)
  assert losses[-1] != losses[0]  # the updates changed the model
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6),
               params, pmap_params)


@pytest.fixture(scope='module')
def fsdp_accumulated_run(pmap_run):
  """fsdp=8 with two accumulation microbatches, shared by the tests of its updates and of its
  per-device memory."""
  batches, _ = pmap_run
  return run_steps(MESHES['fsdp=8'], batches, accum=2)


def test_mesh_with_accumulation_matches_pmap(pmap_run, fsdp_accumulated_run):
  _, (pmap_losses, *_) = pmap_run
  losses, *_ = fsdp_accumulated_run
  np.testing.assert_allclose(losses, pmap_losses, rtol=2e-5)


def test_fsdp_keeps_an_eighth_of_params_and_moments_per_device(pmap_run, fsdp_accumulated_run):
  _, (*_, pmap_state) = pmap_run
  *_, state = fsdp_accumulated_run
  total = sum(x.nbytes for x in jax.tree.leaves(state.params))
  fsdp = sharding.bytes_per_device(state.params)
  fsdp_all = sharding.bytes_per_device((state.params, state.opt_state))
  replicated = sharding.bytes_per_device(pmap_state.params)
  print(f'params {total:,} bytes; per device: pmap {replicated:,}, fsdp=8 {fsdp:,}; with '
        f'Adam moments fsdp=8 {fsdp_all:,}')
  assert replicated == total
  # An eighth, plus the few vectors (biases over `mlp`/`heads`) that fsdp does not split.
  assert total / 8 <= fsdp <= 1.1 * total / 8
  assert fsdp_all <= 1.1 * 3 * total / 8  # params + mu + nu
  kernel = state.params['encoder']['layer_0']['attention']['query']['kernel']
  assert kernel.sharding.spec[0] == 'fsdp'  # its `embed` axis


def test_mesh_shape_fills_the_free_axis_and_refuses_a_wrong_product():
  config, *_ = tiny_setup('parallel.mesh_shape.fsdp=2')
  assert sharding.mesh_shape(config.parallel, 8) == {'data': 4, 'fsdp': 2, 'tensor': 1}
  config.parallel.mesh_shape.data = 3
  with pytest.raises(ConfigError, match='needs 6 devices; there are 8'):
    sharding.mesh_shape(config.parallel, 8)


def test_unknown_strategy_and_mesh_axis_are_config_errors():
  config, *_ = tiny_setup('parallel.strategy=zero')
  with pytest.raises(ConfigError, match="use 'pmap' or 'mesh'"):
    make_strategy(config.parallel)
  config.parallel.logical_axis_rules.embed = 'fdsp'
  with pytest.raises(ConfigError, match="unknown mesh axis 'fdsp'"):
    sharding.logical_axis_rules(config.parallel)


@pytest.mark.slow
def test_trainer_on_fsdp_mesh_resumes_a_pmap_run_exactly(tmp_path, corpus, cache_dir):
  from tests.train.test_trainer import losses, train
  common = ('train.num_steps=4', 'train.log_every=1', 'train.batch_size=16',
            'train.checkpoint_every=2')
  train(tmp_path / 'straight', corpus, cache_dir, *common)
  train(tmp_path / 'switched', corpus, cache_dir, *common, 'train.stop_at_step=2')
  train(tmp_path / 'switched', corpus, cache_dir, *common, *MESHES['fsdp=8'])
  straight, switched = losses(tmp_path / 'straight'), losses(tmp_path / 'switched')
  assert sorted(switched) == [1, 2, 3, 4]
  np.testing.assert_allclose([switched[s] for s in straight], list(straight.values()), rtol=2e-5)


@pytest.mark.slow  # a memory property, close to a benchmark; the FSDP values are checked above
def test_fsdp_activations_take_no_more_memory_than_data_parallel():
  # Without the activations' logical constraints, XLA spread the weights' fsdp split into the
  # activations and the step's temporaries doubled (tiny BERT) or more (BERT-large).
  config, task, model, tx = tiny_setup('train.batch_size=64', 'parallel.strategy=mesh')
  batch = jax.eval_shape(lambda: task.dummy_batch(config, 64))
  temporaries = {}
  for name in ('data=8', 'fsdp=8'):
    config.parallel.mesh_shape.update(
        {'data': -1, 'fsdp': 1} if name == 'data=8' else {'data': 1, 'fsdp': -1})
    strategy = make_strategy(config.parallel)
    state = strategy.lay_out(model, tx, task.dummy_batch(config))
    train_step, _ = strategy.steps(model, task, tx, 1)
    memory = train_step.lower(state, batch).compile().memory_analysis()
    temporaries[name] = memory.temp_size_in_bytes
  print(f'temporaries per device: {temporaries}')
  assert temporaries['fsdp=8'] <= 1.1 * temporaries['data=8']


def test_modern_fields_on_an_fsdp_tensor_mesh_match_pmap():
  """RoPE, a local layer, no biases, GeGLU: their parameters take logical axes like BERT's."""
  modern = ['model.size=modern_tiny', 'model.local_window=16', 'data.nsp=false']
  config, _, model, _ = tiny_setup(*modern)
  assert model.config.use_bias is False and model.config.is_local(1)
  batches = random_batches(config, 2)
  pmap_losses, pmap_params, _ = run_steps(modern, batches)
  losses, params, _ = run_steps([*modern, *MESHES['data=2,fsdp=2,tensor=2']], batches)
  np.testing.assert_allclose(losses, pmap_losses, rtol=2e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6),
               params, pmap_params)
