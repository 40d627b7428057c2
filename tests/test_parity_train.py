"""benchmarks/parity_train.py at tiny size: our training matches Hugging Face's, step by step.

Slow (minutes: a tokenizer, two runs of ours, one of PyTorch), and skipped where torch or
transformers are not installed; `python benchmarks/parity_train.py --size tiny --steps 100`
is the full check.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      'benchmarks', 'parity_train.py')


@pytest.mark.slow
@pytest.mark.parametrize('objective', ['mlm_nsp', 'mlm'])
def test_training_matches_hugging_face(tmp_path, objective):
  if importlib.util.find_spec('torch') is None or importlib.util.find_spec('transformers') is None:
    pytest.skip('the parity test trains Hugging Face BERT: pip install torch transformers')
  args = ['--size', 'tiny', '--steps', '30', '--workdir', str(tmp_path)]
  args += ['--no_nsp'] if objective == 'mlm' else []
  out = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                       check=True).stdout
  result = json.loads(out.strip().splitlines()[-1])
  assert result['steps'] == 30 and result['nsp'] == (objective == 'mlm_nsp')
  assert 0 < result['noise_floor'] < 1e-4  # 1 and 8 devices differ, by rounding only
  assert result['max_rel_loss_diff'] <= max(1e-4, 3 * result['noise_floor'])
  assert result['max_rel_param_diff'] <= 1e-3
  assert result['max_inert_norm'] <= 1e-4
  assert result['pass']
  assert abs(result['ours_final_loss'] - result['hf_final_loss']) < 1e-3
