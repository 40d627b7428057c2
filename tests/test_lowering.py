"""The accelerator code paths, lowered for `cuda` and `tpu` from this CPU-only machine.

`jax.export` lowers a jitted function for platforms other than the local one: what it accepts
would compile there, with nothing of this host baked in. The pmap strategy's step is exported
as what pmap builds from it, a `shard_map` over a one-axis `batch` mesh (8 simulated devices)
under `jax.jit`; the mesh strategy's step is its own jit. Every export runs with
`jax.default_backend` made to fail, so a module that asked the backend while being traced
(instead of reading `model.attention_impl`, resolved before) fails here, and the lowered
module must hold no host callback. cuDNN's fused attention cannot be lowered without cuDNN;
`benchmarks/gpu.sh` exercises it on a GPU.

The bfloat16 pretraining step lowered for `tpu` also says what a profile would otherwise have
to find on the device: every matrix product takes bfloat16 operands (accumulating in float32
is fine), and the dropout masks' bits come from the PRNG `train.rng_impl` names.
"""

import functools
import math
import re
from unittest import mock

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from encoder import configs
from encoder.modules.config import model_config
from encoder.modules.transformer import Encoder
from encoder.tasks import get_task
from encoder.train.optim import make_optimizer
from encoder.train.resolve import resolve_config
from encoder.train.steps import create_state, eval_step, train_step
from encoder.train.strategy import MeshStrategy

PLATFORMS = ('cuda', 'tpu')
CALLBACKS = ('callback', 'host_compute')  # custom-call targets that would run Python on the host


def setup(dtype: str, impl: str, *overrides: str, exp: str = 'mlm_nsp_tiny:smoke'):
  config = configs.load_experiment(exp)
  configs.apply_overrides(config, [f'model.dtype={dtype}', f'model.attention_impl={impl}',
                                   'model.attention_dropout_rate=0.0', 'train.batch_size=16',
                                   *overrides])
  config = resolve_config(config)
  config.model.vocab_size = config.data.vocab_size
  task = get_task(config.task)
  model, tx = task.build_model(config), make_optimizer(config.train)
  state = jax.eval_shape(lambda: create_state(
      nn.unbox(model.init(jax.random.key(0), task.dummy_batch(config)))['params'], tx, 0))
  batch = jax.eval_shape(lambda: task.dummy_batch(config, config.train.batch_size))
  return config, task, model, tx, state, batch


def export(fn, *args, platforms=PLATFORMS) -> str:
  """`fn` exported for `platforms` (cuda and tpu), traced while `jax.default_backend` refuses
  to answer."""
  def refuse():
    raise AssertionError('jax.default_backend() was called while tracing')
  with mock.patch.object(jax, 'default_backend', refuse):
    exported = jax.export.export(fn, platforms=platforms)(*args)
  assert tuple(exported.platforms) == tuple(platforms)
  text = exported.mlir_module()
  for word in CALLBACKS:
    assert word not in text, f'a host callback ({word}) in the lowered module'
  return text


def pmap_as_shard_map(body, in_specs, out_specs):
  """What `jax.pmap(body, axis_name='batch')` is: the body per device, over a `batch` mesh.

  Unchecked replication (`check_vma=False`), as under pmap, which does not type it: the bf16
  matmul's custom VJP returns each device's own weight gradient, summed by the step's psum."""
  mesh = Mesh(np.array(jax.devices()[:8]), ('batch',))
  return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                               check_vma=False))


@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_pmap_train_and_eval_steps_lower_for_cuda_and_tpu(dtype):
  _, task, model, tx, state, batch = setup(dtype, 'xla', 'train.grad_accum_steps=2')
  train = functools.partial(train_step, model=model, task=task, tx=tx, grad_accum_steps=2,
                            axis_name='batch')
  text = export(pmap_as_shard_map(train, (P(), P('batch')), (P(), P())), state, batch)
  assert 'all-reduce' in text or 'all_reduce' in text  # the psum over devices
  evaluate = functools.partial(eval_step, model=model, task=task, axis_name='batch')
  export(pmap_as_shard_map(evaluate, (P(), P('batch')), P()), state.params, batch)


