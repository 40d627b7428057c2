"""Everything between raw text and host batches; the trainer's entry point is
`encoder.data.pipeline.build_pretraining_data`.

corpora (documents) -> tokenizer -> pretraining (instances) -> masking -> loader (batches), with
cache keeping every slow product on disk. Kept import-free so `python -m encoder.data.python_docs`
(run in a subprocess) stays light.
"""
