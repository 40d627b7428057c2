"""Device layouts on 8 simulated devices: pmap placement, and mesh shardings from logical axes."""

import flax.linen as nn
import jax
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

from encoder import configs
from encoder.errors import ConfigError
from encoder.train import sharding
from encoder.train.optim import make_optimizer, weight_decay_mask
from encoder.train.steps import create_state


def test_replicated_and_sharded_inputs_have_pmaps_output_layout():
  # pmap recompiles when an input's sharding differs from the one it was traced with; the
  # train step feeds its own output back, so inputs must already have the output's layout.
  step = jax.pmap(lambda state, batch: state + batch.sum(), axis_name=sharding.AXIS)
  state = sharding.replicate(np.zeros(3, np.float32))
  batch = sharding.shard({'x': np.arange(16 * 3, dtype=np.float32).reshape(16, 3)})['x']
  out = step(state, batch)
  assert out.sharding == state.sharding == batch.sharding
  assert batch.shape == (8, 2, 3)
  np.testing.assert_array_equal(sharding.unreplicate(state), np.zeros(3))


def test_per_device_batch_size_needs_an_even_split():
  assert sharding.per_device_batch_size(32, 8) == 4
  with pytest.raises(ConfigError, match='not divisible by 8 batch shards x 3'):
    sharding.per_device_batch_size(32, 8, 3)


class _Toy(nn.Module):
  """A kernel split on `embed`, a bias over `mlp`, and an activation pinned by logical names."""

  @nn.compact
  def __call__(self, x):
    kernel = self.param('kernel', nn.with_logical_partitioning(
        nn.initializers.ones_init(), ('embed', 'mlp')), (16, 8))
    bias = self.param('bias', nn.with_logical_partitioning(
        nn.initializers.zeros_init(), ('mlp',)), (8,))
    return nn.with_logical_constraint(x @ kernel + bias, ('batch', 'length', 'mlp'))


def _fsdp_layout(tx):
  parallel = configs.load_experiment('mlm_nsp_tiny').parallel
  parallel.mesh_shape.update({'data': 2, 'fsdp': 4, 'tensor': 1})
  mesh = sharding.make_mesh(sharding.mesh_shape(parallel))
  rules = sharding.logical_axis_rules(parallel)
  boxed = jax.eval_shape(lambda: create_state(
      _Toy().init(jax.random.key(0), np.ones((8, 4, 16)))['params'], tx, 0))
  return mesh, rules, sharding.shardings_of(boxed, mesh, rules)


def test_optimizer_moments_take_their_parameters_layout_from_the_logical_boxes():
  tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))
  _, _, layout = _fsdp_layout(tx)
  assert layout.params['kernel'].spec == P('fsdp', 'tensor')  # embed -> fsdp, mlp -> tensor
  adam = layout.opt_state[1][0]
  assert adam.mu['kernel'].spec == adam.nu['kernel'].spec == P('fsdp', 'tensor')
  assert all(s.is_fully_replicated for s in (adam.count, layout.step, layout.rng))


def test_weight_decay_mask_reads_parameter_names_through_the_boxes():
  # The mesh layout builds the optimizer on boxed parameters, whose paths end in the box's
  # `value`; the mask must still see `kernel` and `bias` (and so give the real state's tree).
  boxed = _Toy().init(jax.random.key(0), np.ones((8, 4, 16)))['params']
  mask = weight_decay_mask(boxed)
  assert nn.unbox(mask) == {'kernel': True, 'bias': False}


def test_the_layout_has_the_tree_of_the_real_state():
  # `out_shardings` of the jit that creates the state must match its tree exactly.
  config = configs.load_experiment('mlm_nsp_tiny')
  tx = make_optimizer(config.train)
  _, _, layout = _fsdp_layout(tx)
  real = jax.eval_shape(lambda: create_state(
      nn.unbox(_Toy().init(jax.random.key(0), np.ones((8, 4, 16))))['params'], tx, 0))
  assert jax.tree.structure(layout) == jax.tree.structure(real)


def test_activation_rules_split_the_batch_and_keep_the_hidden_axis_whole():
  # `embed -> fsdp` splits the weights; in an activation the batch rule comes first and takes
  # `fsdp`, so the activation's hidden axis stays whole.
  parallel = configs.load_experiment('mlm_nsp_tiny').parallel
  rules = sharding.logical_axis_rules(parallel)
  assert nn.logical_to_mesh_axes(('batch', 'length', 'embed'), rules) == P(
      ('data', 'fsdp'), None, None)
  assert nn.logical_to_mesh_axes(('embed', 'mlp'), rules) == P('fsdp', 'tensor')


def test_logical_constraints_bind_under_the_mesh_rules_and_do_nothing_without():
  mesh, rules, layout = _fsdp_layout(optax.sgd(0.1))
  params = nn.unbox(_Toy().init(jax.random.key(0), np.ones((8, 4, 16))))['params']
  x = np.ones((8, 4, 16), np.float32)

  def traced(params, x):
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(rules):
      return _Toy().apply({'params': params}, x)

  lowered = jax.jit(traced, in_shardings=(layout.params, sharding.batch_sharding(mesh))).lower(
      params, x).as_text()
  assert 'sharding_constraint' in lowered and '{"data", "fsdp"}' in lowered
  plain = jax.jit(lambda p, x: _Toy().apply({'params': p}, x)).lower(params, x).as_text()
  assert 'sharding_constraint' not in plain


def test_bytes_per_device_from_arrays_or_abstract_shardings():
  mesh, _, layout = _fsdp_layout(optax.sgd(0.1))
  kernel = jax.ShapeDtypeStruct((16, 8), np.float32)
  # embed split 4 ways (fsdp), mlp 1 way (tensor=1): a quarter of 16 x 8 float32 per device
  assert sharding.bytes_per_device(kernel, layout.params['kernel']) == 16 * 8 * 4 // 4
  placed = jax.device_put(np.ones((16, 8), np.float32), layout.params['kernel'])
  assert sharding.bytes_per_device(placed) == 16 * 8 * 4 // 4
  assert sharding.bytes_per_device(sharding.replicate(np.ones(5, np.float32))) == 5 * 4