def test_mesh_train_step_lowers_for_cuda_and_tpu():
  config, task, model, tx, state, batch = setup(
      'bfloat16', 'xla', 'parallel.strategy=mesh', 'parallel.mesh_shape.data=2',
      'parallel.mesh_shape.fsdp=4')
  strategy = MeshStrategy(config.parallel)
  strategy.lay_out(model, tx, task.dummy_batch(config))
  train, evaluate = strategy.steps(model, task, tx, 1)
  text = export(train, state, batch)
  assert 'sharding_constraint' in text  # the activations' logical constraints, lowered
  export(evaluate, state.params, batch)


@pytest.mark.parametrize('impl', ['explicit', 'xla'])
def test_encode_lowers_for_cuda_and_tpu(impl):
  cfg = model_config({'size': 'tiny', 'vocab_size': 512, 'attention_impl': impl,
                      'dtype': 'bfloat16'}, platform='cpu')
  ids = jax.ShapeDtypeStruct((4, 32), jnp.int32)
  encoder = Encoder(cfg)
  params = jax.eval_shape(lambda: nn.unbox(encoder.init(jax.random.key(0),
                                                        jnp.zeros((1, 32), jnp.int32))))
  forward = jax.jit(lambda p, i, s, m: encoder.apply(p, i, s, m).sequence_output)
  export(forward, params, ids, ids, ids)


@pytest.mark.parametrize('attention', ['bidirectional', 'causal'])
@pytest.mark.parametrize('impl', ['explicit', 'xla'])
def test_packed_encode_lowers_for_cuda_and_tpu(impl, attention):
  """Packed rows (example ids and restarting positions) on both attention paths: the XLA path
  takes the block-diagonal mask through jax.nn.dot_product_attention."""
  cfg = model_config({'size': 'tiny', 'vocab_size': 512, 'attention_impl': impl,
                      'attention': attention, 'dtype': 'bfloat16'}, platform='cpu')
  ids = jax.ShapeDtypeStruct((4, 32), jnp.int32)
  encoder = Encoder(cfg)
  params = jax.eval_shape(lambda: nn.unbox(encoder.init(jax.random.key(0),
                                                        jnp.zeros((1, 32), jnp.int32))))
  forward = jax.jit(lambda p, i, s, m, e, pos: encoder.apply(
      p, i, s, m, input_segmentation=e, input_positions=pos).sequence_output)
  text = export(forward, params, ids, ids, ids, ids, ids)
  assert 'compare' in text  # the mask is built from the example ids inside the module


# ModernBERT's architecture (RoPE, a local window on layer 1, no biases, GeGLU) on packed rows.
MODERN = ('model.size=modern_tiny', 'model.local_window=16', 'data.nsp=false',
          'data.packing=documents')


def test_modern_packed_train_and_eval_steps_lower_for_cuda_and_tpu():
  config, task, model, tx, state, batch = setup('bfloat16', 'xla', *MODERN)
  assert model.config.is_local(1) and 'input_positions' in batch
  train = functools.partial(train_step, model=model, task=task, tx=tx, grad_accum_steps=1,
                            axis_name='batch')
  export(pmap_as_shard_map(train, (P(), P('batch')), (P(), P())), state, batch)
  evaluate = functools.partial(eval_step, model=model, task=task, axis_name='batch')
  export(pmap_as_shard_map(evaluate, (P(), P('batch')), P()), state.params, batch)
  config, task, model, tx, state, batch = setup(
      'bfloat16', 'explicit', *MODERN, 'parallel.strategy=mesh', 'parallel.mesh_shape.data=2',
      'parallel.mesh_shape.fsdp=4')
  strategy = MeshStrategy(config.parallel)
  strategy.lay_out(model, tx, task.dummy_batch(config))
  train, evaluate = strategy.steps(model, task, tx, 1)
  export(train, state, batch)
  export(evaluate, state.params, batch)


