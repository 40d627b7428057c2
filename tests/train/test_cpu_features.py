"""The run log's bfloat16 hint: read from /proc/cpuinfo's flags (here fake texts, not this
machine's), given only for a float32 run on a CPU with bfloat16 products."""

import pathlib

from encoder.train import cpu_features, run_setup
from tests.train.test_mesh import tiny_setup

# Flags lines shortened from real machines: a Sapphire Rapids Xeon (AMX and AVX-512 BF16), an
# AMD Zen 4 EPYC (AVX-512 BF16, no AMX), a Haswell (AVX2 only).
SAPPHIRE_RAPIDS = ('fpu vme sse sse2 avx avx2 avx512f avx512bw avx512_vnni avx512_bf16 '
                   'avx512_fp16 amx_bf16 amx_tile amx_int8')
ZEN4 = 'fpu vme sse sse2 avx avx2 avx512f avx512bw avx512_vnni avx512_bf16 sha_ni'
HASWELL = 'fpu vme sse sse2 avx avx2 fma bmi1 bmi2'


def cpuinfo(flags: str, processors: int = 2) -> str:
  """A /proc/cpuinfo text: one block per processor, each with its `flags` line."""
  return '\n'.join(f'processor\t: {i}\nvendor_id\t: SomeVendor\nmodel name\t: Some CPU\n'
                   f'flags\t\t: {flags}\nbogomips\t: 4800.00\n' for i in range(processors))


def test_the_bfloat16_flags_are_read_from_the_flags_line():
  assert cpu_features.bf16_flags(cpuinfo(SAPPHIRE_RAPIDS)) == ['amx_bf16', 'avx512_bf16']
  assert cpu_features.bf16_flags(cpuinfo(ZEN4)) == ['avx512_bf16']
  assert cpu_features.bf16_flags(cpuinfo(HASWELL)) == []
  assert cpu_features.bf16_flags(cpuinfo('avx512_bf16x amx_tile')) == []  # whole names only
  # An Arm CPU lists `Features`, not `flags`; macOS and Windows have no /proc/cpuinfo at all.
  assert cpu_features.bf16_flags('processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n') == []
  assert cpu_features.bf16_flags('') == []


def test_a_float32_cpu_run_on_such_a_cpu_gets_the_hint_and_no_other_run_does():
  hint = cpu_features.bfloat16_hint('float32', 'cpu', cpuinfo(SAPPHIRE_RAPIDS))
  assert hint == ('this CPU computes bfloat16 products natively (amx_bf16, avx512_bf16): '
                  '--config.model.dtype=bfloat16 may be faster here for base-sized models '
                  '(docs/performance.md#bfloat16-on-cpu)')
  assert '(avx512_bf16)' in cpu_features.bfloat16_hint('float32', 'cpu', cpuinfo(ZEN4))
  assert cpu_features.bfloat16_hint('float32', 'cpu', cpuinfo(HASWELL)) is None
  assert cpu_features.bfloat16_hint('bfloat16', 'cpu', cpuinfo(SAPPHIRE_RAPIDS)) is None
  for platform in ('gpu', 'tpu'):  # the host's flags say nothing about the accelerator
    assert cpu_features.bfloat16_hint('float32', platform, cpuinfo(SAPPHIRE_RAPIDS)) is None


def test_no_cpuinfo_file_means_no_hint(monkeypatch, tmp_path):
  monkeypatch.setattr(cpu_features, 'CPUINFO', str(tmp_path / 'absent'))
  assert cpu_features.read_cpuinfo() == ''
  assert cpu_features.bfloat16_hint('float32', 'cpu') is None
  written = tmp_path / 'cpuinfo'
  written.write_text(cpuinfo(ZEN4))
  monkeypatch.setattr(cpu_features, 'CPUINFO', str(written))
  assert cpu_features.bf16_flags() == ['avx512_bf16']


def test_the_run_log_says_it_beside_the_attention_form(monkeypatch, encoder_log):
  monkeypatch.setattr(cpu_features, 'read_cpuinfo', lambda: cpuinfo(SAPPHIRE_RAPIDS))
  config, task, *_ = tiny_setup()
  run_setup._parts(config, task)
  messages = list(dict.fromkeys(r.getMessage() for r in encoder_log.records))  # each once
  attention = next(i for i, m in enumerate(messages) if m.startswith('attention: '))
  assert messages[attention + 1].startswith('this CPU computes bfloat16 products natively')
  encoder_log.clear()
  config, task, *_ = tiny_setup('model.dtype=bfloat16')
  run_setup._parts(config, task)
  assert not any('bfloat16 products' in r.getMessage() for r in encoder_log.records)
  assert any(r.getMessage().startswith('attention: ') for r in encoder_log.records)
  encoder_log.clear()
  monkeypatch.setattr(cpu_features, 'read_cpuinfo', lambda: cpuinfo(HASWELL))
  config, task, *_ = tiny_setup()
  run_setup._parts(config, task)
  assert not any('bfloat16 products' in r.getMessage() for r in encoder_log.records)


def test_the_hint_points_at_a_section_that_exists():
  path, anchor = cpu_features.DOCS.split('#')
  root = pathlib.Path(__file__).resolve().parents[2]
  headings = [line.lstrip('#').strip().lower().replace(' ', '-')
              for line in (root / path).read_text().splitlines() if line.startswith('## ')]
  assert anchor in headings
