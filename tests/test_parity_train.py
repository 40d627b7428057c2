"""benchmarks/parity_train.py at tiny size: our training matches Hugging Face's, step by step.

Slow (minutes: a tokenizer, two runs of ours, one of PyTorch), and skipped where torch or
transformers are not installed; `python -m benchmarks.parity_train --size tiny --steps 100`
is the full check (from the repository root, as the tests below run it).
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = [sys.executable, '-m', 'benchmarks.parity_train']


@pytest.mark.slow
@pytest.mark.parametrize('objective', ['mlm_nsp', 'mlm'])
def test_training_matches_hugging_face(tmp_path, objective):
  if importlib.util.find_spec('torch') is None or importlib.util.find_spec('transformers') is None:
    pytest.skip('the parity test trains Hugging Face BERT: pip install torch transformers')
  args = ['--size', 'tiny', '--steps', '30', '--workdir', str(tmp_path)]
  args += ['--no_nsp'] if objective == 'mlm' else []
  out = subprocess.run([*SCRIPT, *args], capture_output=True, text=True, check=True,
                       cwd=ROOT).stdout
  result = json.loads(out.strip().splitlines()[-1])
  assert result['steps'] == 30 and result['nsp'] == (objective == 'mlm_nsp')
  assert 0 < result['noise_floor'] < 1e-4  # 1 and 8 devices differ, by rounding only
  assert result['max_rel_loss_diff'] <= max(1e-4, 3 * result['noise_floor'])
  assert result['max_rel_param_diff'] <= 1e-3
  assert result['max_inert_norm'] <= 1e-4
  assert result['pass']
  assert abs(result['ours_final_loss'] - result['hf_final_loss']) < 1e-3


def test_plot_from_redraws_saved_curves_without_training(tmp_path):
  """The side-by-side plot in docs/ablations.md is redrawn from a --curves file."""
  steps = 40
  losses = {'loss': [7.0 - 0.05 * i for i in range(steps)],
            'mlm_loss': [6.3 - 0.05 * i for i in range(steps)], 'nsp_loss': [0.69] * steps}
  evals = [{'step': s, 'mlm_accuracy': 0.01 * s, 'nsp_accuracy': 0.5} for s in (0, 20, 39)]
  curves = tmp_path / 'curves.json'
  curves.write_text(json.dumps({'ours': losses, 'hf': losses, 'ours_evals': evals,
                                'hf_evals': evals}))
  image = tmp_path / 'curves.png'
  subprocess.run([*SCRIPT, '--plot_from', str(curves), '--plot', str(image)],
                 check=True, capture_output=True, cwd=ROOT)
  assert image.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n' and image.stat().st_size > 10_000
  missing = subprocess.run([*SCRIPT, '--plot_from', str(curves)],
                           capture_output=True, text=True, cwd=ROOT)
  assert missing.returncode != 0 and 'needs --plot' in missing.stderr