@pytest.mark.parametrize('impl', ['explicit', 'xla'])
def test_modern_packed_encode_lowers_for_cuda_and_tpu(impl):
  cfg = model_config({'size': 'modern_tiny', 'local_window': 8, 'vocab_size': 512,
                      'attention_impl': impl, 'dtype': 'bfloat16'}, platform='cpu')
  ids = jax.ShapeDtypeStruct((4, 32), jnp.int32)
  encoder = Encoder(cfg)
  params = jax.eval_shape(lambda: nn.unbox(encoder.init(jax.random.key(0),
                                                        jnp.zeros((1, 32), jnp.int32))))
  forward = jax.jit(lambda p, i, m, e, pos: encoder.apply(
      p, i, None, m, input_segmentation=e, input_positions=pos).pooled_output)
  text = export(forward, params, ids, ids, ids, ids)
  assert 'cosine' in text and 'sine' in text  # the rotary tables, from the positions given


@pytest.mark.slow  # the modern paths lower at small size in the default suite (above)
def test_mlm_modern_base_lowers_at_its_size_with_stable_adamw_and_wsd():
  # The real experiment (22 layers, 1024 tokens, StableAdamW, warmup-stable-decay), abstract
  # shapes only: one row per device, on the FSDP mesh as a pod would run it, and under pmap.
  config, task, model, tx, state, batch = setup(
      'bfloat16', 'xla', 'train.batch_size=8', 'parallel.strategy=mesh',
      'parallel.mesh_shape.data=1', 'parallel.mesh_shape.fsdp=8', exp='mlm_modern_base')
  assert (model.config.num_layers, config.train.optimizer, config.train.schedule) == (
      22, 'stable_adamw', 'wsd')
  strategy = MeshStrategy(config.parallel)
  strategy.lay_out(model, tx, task.dummy_batch(config))
  train, evaluate = strategy.steps(model, task, tx, 1)
  export(train, state, batch)
  export(evaluate, state.params, batch)
  _, task, model, tx, state, batch = setup('bfloat16', 'xla', 'train.batch_size=8',
                                           exp='mlm_modern_base')
  step = functools.partial(train_step, model=model, task=task, tx=tx, grad_accum_steps=1,
                           axis_name='batch')
  export(pmap_as_shard_map(step, (P(), P('batch')), (P(), P())), state, batch)


def dot_operand_types(text: str) -> list[tuple[str, ...]]:
  """The operands' element types of every `stablehlo.dot_general` in a lowered module."""
  out = []
  for line in text.splitlines():
    if 'stablehlo.dot_general' in line:
      operands = re.search(r':\s*\(([^)]*)\)\s*->', line).group(1)
      out.append(tuple(re.findall(r'x([a-z]+\d*)>', operands)))
  return out


def threefry_sizes(text: str) -> list[int]:
  """Elements of each uint32 operand of a call to threefry's hash (jax outlines it as a
  function named threefry2x32*): a dropout mask's size when threefry draws the masks."""
  sizes = []
  for types in re.findall(r'call @threefry2x32\w*\([^)]*\)\s*:\s*\(([^)]*)\)', text):
    sizes += [math.prod(int(d) for d in dims.split('x') if d)
              for dims in re.findall(r'tensor<([\dx]*)xui32>', types)]
  return sizes


def rng_bit_generator_shapes(text: str) -> list[tuple[int, ...]]:
  """The bits' shape of every `stablehlo.rng_bit_generator` (its second result)."""
  found = re.findall(r'stablehlo\.rng_bit_generator.*->\s*\(tensor<[^>]*>,\s*tensor<([\dx]*)xui32>',
                     text)
  return [tuple(int(d) for d in dims.split('x') if d) for dims in found]


