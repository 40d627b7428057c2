"""notebooks/load_checkpoint.ipynb runs headless, top to bottom, on a smoke-trained checkpoint."""

import os

import pytest

from tests import local_hub
from tests.golden.smoke import ROOT, minilm_dir, smoke_workdir

NOTEBOOK = os.path.join(ROOT, 'notebooks', 'load_checkpoint.ipynb')


def test_notebook_runs_on_a_smoke_checkpoint(tmp_path_factory, monkeypatch):
  nbclient = pytest.importorskip('nbclient')
  nbformat = pytest.importorskip('nbformat')
  pytest.importorskip('ipykernel')
  monkeypatch.setenv('ENCODER_CHECKPOINT', smoke_workdir(tmp_path_factory))
  # The Hub section's model, offline: huggingface_hub's cache holds all-MiniLM-L6-v2 (where
  # it is installed; else the tiny sentence-transformers BERT of tests/test_hub.py), ours none.
  hub = tmp_path_factory.mktemp('hub')
  if minilm_dir() is not None:
    files = local_hub.read_files(minilm_dir())
  else:
    from tests.test_hub import tiny_st_files
    files = tiny_st_files()
  commit = local_hub.write_cache(str(hub / 'hf'), 'sentence-transformers/all-MiniLM-L6-v2',
                                 files)
  monkeypatch.setenv('HF_HUB_CACHE', str(hub / 'hf'))
  monkeypatch.setenv('HF_HUB_OFFLINE', '1')
  monkeypatch.setenv('ENCODER_HF_CACHE', str(hub / 'encoder'))
  monkeypatch.delenv('ENCODER_HUB_MODEL', raising=False)
  monkeypatch.setenv('XLA_FLAGS', '--xla_force_host_platform_device_count=1')
  # The checkout's `encoder`, as `pip install -e .` would give the kernel (the notebook itself
  # patches no sys.path).
  monkeypatch.setenv('PYTHONPATH', ROOT)
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  client = nbclient.NotebookClient(notebook, timeout=180, kernel_name='python3',
                                   resources={'metadata': {'path': os.path.dirname(NOTEBOOK)}})
  client.execute()
  outputs = [o for cell in notebook.cells if cell.cell_type == 'code' for o in cell.outputs]
  assert not [o for o in outputs if o.output_type == 'error']
  text = ''.join(o.get('text', '') for o in outputs if o.output_type == 'stream')
  assert '[MASK] #0:' in text and 'maps: (2, 2,' in text
  assert f"converted at {hub / 'encoder' / 'sentence-transformers--all-MiniLM-L6-v2' / commit}" \
      in text
  images = [o for o in outputs if 'image/png' in o.get('data', {})]
  assert len(images) >= 2  # the two heatmaps, each shown once
