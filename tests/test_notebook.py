"""notebooks/load_checkpoint.ipynb runs headless, top to bottom, on a smoke-trained checkpoint."""

import os

import pytest

from tests.golden.smoke import ROOT, smoke_workdir

NOTEBOOK = os.path.join(ROOT, 'notebooks', 'load_checkpoint.ipynb')


def test_notebook_runs_on_a_smoke_checkpoint(tmp_path_factory, monkeypatch):
  nbclient = pytest.importorskip('nbclient')
  nbformat = pytest.importorskip('nbformat')
  pytest.importorskip('ipykernel')
  monkeypatch.setenv('ENCODER_CHECKPOINT', smoke_workdir(tmp_path_factory))
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
  images = [o for o in outputs if 'image/png' in o.get('data', {})]
  assert len(images) >= 2  # the two heatmaps, each shown once
