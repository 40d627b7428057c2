"""encoder: a JAX/Flax research codebase for encoder-only Transformers (BERT and descendants).

Importing the package is cheap: JAX and Flax are imported only when a function needs them.
"""

__version__ = '0.1.0'
