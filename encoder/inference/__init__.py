"""`encoder.load(path)` and the loaded `Model`: a checkpoint as an object for notebooks.

One module per concern: model.py (load, Model, Encoded), text.py (texts -> padded ids),
plot.py (attention heatmaps), heads.py (fine-tuned heads in numpy) and one module per
fine-tuned task method: classification.py, tagging.py, span_qa.py.
"""

from encoder.checkpoint_files import restore_params
from encoder.inference.model import Encoded, Model, load

__all__ = ['Encoded', 'Model', 'load', 'restore_params']
