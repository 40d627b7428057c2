"""`train.rng_impl`: the PRNG behind dropout (threefry, rbg, unsafe_rbg), on 8 simulated devices.

Within each choice a run is what it was with threefry alone: a resumed run draws the masks the
uninterrupted one draws, one device under jit draws what a one-device pmap draws (the device
index folded in either way), and under the mesh strategy (one key for the global batch) the
masks do not depend on how the devices split the batch (one device, eight by rows, eight by
model dimensions). Under pmap each device folds its own index into the key, so there eight
devices draw other masks than one, whatever the choice. Across choices only the masks change.
Threefry derives its keys as before the field existed, so older checkpoints resume with the
same masks.

Run as a script (`python tests/train/test_rng_impl.py IMPL...`), it prints the losses of the
mesh runs below as JSON: the one-device half of the layout test runs it in a process that sees
one device.
"""

import json
import os
import subprocess
import sys

if __name__ == '__main__':  # the one-device process: the repository on the path, one device
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
      __file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from encoder import configs  # noqa: E402
from encoder.errors import ConfigError  # noqa: E402
from encoder.train.checkpoint import Checkpointer  # noqa: E402
from encoder.train.resolve import printable, resolve_config  # noqa: E402
from encoder.train.run_setup import setup_steps  # noqa: E402
from encoder.train.steps import dropout_key  # noqa: E402
from tests.train.test_mesh import random_batches, tiny_setup  # noqa: E402

IMPLS = ('threefry', 'rbg', 'unsafe_rbg')
DROPOUT = ('model.dropout_rate=0.1', 'model.attention_dropout_rate=0.1')  # BERT's recipe


def _losses(run, state, batches):
  """The state after a train step on each batch, and each step's loss."""
  losses = []
  for batch in batches:
    state, sums = run.train_step(state, run.strategy.place_batch(batch))
    losses.append(float(run.task.reduce_metrics(run.strategy.sum_metrics([sums]))['loss']))
  return state, losses


def test_rng_impl_is_a_checked_field_that_print_config_shows():
  config = configs.load_experiment('mlm_nsp_tiny:smoke')
  assert printable(resolve_config(config))['train']['rng_impl'] == 'threefry'
  configs.apply_overrides(config, ['train.rng_impl=philox'])
  with pytest.raises(ConfigError) as refused:
    resolve_config(config)
  assert str(refused.value) == "train.rng_impl='philox' is not one of threefry, rbg, unsafe_rbg"


def test_threefry_keys_are_derived_as_before_and_the_others_from_them():
  data = jax.random.key_data(jax.random.key(7))
  step = jnp.asarray(3, jnp.int32)
  # What train_step drew its dropout key from before train.rng_impl existed (one device: the
  # step, then device index 0): older checkpoints resume with the same masks.
  before = jax.random.fold_in(jax.random.fold_in(jax.random.wrap_key_data(data), step), 0)
  key = dropout_key(data, step, None, one_device=True)
  assert jax.random.key_impl(key) == jax.random.key_impl(before)
  np.testing.assert_array_equal(jax.random.key_data(key), jax.random.key_data(before))
  masks = {}
  for impl in IMPLS:
    key = dropout_key(data, step, None, one_device=True, rng_impl=impl)
    assert str(jax.random.key_impl(key)) == {'threefry': 'threefry2x32'}.get(impl, impl)
    again = dropout_key(data, step, None, one_device=True, rng_impl=impl)
    np.testing.assert_array_equal(jax.random.key_data(key), jax.random.key_data(again))
    # A mask as a Flax Dropout draws it: from the key folded with the module's path (rbg and
    # unsafe_rbg draw the same bits from one key; they fold keys differently).
    masks[impl] = np.asarray(jax.random.bernoulli(jax.random.fold_in(key, 11), 0.9, (4096,)))
    later = dropout_key(data, step + 1, None, True, impl)
    later = np.asarray(jax.random.bernoulli(jax.random.fold_in(later, 11), 0.9, (4096,)))
    assert (masks[impl] != later).any()  # a new step, new masks
    assert abs(masks[impl].mean() - 0.9) < 0.02  # 4096 draws: 4.3 standard errors
  assert (masks['threefry'] != masks['rbg']).any() and (masks['rbg'] != masks['unsafe_rbg']).any()


def test_each_pmap_device_draws_its_own_key_and_one_device_the_first_under_every_choice():
  data = jax.random.key_data(jax.random.key(0))
  step = jnp.asarray(5)
  for impl in IMPLS:
    keys = jax.pmap(lambda _, impl=impl: jax.random.key_data(dropout_key(
        data, step, 'batch', False, impl)), axis_name='batch')(jnp.arange(8))
    assert len({tuple(np.asarray(k).tolist()) for k in keys}) == 8, impl
    # One device under jit (OneDeviceStrategy) folds index 0, as pmap's device 0 does: a run
    # moves between a one-device pmap and jit with the same masks.
    alone = jax.jit(lambda impl=impl: jax.random.key_data(dropout_key(data, step, None, True,
                                                                      impl)))()
    np.testing.assert_array_equal(alone, keys[0], err_msg=impl)


