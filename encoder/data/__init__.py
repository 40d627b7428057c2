"""Everything between raw text and host batches, in three subpackages by what they serve:

  corpus/    documents from python_docs, text files or TFDS (`sources` dispatches on data.corpus)
  pretrain/  preparation (tokenizer, token shards, instances: once), the prepared reader, masking,
             and `pretraining_data.build_pretraining_data`, the pretraining task's entry point
  finetune/  file and TFDS readers, SQuAD features, length buckets, `FinetuningData`

and what they share here: the tokenizers, content-addressed cache files, the samplers
(`loader`, `permutation`) and the TFDS opener. The data never imports a task or the trainer.
Kept import-free so `python -m encoder.data.corpus.python_docs_collector` (run in a
subprocess) stays light.
"""
