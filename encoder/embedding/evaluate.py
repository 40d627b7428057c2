"""A loaded model (`encoder.load`) judged as an embedder: STS pairs and BEIR retrieval.

Texts are embedded with the model's own `embed` settings (pooling, length, normalisation:
config.embed), packed several to a row in length order (`packed.embed_packed`: what `embed`
gives each text alone, in a few compiles at most), and put back in their order. Retrieval ranks
by cosine similarity (MTEB's default), exactly (`search.top_k`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tqdm.auto import tqdm

from encoder.data import beir
from encoder.embedding import ir_metrics, packed, search, sts

MEASURES = ('ndcg@10', 'recall@100', 'mrr@10')


def embed_in_length_order(model, texts: Sequence[str], desc: str = '') -> np.ndarray:
  """`model.embed(texts)` at unit length, computed packed in length order (packed.py). It
  replaced batches of 128 texts through `embed`, each padded to its longest: the same vectors
  (1e-5, tests/embedding/test_packed.py), and as fast or faster (docs/embeddings.md)."""
  with tqdm(total=len(texts), desc=desc or 'embedding', unit='text', disable=not desc,
            leave=False) as bar:
    out = packed.embed_packed(model, texts, progress=bar.update)
  return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def evaluate_sts(model, path: str) -> dict:
  """Spearman and Pearson correlation of the pairs' cosine similarity with their scores."""
  first, second, scores = sts.read_pairs(path)
  similarity = sts.cosine(embed_in_length_order(model, first, desc='sts'),
                          embed_in_length_order(model, second, desc='sts'))
  return {'spearman': sts.spearman(similarity, scores),
          'pearson': sts.pearson(similarity, scores), 'pairs': len(scores)}


def retrieve(model, data: beir.Beir, k: int = 100, block: int = 4096
             ) -> dict[str, dict[str, float]]:
  """The run: each judged query's k most similar documents with their cosine scores."""
  query_ids = list(data.queries)
  queries = embed_in_length_order(model, [data.queries[q] for q in query_ids], desc='queries')
  documents = embed_in_length_order(model, data.documents, desc='corpus')
  blocks = (documents[i:i + block] for i in range(0, len(documents), block))
  scores, where = search.top_k(queries, blocks, k)
  return {q: {data.doc_ids[j]: float(s) for s, j in zip(scores[i], where[i], strict=True)
              if j >= 0} for i, q in enumerate(query_ids)}


def evaluate_beir(model, directory: str, split: str = 'test',
                  measures: tuple[str, ...] = MEASURES) -> dict:
  """nDCG@10, Recall@100 and MRR@10 of exact cosine retrieval over a BEIR folder's split."""
  data = beir.read(directory, split)
  k = max(int(m.partition('@')[2]) for m in measures)
  run = retrieve(model, data, k)
  return {**ir_metrics.evaluate(run, data.qrels, measures), 'queries': len(data.queries),
          'documents': len(data.doc_ids)}
