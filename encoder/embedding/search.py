"""Exact nearest-document search: every query against every document, a corpus batch at a
time, keeping a running top-k, so memory is flat in the corpus size.

Why exact: BEIR-sized corpora (5k to 5M documents) fit a dense scan on one accelerator, and an
exact ranking is what the published nDCG numbers use. The score is the dot product (the
cosine for normalised vectors). For each corpus batch the [queries, batch] score block is
computed on the device and merged with the running [queries, k] best by one `top_k` over
their concatenation; the host holds only the document ids.

Scale: a 10M-document corpus of 384-dim float32 vectors is 15 GB of embeddings, streamed in
batches (never held at once here); scoring 1,000 queries against it is 7.7 TFLOP, seconds on
an accelerator and minutes on a CPU, and the embedding pass itself dominates. Beyond that, or
for many queries against a fixed corpus, an approximate index (faiss IVF/HNSW, ScaNN) is the
tool: build it from the same embeddings.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.jit, static_argnames='k')
def _merge(queries, block, offset, best_scores, best_index, *, k: int):
  """The running top-k after one corpus block: [q, k] scores and global document indices."""
  scores = jnp.dot(queries, block.T, precision=jax.lax.Precision.HIGHEST)  # [q, b]
  index = offset + jnp.arange(block.shape[0], dtype=jnp.int32)
  scores = jnp.concatenate([best_scores, scores], axis=1)
  index = jnp.concatenate([best_index, jnp.broadcast_to(index, scores.shape[:1] + index.shape)],
                          axis=1)
  top, where = jax.lax.top_k(scores, k)
  return top, jnp.take_along_axis(index, where, axis=1)


def top_k(queries: np.ndarray, blocks: Iterable[np.ndarray], k: int
          ) -> tuple[np.ndarray, np.ndarray]:
  """(scores, document indices) [queries, k] of the k best documents per query, best first,
  over corpus `blocks` ([n_i, dim] each, in document order); fewer documents than k leave
  -inf scores and index -1 at the end."""
  q = jnp.asarray(queries, jnp.float32)
  best = jnp.full((q.shape[0], k), -jnp.inf, jnp.float32)
  where = jnp.full((q.shape[0], k), -1, jnp.int32)
  offset = 0
  for block in blocks:
    block = np.asarray(block, np.float32)
    best, where = _merge(q, jnp.asarray(block), jnp.int32(offset), best, where, k=k)
    offset += block.shape[0]
  return np.asarray(best), np.asarray(where)
