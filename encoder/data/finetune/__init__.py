"""Fine-tuning data: examples from local files or TFDS, encoded once into padded arrays.

`file_readers` (TSV/CSV/JSONL, CoNLL), `tfds_examples` (GLUE, CoNLL-2003) and `squad_examples`
return plain examples; the task encodes them (`finetuning_data.encode_texts`, `encode_words`,
`squad_features`), and `FinetuningData` batches the arrays, cut to `length_buckets`.
"""
