"""`encoder.load(path)` and the loaded `Model`: a checkpoint as an object for notebooks.

One module per concern: model.py (load, Model, Encoded), text.py (texts -> padded ids),
plot.py (attention heatmaps), and one module per fine-tuned task method (classify.py, tag.py,
answer.py), each running its task's Flax model from encoder.modules.task_models, the model the
trainer trained; fine_tuned.py holds what they share (head sizes, label names, softmax).
"""

from encoder.checkpoint_files import restore_params
from encoder.inference.model import Encoded, Model, load

__all__ = ['Encoded', 'Model', 'load', 'restore_params']
