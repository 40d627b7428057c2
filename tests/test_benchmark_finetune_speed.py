"""benchmarks/finetune_speed.py: which FLOPs it counts (each example at its own length), the
dtype each arm and the ceiling compute in, and main's plumbing; the numbers themselves are
never checked (speed is measured by running the script)."""

import os

import pytest

from tests.benchmark_scripts import BENCHMARKS, NEEDS_HF_SIDE, json_lines, script, torch_available


def test_finetune_speed_counts_each_example_at_its_own_length():
  """MFU counts useful work: a packed row's examples by their `input_segmentation` slots, a
  padded row by its mask; the computed FLOPs are the batch's whole shape."""
  from types import SimpleNamespace

  import numpy as np
  speed = script('finetune_speed')
  packed = {'input_mask': np.array([[1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0]]),
            'input_segmentation': np.array([[1, 1, 1, 2, 2, 0], [1, 1, 0, 0, 0, 0]])}
  assert speed.example_lengths(packed) == [3, 2, 2]
  padded = {'input_mask': np.array([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])}
  assert speed.example_lengths(padded) == [3, 1]  # an empty filler row is no example
  cfg = SimpleNamespace(hidden_size=4, num_layers=2, vocab_size=10, intermediate_size=8,
                        embedding_width=4, activation='gelu', pooler='none', local_window=0,
                        is_local=lambda i: False)
  flops = speed.Counter(cfg)
  flops.add([3, 2, 2], (2, 6))
  # By hand: N = 2 layers x (4 d^2 + 2 d ffn) = 2 x (64 + 64) = 256 matmul parameters;
  # an example of t tokens costs 6 N t + 12 d t (layers x t) = 1536 t + 96 t^2.
  per = {t: 1536 * t + 96 * t * t for t in (2, 3, 6)}
  useful, computed = flops.per_example()
  assert useful == (per[3] + 2 * per[2]) / 3
  assert computed == 2 * per[6] / 3


def test_finetune_speed_dtype_defaults_to_float32_and_is_set_once():
  speed = script('finetune_speed')
  assert speed.parse_args([]).dtype == 'float32'
  assert speed.dtype_overrides('float32') == []  # a float32 run is the run it always was
  assert speed.parse_args(['--dtype', 'bfloat16']).dtype == 'bfloat16'
  assert speed.dtype_overrides('bfloat16') == ['model.dtype=bfloat16']
  for argv in (['--dtype', 'float16'], ['--config', 'model.dtype=bfloat16'],
               ['--config', ' model.dtype =float32']):  # --dtype also sets the HF side
    with pytest.raises(SystemExit):
      speed.parse_args(argv)
  assert speed.parse_args(['--config', 'model.attention_impl=explicit']).config == [
      'model.attention_impl=explicit']


@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_finetune_speed_ceiling_times_the_product_in_the_runs_dtype(dtype):
  import jax.numpy as jnp

  from benchmarks.common.step_timing import Ceiling
  speed = script('finetune_speed')
  rates = speed.gemm_ceiling(64, 32, 48, torch_too=torch_available(), dtype=dtype)
  assert set(rates) == ({'xla', 'torch'} if torch_available() else {'xla'})
  assert all(rate > 0 for rate in rates.values())
  # XLA's side is the model's own product: operands in the dtype, accumulated in float32.
  xla = Ceiling(64, 32, 48, dtype)
  assert xla.x.dtype == xla.w.dtype == jnp.dtype(dtype)
  text = xla.fn.lower(xla.x, xla.w).as_text()
  short = 'bf16' if dtype == 'bfloat16' else 'f32'
  assert f'tensor<64x32x{short}>' in text and 'x48xf32>' in text
  if torch_available():
    import torch
    a, b = speed.torch_operands(64, 32, 48, dtype)
    assert a.dtype == b.dtype == getattr(torch, dtype) and a.shape == (64, 32)


@pytest.mark.skipif(not os.path.isfile(os.path.join(os.path.dirname(BENCHMARKS), '..', 'shared',
                                                    'data', 'sst2', 'train.tsv')),
                    reason='needs ../shared/data/sst2')
