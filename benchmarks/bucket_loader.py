"""Prints how many pretraining batches per second arrive from local disk and from a bucket.

  python -m benchmarks.bucket_loader [--batch_size 256] [--seq 128] [--latencies 0,20,50]
      [--batches 40] [--train_steps 300]

The corpus (`--corpus`, default the embedded python_docs, with a `--vocab_size` tokenizer) is
prepared once locally with mlm_nsp_base's settings at `--batch_size` x `--seq` (one host),
then copied into a GCS emulator (tests/emulators.py) behind tests/fault_proxy.py, which adds
`latency_ms` to every request. For the local copy and each latency, the train iterator's
batches/s (after a warm-up), the requests sent per batch after coalescing, and the requests
the batch is made of before coalescing (one per instance row, one per token run), one JSON
line each. With `--train_steps N`, it also trains mlm_nsp_tiny N steps reading the local
copy and the bucket at the largest latency (workdir local) and prints the trainer's mean
`data_wait_s` against the local run's step time (from metrics.jsonl, first log window left
out: it holds the compile).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import statistics
import tempfile
import time

from benchmarks.common.cli import print_machine
from encoder import configs, storage
from encoder.data.pretrain.pretraining_data import build_pretraining_data
from encoder.train.metric_writer import read_metrics
from experiments import mlm_nsp_base
from tests import emulators
from tests.fault_proxy import FaultProxy


def loader_config(args, cache: str):
  c = mlm_nsp_base.get_config()
  c.data.corpus, c.data.vocab_size = args.corpus, args.vocab_size
  c.data.max_seq_length, c.train.batch_size = args.seq, args.batch_size
  c.data.cache_dir = cache
  c.data.tokenizer_sample_sentences = 200_000
  return c


def measure(config, workdir: str, batches: int) -> dict:
  """Batches/s of the train iterator, and the requests a batch sent (bucket only)."""
  data = build_pretraining_data(config, workdir)
  reader = data._train.reader
  it = data.train_iterator()
  for _ in range(5):  # warm-up: threads, shard headers, first permutation
    next(it)
  start = time.perf_counter()
  for _ in range(batches):
    next(it)
  seconds = time.perf_counter() - start
  it.close()
  time.sleep(0.5)  # the iterator's threads finish what they were reading
  sent = reader.requests
  for step in range(1000, 1003):  # steps of shards already opened: no header reads
    data.train_batch(step)
  uncoalesced = 3 * data.batch_size  # a row, and token runs A and B, each read alone
  return {'batches_per_s': round(batches / seconds, 2),
          'requests_per_batch': round((reader.requests - sent) / 3, 1),
          'uncoalesced_requests_per_batch': uncoalesced, 'batch_workers': data.batch_workers,
          'depth': it.depth}


def train_waits(args, prepared: dict[str, str], workdir: str) -> list[dict]:
  """mlm_nsp_tiny for --train_steps, reading each prepared copy; data_wait_s vs step time."""
  from encoder.train.trainer import train_and_evaluate  # noqa: PLC0415 - JAX only for this
  out = []
  for source, directory in prepared.items():
    c = configs.load_experiment('mlm_nsp_tiny')
    configs.apply_overrides(c, [f'data.cache_dir={workdir}/tiny-cache',
                                f'train.num_steps={args.train_steps}', 'train.log_every=50',
                                f'train.eval_every={args.train_steps}', 'train.eval_batches=2',
                                f'train.checkpoint_every={args.train_steps}'])
    if directory:
      c.data.prepared_dir = directory
    run = f'{workdir}/tiny-{source}'
    train_and_evaluate(c, run)
    records = read_metrics(run, 'train')[1:]
    step_s = statistics.mean(1 / r['steps_per_sec'] for r in records)
    out.append({'source': source, 'train_steps': args.train_steps,
                'data_wait_s': round(statistics.mean(r['data_wait_s'] for r in records), 5),
                'step_s': round(step_s, 5), 'prepared_dir': directory or '(local)'})
  return out


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--corpus', default='python_docs')
  parser.add_argument('--vocab_size', type=int, default=8000)
  parser.add_argument('--batch_size', type=int, default=256)
  parser.add_argument('--seq', type=int, default=128)
  parser.add_argument('--latencies', default='0,20,50', help='ms per request, comma-separated')
  parser.add_argument('--batches', type=int, default=40, help='timed batches per setting')
  parser.add_argument('--train_steps', type=int, default=0)
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.WARNING)
  print_machine(devices=False)
  latencies = [float(x) for x in args.latencies.split(',')]
  with tempfile.TemporaryDirectory() as workdir, emulators.gcs_server() as emulator:
    os.environ['STORAGE_EMULATOR_HOST'] = emulator
    config = loader_config(args, f'{workdir}/cache')
    build_pretraining_data(config, f'{workdir}/run')  # prepared once, outside the timing
    local = build_pretraining_data(config, f'{workdir}/run')._train.directory
    remote = f'gs://{emulators.GCS_BUCKET}/prepared'
    storage.filesystem(remote).put(local, remote, recursive=True)
    bucket_config = copy.deepcopy(config)
    bucket_config.data.prepared_dir = remote
    row = {'source': 'local', 'latency_ms': None, **measure(config, f'{workdir}/run',
                                                               args.batches)}
    print(json.dumps(row), flush=True)
    with FaultProxy(emulator) as proxy:
      os.environ['STORAGE_EMULATOR_HOST'] = proxy.url
      for ms in latencies:
        proxy.latency_s = ms / 1000
        row = {'source': 'bucket', 'latency_ms': ms,
               **measure(bucket_config, f'{workdir}/run-{ms:g}', args.batches)}
        print(json.dumps(row), flush=True)
      if args.train_steps:
        proxy.latency_s = max(latencies) / 1000
        waits = train_waits(args, {'local': ''}, workdir)
        tiny_local = _prepared_of(workdir)
        tiny_remote = f'gs://{emulators.GCS_BUCKET}/tiny-prepared'
        storage.filesystem(tiny_remote).put(tiny_local, tiny_remote, recursive=True)
        waits += train_waits(args, {f'bucket {max(latencies):g} ms': tiny_remote}, workdir)
        for w in waits:
          print(json.dumps({**w, 'latency_ms': max(latencies) if 'bucket' in w['source']
                            else None}), flush=True)
        ratio = waits[1]['data_wait_s'] / waits[0]['step_s']
        print(json.dumps({'bucket_data_wait_over_local_step': round(ratio, 4)}), flush=True)
  print(f'# load average after: {os.getloadavg()[0]:.1f}', flush=True)


def _prepared_of(workdir: str) -> str:
  """The one preparation under the tiny runs' cache."""
  cache = f'{workdir}/tiny-cache'
  [name] = [n for n in os.listdir(cache) if n.startswith('prepared-')]
  return os.path.join(cache, name)


if __name__ == '__main__':
  main()
