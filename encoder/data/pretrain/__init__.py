"""Pretraining data: BERT's sentence-pair instances and masks, prepared once and read by index.

corpus shards --shard_worker--> token arrays + instances (+ fixed masks) on disk (`preparation`
runs the workers, or `beam_pipeline` on a cluster) --prepared_reader--> rows of a batch
--pretraining_data--> masked host batches, a pure function of (seed, step, host).
"""