@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_finetune_speed_runs_every_arm_and_the_ceiling_in_its_dtype(dtype, tmp_path, capsys,
                                                                    monkeypatch):
  """main's plumbing, with the arms and the ceiling replaced by recorders (the real ones are
  what the benchmark times): every arm of ours gets model.dtype=bfloat16 (float32: no dtype
  override at all), Hugging Face's the dtype, the ceiling is timed in it, and the line says so."""
  from types import SimpleNamespace
  speed = script('finetune_speed')
  shape = SimpleNamespace(hidden_size=384, num_layers=6, vocab_size=30522, intermediate_size=1536,
                          embedding_width=384, activation='gelu', pooler='tanh', local_window=0,
                          is_local=lambda i: False)  # MiniLM-L6's
  seen = {'ours': [], 'theirs': [], 'ceiling': []}

  class Arm:
    def __init__(self, rate):
      self.counter, self.rate, self.lengths, self.compile_s = speed.Counter(shape), rate, [8], 1.0
      self.counter.add([3, 5], (2, 8))

    def run(self, steps):
      return self.rate

  def ours(exp, workdir, overrides, steps_ahead):
    seen['ours'].append(overrides)
    return Arm(40.0)

  def theirs(*args):
    seen['theirs'].append(args[-1])
    return Arm(20.0)

  def ceiling(m, k, n, torch_too, dtype):
    seen['ceiling'].append(dtype)
    return {'xla': 3e9, 'torch': 2e9}

  monkeypatch.setattr(speed, 'Ours', ours)
  monkeypatch.setattr(speed, 'Theirs', theirs)
  monkeypatch.setattr(speed, 'gemm_ceiling', ceiling)
  monkeypatch.setattr(speed, 'minilm_dir', lambda: str(tmp_path / 'hf'))  # never read
  (tmp_path / 'minilm').mkdir()  # stands for the converted model: main skips converting
  assert speed.main(['--tasks', 'sst2', '--steps', '1', '--rounds', '2', '--dtype', dtype,
                     '--workdir', str(tmp_path)]) == 0
  [line] = json_lines(capsys.readouterr().out)
  assert len(seen['ours']) == 3  # bucketed, padded, packed
  assert all(o.count(f'model.dtype={dtype}') == (dtype == 'bfloat16') for o in seen['ours'])
  assert all(not any(x.startswith('model.dtype') for x in o)
             for o in seen['ours'] if dtype == 'float32')
  assert seen['ceiling'] == [dtype, dtype]
  assert line['dtype'] == line['ceiling_dtype'] == dtype
  assert line['ceiling_gflops'] == 3.0 and line['torch_ceiling_gflops'] == 2.0
  assert isinstance(line['cpu_bf16_flags'], list)
  for key in ('examples_per_s', 'packed_examples_per_s', 'padded_examples_per_s', 'packed_mfu'):
    assert line[key] > 0
  if torch_available():
    assert seen['theirs'] == [dtype] and line['packed_vs_hf'] == 2.0 and line['hf_mfu'] > 0


@pytest.mark.slow  # torch, transformers and MiniLM-L6's Trainer, twice: ~30 s
@NEEDS_HF_SIDE
def test_finetune_speed_hf_side_computes_in_bfloat16_under_bf16(tmp_path):
  """Hugging Face's arm in bfloat16 is the Trainer's `bf16=True`: every round's forward runs
  under CPU autocast (a Linear's output is bfloat16); in float32 none does."""
  import torch

  from benchmarks.common.finetuning import minilm_dir
  speed = script('finetune_speed')
  train = tmp_path / 'train.tsv'
  train.write_text('text\tlabel\n' + ''.join(f'a {"good " * i}film\t{i % 2}\n' for i in range(8)))
  for dtype, want in (('float32', torch.float32), ('bfloat16', torch.bfloat16)):
    arm = speed.Theirs('sst2', minilm_dir(), str(train), 4, 2e-5, 128,
                       str(tmp_path / f'hf_{dtype}'), dtype)
    outputs = []
    dense = arm.model.bert.encoder.layer[0].intermediate.dense
    dense.register_forward_hook(lambda module, args, out, outputs=outputs: outputs.append(
        (out.dtype, torch.is_autocast_enabled('cpu'))))
    for _ in range(2):  # a Trainer per round: the second must not lose the first's autocast
      outputs.clear()
      assert arm.run(1) > 0
      assert set(outputs) == {(want, dtype == 'bfloat16')}, (dtype, set(outputs))
    assert {p.dtype for p in arm.model.parameters()} == {torch.float32}  # mixed: float32 master
