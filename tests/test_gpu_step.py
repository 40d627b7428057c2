"""The parts of benchmarks/gpu_step.py that a GPU slot cannot debug: reading a GPU's trace, the
dropout check of an attention kernel, the time budget. Fast; the whole script's CPU rehearsal
is tests/test_benchmarks.py's (slow)."""

import gzip
import json

import jax
import jax.numpy as jnp
import pytest

from benchmarks.common import attention_kernels as kernels
from benchmarks.common.xla_trace import (
    NOT_IN_HLO,
    HloIndex,
    categorize_steps,
    our_category,
    read_jax_trace,
)

SOURCE = 'jit(train_step)/jvp(BertForPreTraining)/bert/encoder/layer_0'


def _line(instruction: str, source: str) -> str:
  return f'  {instruction}, metadata={{op_name="{SOURCE}/{source}"}}'


# A GPU executable's HLO text in miniature: a cuBLAS GEMM, fusions and cuDNN's attention.
HLO = '\n'.join([
    'HloModule jit_train_step', '',
    '%fused_computation.3 (p0: f32[8,128]) -> f32[8,128] {',
    '  %p0 = f32[8,128]{1,0} parameter(0)',
    _line('ROOT %exponential.1 = f32[8,128]{1,0} exponential(f32[8,128]{1,0} %p0)',
          'attention/exp'),
    '}', '',
    'ENTRY %main.9 (Arg_0.1: bf16[8,128]) -> f32[8,128] {',
    '  %Arg_0.1 = bf16[8,128]{1,0} parameter(0)',
    _line('%custom-call.1 = (bf16[8,128]{1,0}, s8[0]{0}) custom-call(bf16[8,128]{1,0} %Arg_0.1, '
          'bf16[128,128]{1,0} %Arg_0.1), custom_call_target="__cublas$gemm"',
          'mlp/intermediate/dot_general'),
    _line('%fusion.3 = f32[8,128]{1,0} fusion(bf16[8,128]{1,0} %custom-call.1), kind=kLoop, '
          'calls=%fused_computation.3', 'attention/softmax'),
    _line('%custom-call.2 = (bf16[8,2,4,64]{3,2,1,0}, u8[0]{0}) custom-call(bf16[8,4,2,64]'
          '{3,2,1,0} %fusion.3), custom_call_target="__cudnn$fmhaSoftmaxDropout"',
          'attention/dot_product_attention'),
    _line('ROOT %loop_add_fusion.1 = f32[8,128]{1,0} fusion(f32[8,128]{1,0} %fusion.3), '
          'kind=kLoop, calls=%fused_computation.3', 'attention/softmax'),
    '}'])


def _event(pid, tid, ts, dur, name, **args):
  return {'ph': 'X', 'pid': pid, 'tid': tid, 'ts': ts, 'dur': dur, 'name': name, 'args': args}


def _meta(pid, tid, kind, name):
  return {'ph': 'M', 'pid': pid, 'tid': tid, 'name': kind, 'args': {'name': name}}


def test_a_gpu_trace_counts_the_streams_kernels_not_the_hosts_launches(tmp_path):
  # One step of 1 ms: on stream 7 a fusion (0-400 µs) then a cuBLAS GEMM (400-900); on stream
  # 14 a copy XLA did not annotate (850-950), overlapping the GEMM for 50 µs; then a kernel
  # run inside a command buffer (950-980), annotated with the command buffer's name and found
  # by its own name, its fusion's. The host's launches carry hlo_op too, and a derived "XLA
  # Ops" line repeats a kernel: neither is device work.
  events = [
      _meta(1, 0, 'process_name', '/host:CPU'), _meta(2, 0, 'process_name', '/host:CUPTI'),
      _meta(3, 0, 'process_name', '/device:GPU:0'),
      _meta(3, 7, 'thread_name', 'Stream #7(Compute)'),
      _meta(3, 14, 'thread_name', 'Stream #14(MemcpyD2D)'), _meta(3, 99, 'thread_name', 'XLA Ops'),
      _event(1, 1, 0, 1000, 'step_profile:0'),
      _event(2, 5, 10, 5, 'cuLaunchKernel', hlo_op='fusion.3'),
      _event(2, 5, 20, 5, 'cuLaunchKernel', hlo_op='custom-call.1'),
      _event(3, 7, 0, 400, 'loop_exponential_fusion', hlo_op='fusion.3'),
      _event(3, 7, 400, 500, 'sm90_xmma_gemm_bf16bf16', hlo_op='custom-call.1'),
      _event(3, 14, 850, 100, 'MemcpyD2D'),
      _event(3, 7, 950, 30, 'loop_add_fusion_1', hlo_op='command_buffer.4'),
      _event(3, 99, 400, 500, 'custom-call.1', hlo_op='custom-call.1'),
  ]
  folder = tmp_path / 'plugins' / 'profile' / 'run'
  folder.mkdir(parents=True)
  with gzip.open(folder / 'perfetto_trace.json.gz', 'wt') as f:
    json.dump({'traceEvents': events}, f)
  hlo = HloIndex(HLO)
  [step] = read_jax_trace(str(tmp_path), 1, hlo)
  assert step['wall_ms'] == 1.0 and step['busy_ms'] == pytest.approx(0.98)
  assert step['ops'] == pytest.approx({'fusion.3': 0.4, 'custom-call.1': 0.475,
                                       'MemcpyD2D': 0.075, 'loop_add_fusion.1': 0.03})
  [summed] = categorize_steps([step], hlo, batch=8)
  assert summed['categories'] == pytest.approx({
      'matmul: dense layers': 0.475, 'softmax + mask': 0.43, NOT_IN_HLO: 0.075})
  assert summed['phases'] == pytest.approx({'forward': 0.905, 'other': 0.075})
  assert our_category('custom-call.2', hlo, 8) == 'matmul: attention'  # cuDNN's fused kernel


