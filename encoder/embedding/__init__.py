"""Sentence embeddings judged as embedders: STS correlation and BEIR-style retrieval.

`sts.py` scores (sentence1, sentence2, score) pairs by the cosine of their embeddings;
`encoder.data.beir` reads a BEIR folder; `packed.py` embeds texts several to a row;
`search.py` finds each query's nearest documents exactly, in
corpus batches with a running top-k; `ir_metrics.py` scores the ranking as trec_eval does;
`evaluate.py` puts them together for a loaded model (`encoder.load`).
"""
