"""Corpus sources: documents (lists of sentences) from python_docs, text files or TFDS.

`sources` is the one dispatcher over `data.corpus` specs; each source module plans its corpus
into shards and reads a shard. Kept import-free so `python -m
encoder.data.corpus.python_docs_collector` (run in a subprocess) stays light.
"""