def _unscaled(rate):
  def attend(q, k, v, key):  # drops, but keeps the survivors' weights as they were
    scores = jnp.einsum('btnh,bsnh->bnts', q, k)
    probs = jax.nn.softmax(scores.astype(jnp.float32), axis=-1)
    probs = jnp.where(jax.random.bernoulli(key, 1 - rate, probs.shape), probs, 0.0)
    return jnp.einsum('bnts,bsnh->btnh', probs.astype(q.dtype), v)
  return attend


def _same_mask_every_call(rate):
  attend = kernels.explicit(rate)
  return lambda q, k, v, key: attend(q, k, v, jax.random.key(0))


def _backward_with_another_mask(rate):
  attend = kernels.explicit(rate)

  @jax.custom_vjp
  def run(q, k, v, key):
    return attend(q, k, v, key)

  def forward(q, k, v, key):
    return attend(q, k, v, key), (q, k, v, key)

  def backward(residuals, g):
    q, k, v, key = residuals
    _, pullback = jax.vjp(lambda q, k, v: attend(q, k, v, jax.random.fold_in(key, 7)), q, k, v)
    return (*pullback(g), None)

  run.defvjp(forward, backward)
  return run


@pytest.mark.parametrize('wrong', [_unscaled, _same_mask_every_call, _backward_with_another_mask])
def test_the_dropout_check_passes_the_models_dropout_and_fails_wrong_ones(wrong):
  right = kernels.dropout_check(kernels.explicit(0.1), 0.1, batch=4, heads=2, length=64)
  assert right['pass'] and abs(right['dropped_fraction'] - 0.1) < 0.01
  assert not kernels.dropout_check(wrong(0.1), 0.1, batch=4, heads=2, length=64)['pass']


def test_an_attention_kernel_this_machine_lacks_is_a_json_error():
  if jax.default_backend() == 'gpu':
    pytest.skip('a GPU may have cuDNN')
  row = kernels.measure('cudnn_dropout', 0.1, (2, 16, 2, 16), repeats=1)
  assert row['variant'] == 'attention:cudnn_dropout' and 'fwd_bwd_ms' not in row
  assert row['error'].startswith('Unavailable: ')


def test_the_budget_skips_what_would_not_fit(monkeypatch):
  from benchmarks import gpu_step
  now = [0.0]
  monkeypatch.setattr(gpu_step.time, 'perf_counter', lambda: now[0])
  budget = gpu_step.Budget(400, {'ours': 50, 'hf': 200})
  now[0] = 100.0
  assert budget.allows('ours') and budget.allows('hf')  # the guesses fit
  budget.spent('hf', 20)  # a measurement replaces the guess, even a smaller one
  now[0] = 300.0
  assert budget.allows('hf') and budget.allows('ours')  # 300 + 20, 300 + 50 <= 400
  budget.spent('ours', 150)
  budget.spent('ours', 60)  # then the longest measured stands
  assert not budget.allows('ours') and budget.cost['ours'] == 150  # 300 + 150 > 400


def test_each_variant_names_its_forms_and_none_runs_what_another_ran(monkeypatch, capsys):
  # On a GPU the recipe's cuDNN is refused for its dropout and runs the explicit form at 128
  # tokens, as model.attention_impl=explicit does: that variant is skipped, saying so; the
  # blockwise variant runs in tiles of half the row, so it runs blockwise.
  from benchmarks import gpu_step
  from encoder.modules.config import building_for
  with building_for('gpu'):
    plan = {name: gpu_step.what_runs(name, gpu_step.FULL) for name in gpu_step.VARIANTS}
  forms = {name: runs[2] for name, runs in plan.items()}
  assert forms['recipe'] == forms['attention_explicit'] == 'global explicit'
  assert forms['attention_blockwise'] == 'global blockwise'
  assert forms['no_attention_dropout'] == 'global cudnn'
  assert plan['attention_explicit'] == plan['recipe']
  assert len(set(plan.values())) == len(plan) - 1  # that pair alone runs the same program
  # The script's loop (the steps stubbed): the duplicate's line names the variant it repeats,
  # every other line the forms it ran.
  monkeypatch.setattr(gpu_step, 'run_variant', lambda name, plan, compare: {
      'variant': name, 'forms': gpu_step.forms_ran(gpu_step.variant_config(name, plan)),
      'seq_per_s': 1.0})
  rows = gpu_step.run_variants(gpu_step.REHEARSAL, 'none', gpu_step.Budget(1e9, {'ours': 0}))
  skipped = [r for r in rows if 'skipped' in r]
  assert [r['variant'] for r in skipped] == ['attention_explicit']
  assert skipped[0]['skipped'] == 'runs what recipe ran: global explicit at batch 8'
  assert {r['variant']: r['forms'] for r in rows}['attention_blockwise'] == 'global blockwise'
  assert all(r['forms'] for r in rows)
