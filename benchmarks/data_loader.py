"""Prints the pretraining loader's throughput (sequences/s) from a warm cache, in one process.

  python -m benchmarks.data_loader [--corpus python_docs] [--batch_size 256] [--windows 7]

For each max_seq_length (128 and 512) it builds the data once (corpus, tokenizer, instances are
cached, so this is excluded from the timing), then pulls batches from the prefetching train
iterator and reports the median of several timed windows, for plain and whole-word masking.
"""

import argparse
import logging
import statistics
import tempfile
import time

from encoder.data.pretrain.pretraining_data import build_pretraining_data
from experiments import mlm_nsp_base


def measure(config, workdir: str, batches: int, windows: int) -> float:
  data = build_pretraining_data(config, workdir)
  it = data.train_iterator()
  for _ in range(5):  # warm up: thread start, first permutation
    next(it)
  rates = []
  for _ in range(windows):
    start = time.perf_counter()
    for _ in range(batches):
      next(it)
    rates.append(batches * data.batch_size / (time.perf_counter() - start))
  it.close()
  return statistics.median(rates)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--corpus', default='python_docs')
  parser.add_argument('--batch_size', type=int, default=256)
  parser.add_argument('--batches', type=int, default=40, help='batches per timed window')
  parser.add_argument('--windows', type=int, default=7)
  parser.add_argument('--vocab_size', type=int, default=30522)
  args = parser.parse_args()
  logging.basicConfig(level=logging.WARNING)
  with tempfile.TemporaryDirectory() as workdir:
    for seq in (128, 512):
      for wwm in (False, True):
        c = mlm_nsp_base.get_config()
        c.data.corpus, c.data.vocab_size = args.corpus, args.vocab_size
        c.data.max_seq_length, c.data.whole_word_masking = seq, wwm
        c.data.cache_dir = f'{workdir}/cache'
        c.train.batch_size = args.batch_size
        build_pretraining_data(c, workdir)  # fill the cache outside the timing
        rate = measure(c, workdir, args.batches, args.windows)
        print(f'max_seq_length={seq:4d} batch={args.batch_size} whole_word_masking={wwm!s:5}: '
              f'{rate:10,.0f} sequences/s (median of {args.windows} windows)', flush=True)


if __name__ == '__main__':
  main()
