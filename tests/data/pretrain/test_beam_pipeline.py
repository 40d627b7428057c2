"""The Beam pipeline (DirectRunner, in memory) writes the same bits as the local process pool."""

import pytest

pytest.importorskip('apache_beam', reason='apache_beam is not installed: pip install -r '
                    'requirements-beam.txt to test the Beam preparation')

from encoder.data.pretrain import beam_pipeline, preparation  # noqa: E402
from tests.data.pretrain.test_preparation import PACKINGS, _config, _digest  # noqa: E402


@pytest.mark.parametrize('packing', sorted(PACKINGS))
def test_direct_runner_writes_the_local_bits(corpus_dir, tmp_path, packing):
  local = _config(corpus_dir, tmp_path, 'local', dynamic_masking=False, **PACKINGS[packing])
  local.data.tokenizer, local.data.vocab_size = '', 120
  preparation.prepare(local, str(tmp_path / 'run-local'), workers=2)
  beam = _config(corpus_dir, tmp_path, 'beam', dynamic_masking=False, **PACKINGS[packing])
  beam.data.tokenizer, beam.data.vocab_size = '', 120
  summary = beam_pipeline.run(beam, str(tmp_path / 'run-beam'), ['--runner=DirectRunner'])
  assert summary['shards'] >= 3 and not summary['reused']
  assert _digest(tmp_path / 'beam') == _digest(tmp_path / 'local')
  assert beam_pipeline.run(beam, str(tmp_path / 'run-beam'))['reused']