@pytest.mark.parametrize('rng_impl', [
    pytest.param('threefry', marks=pytest.mark.slow),
    pytest.param('rbg', marks=pytest.mark.slow),
    'unsafe_rbg'])
def test_a_run_resumed_from_its_checkpoint_draws_the_uninterrupted_masks(rng_impl, tmp_path):
  # 8 devices under pmap, dropout on: 4 steps straight, against 2 steps, a real Orbax
  # checkpoint, its restore into the strategy's layout and 2 more steps.
  config, *_ = tiny_setup(*DROPOUT, f'train.rng_impl={rng_impl}')
  run = setup_steps(config)
  batches = random_batches(config, 4)
  straight, straight_losses = _losses(run, run.state, batches)
  fresh = run.strategy.init_state(run.model, run.tx, run.dummy, config.train.seed)
  half, first = _losses(run, fresh, batches[:2])
  checkpointer = Checkpointer(str(tmp_path), keep=1, asynchronous=False)
  checkpointer.save(2, run.strategy.to_checkpoint(half), {'position': 2})
  saved = checkpointer.restore_newest_readable(
      run.strategy.checkpoint_like(run.model, run.tx, run.dummy))
  checkpointer.close()
  resumed, second = _losses(run, run.strategy.place_state(saved.state), batches[2:])
  assert first + second == straight_losses
  for a, b in zip(jax.tree.leaves(run.strategy.to_checkpoint(resumed)),
                  jax.tree.leaves(run.strategy.to_checkpoint(straight)), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


MESHES = {  # global batch of 16 rows: whole on one device, by rows on 8, whole on each of 8
    'one device': ['parallel.strategy=mesh'],
    'data=8': ['parallel.strategy=mesh'],
    'tensor=8': ['parallel.strategy=mesh', 'parallel.mesh_shape.data=1',
                 'parallel.mesh_shape.tensor=8'],
}


def mesh_losses(rng_impl: str, mesh: str) -> list[float]:
  """Three steps of BERT-tiny with dropout on under the mesh strategy (one key for the global
  batch: the same masks on any layout when the PRNG does not depend on it)."""
  config, *_ = tiny_setup(*DROPOUT, f'train.rng_impl={rng_impl}', *MESHES[mesh])
  run = setup_steps(config)
  return _losses(run, run.state, random_batches(config, 3))[1]


@pytest.mark.slow  # 9 compiles, 3 of them in a process of its own
def test_the_masks_of_a_global_batch_do_not_depend_on_the_device_layout():
  here = os.path.dirname(os.path.abspath(__file__))
  env = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=1',
         'JAX_PLATFORMS': 'cpu'}
  out = subprocess.run([sys.executable, os.path.join(here, 'test_rng_impl.py'), *IMPLS],
                       env=env, capture_output=True, text=True, timeout=900, check=True)
  one_device = json.loads(out.stdout.strip().splitlines()[-1])
  for impl in IMPLS:
    rows, model_split = mesh_losses(impl, 'data=8'), mesh_losses(impl, 'tensor=8')
    # Float32 sums in another order only (as test_mesh's pmap-vs-mesh comparison).
    np.testing.assert_allclose(rows, one_device[impl], rtol=2e-5, err_msg=impl)
    np.testing.assert_allclose(model_split, one_device[impl], rtol=2e-5, err_msg=impl)
    if impl != 'threefry':  # other masks, so other losses: the choice took effect
      assert abs(rows[0] - one_device['threefry'][0]) > 1e-4, impl


@pytest.mark.slow  # two trainer runs and a resume on the smoke corpus
def test_trainer_stopped_and_resumed_under_unsafe_rbg_gives_the_uninterrupted_losses(
    tmp_path, corpus, cache_dir):
  from tests.train.test_trainer import losses, train
  common = ('train.num_steps=6', 'train.eval_every=3', 'train.checkpoint_every=3',
            'train.log_every=1', 'train.rng_impl=unsafe_rbg', *DROPOUT)
  train(tmp_path / 'straight', corpus, cache_dir, *common)
  train(tmp_path / 'resumed', corpus, cache_dir, *common, 'train.stop_at_step=3')
  assert max(losses(tmp_path / 'resumed')) == 3
  train(tmp_path / 'resumed', corpus, cache_dir, *common)
  assert losses(tmp_path / 'resumed') == losses(tmp_path / 'straight')


if __name__ == '__main__':
  assert jax.device_count() == 1, jax.devices()
  print(json.dumps({impl: mesh_losses(impl, 'one device') for impl in sys.argv[1:]}))