@pytest.mark.parametrize('rng_impl', ['threefry', 'rbg', 'unsafe_rbg'])
def test_bfloat16_train_step_for_tpu_multiplies_in_bfloat16_and_draws_masks_from_its_prng(
    rng_impl):
  # BERT's recipe (dropout 0.1 on the hidden states and on the attention probabilities), the
  # pmap step over 8 devices, lowered for a TPU alone.
  config, task, model, tx, state, batch = setup(
      'bfloat16', 'explicit', 'model.dropout_rate=0.1', 'model.attention_dropout_rate=0.1')
  train = functools.partial(train_step, model=model, task=task, tx=tx, grad_accum_steps=1,
                            axis_name='batch', rng_impl=rng_impl)
  text = export(pmap_as_shard_map(train, (P(), P('batch')), (P(), P())), state, batch,
                platforms=('tpu',))
  dots = dot_operand_types(text)
  # Every product of the step, forward and backward (Q/K/V, scores, context, output, FFN,
  # pooler, NSP and the MLM decoder) takes bfloat16 operands; none must stay float32.
  assert len(dots) >= 40 and all(types == ('bf16', 'bf16') for types in dots), \
      sorted({t for t in dots if t != ('bf16', 'bf16')})
  per_device = config.train.batch_size // 8
  seq, heads = config.data.max_seq_length, model.config.num_heads
  attention_mask = (per_device, heads, seq, seq)  # one layer's attention-dropout mask
  hashed, generated = threefry_sizes(text), rng_bit_generator_shapes(text)
  if rng_impl == 'threefry':
    assert not generated
    assert max(hashed) >= math.prod(attention_mask)  # the masks' bits: threefry's hash
  else:
    assert attention_mask in generated  # the masks' bits: XLA's RngBitGenerator
    assert max(hashed) <= 4  # threefry still derives keys (the step's), never a mask


# The long-context attention forms on ModernBERT's architecture (RoPE, a local layer, packed
# rows), with the real train step: blockwise (plain JAX, any backend) and splash (TPU's
# Pallas kernel, lowered as Mosaic, not interpreted).
@pytest.mark.parametrize('attention_dropout', ['0.0', '0.1'])
def test_blockwise_train_step_lowers_for_cuda_and_tpu(attention_dropout):
  _, task, model, tx, state, batch = setup(
      'bfloat16', 'blockwise', *MODERN, 'model.attention_block_size=8',
      f'model.attention_dropout_rate={attention_dropout}')
  assert model.config.attention_impl == 'blockwise' and batch['input_ids'].shape[-1] > 8
  train = functools.partial(train_step, model=model, task=task, tx=tx, grad_accum_steps=1,
                            axis_name='batch')
  text = export(pmap_as_shard_map(train, (P(), P('batch')), (P(), P())), state, batch)
  assert 'stablehlo.while' in text  # the loop over key blocks, forward and backward


def test_splash_train_step_lowers_for_tpu():
  with mock.patch('encoder.modules.config.local_platform', lambda: 'tpu'):  # auto on a TPU
    _, task, model, tx, state, batch = setup('bfloat16', 'auto', *MODERN)
  assert model.config.attention_impl == 'splash' and not model.config.pallas_interpret
  assert model.config.head_dim >= 64  # modern_tiny: 2 heads of 64, which splash takes
  train = functools.partial(train_step, model=model, task=task, tx=tx, grad_accum_steps=1,
                            axis_name='batch')
  text = export(pmap_as_shard_map(train, (P(), P('batch')), (P(), P())), state, batch,
                platforms=('tpu',))
  assert 'tpu_custom_call' in text  # the Mosaic kernels: forward, dq and dkv
  evaluate = functools.partial(eval_step, model=model, task=task, axis_name='batch')
  text = export(pmap_as_shard_map(evaluate, (P(), P('batch')), P()), state.params, batch,
                platforms=('tpu',))
  assert 'tpu_custom_call' in text
