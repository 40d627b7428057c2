"""encoder: a JAX/Flax research codebase for encoder-only Transformers (BERT and descendants).

Importing the package is cheap: JAX and Flax are imported only when a function needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from encoder.inference import Model

__version__ = '0.1.0'

from encoder import jax_platforms as _jax_platforms  # noqa: E402 - JAX-free, before any JAX use

_jax_platforms.skip_absent_tpu()  # libtpu installed off a TPU host: no TPU probe, no noise


def load(path: str, *, attention_impl: str = 'auto') -> Model:
  """A workdir (its newest checkpoint), one checkpoint step directory, or a model on the
  Hugging Face Hub by name, `hf://ORG/NAME[@REVISION]` (downloaded and converted the first
  time, then read from the cache: encoder.convert.from_hub), ready for notebooks: `encode`,
  `embed`, `fill_mask`, `attention_maps`, `plot_attention` (see encoder.inference).
  `attention_impl`: how attention is computed here (auto: the fastest form on this machine;
  explicit, blockwise, ...: `model.attention_impl`'s values, which give the same results)."""
  # lazy: `import encoder` stays free of JAX, which the python_docs collector subprocess
  # (python -m encoder.data.corpus.python_docs_collector) would otherwise import first.
  from encoder.inference import load as _load
  if str(path).startswith('hf://'):
    from encoder.convert import from_hub  # lazy: as above (it converts with JAX)
    path = from_hub(path)[0].workdir
  return _load(path, attention_impl=attention_impl)
