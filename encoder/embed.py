"""Embeds a JSONL corpus into sharded .npy files, resumably.

  python -m encoder.embed --model RUN_OR_WORKDIR_OR_HF_NAME --corpus corpus.jsonl --out DIR
      [--max_length N] [--batch_tokens N | --rows N] [--shard_size N]
      [--pooling mean|cls|last] [--normalize | --no-normalize] [--dtype bfloat16]

The corpus is BEIR's corpus.jsonl ({"_id", "title", "text"}; a document is title + " " + text)
or lines with "text" alone (ids: line numbers). Each shard of --shard_size documents is
tokenized, sorted by length and packed several documents a row into steps of one fixed shape
(encoder.embedding.packed), and each document pooled over its own tokens as `Model.embed`
pools (the model's config.embed unless overridden). DIR gets shard-00000.npy (float32
[n, hidden]) with shard-00000.ids.json, and manifest.json, which lists a shard only once its
files are written: run the same command again after a kill and finished shards are skipped
(encoder.embedding.shard_store). `shard_store.read_embeddings(DIR)` reads it all back.

A missing or malformed corpus and a DIR made with another model, corpus or settings are
one-line errors (exit 2), found before any document is embedded; JAX loads only after the
corpus has been checked.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from encoder import storage
from encoder.embedding import shard_store
from encoder.embedding.corpus_file import CorpusFile
from encoder.errors import ConfigError, EncoderError

SHARD_SIZE = 50_000  # ~77 MB of 384-dim float32 a shard: minutes of work to lose at most


def parse_args(argv):
  parser = argparse.ArgumentParser(prog='python -m encoder.embed', description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--model', required=True, help='a run, converted workdir or step, or '
                      'a model on the Hub: hf://ORG/NAME[@REVISION]')
  parser.add_argument('--corpus', required=True, help='a JSONL file of documents')
  parser.add_argument('--out', required=True, help='the output directory (created)')
  parser.add_argument('--max_length', type=int, help='tokens per document (default: '
                      'config.embed.max_seq_length, else the model\'s)')
  size = parser.add_mutually_exclusive_group()
  size.add_argument('--batch_tokens', type=int, help='tokens per device step (default: 2048 '
                    'on a CPU, 131072 on an accelerator)')
  size.add_argument('--rows', type=int, help='rows per device step (instead of --batch_tokens)')
  parser.add_argument('--shard_size', type=int, default=SHARD_SIZE, help='documents a shard')
  parser.add_argument('--pooling', choices=('mean', 'cls', 'last'), help='default: '
                      'config.embed.pooling')
  parser.add_argument('--normalize', action=argparse.BooleanOptionalAction,
                      help='unit-length vectors (default: config.embed.normalize)')
  parser.add_argument('--dtype', choices=('float32', 'bfloat16'), help="compute dtype (default: "
                      "the model's; bfloat16 is faster and changes the vectors slightly)")
  parser.add_argument('--max_shards', type=int, help='stop after this many new shards (a '
                      'time-boxed job); the next run goes on from there')
  return parser.parse_args(argv)


def identity(model, settings, corpus: str, documents: int, shard_size: int) -> dict:
  """Everything that decides the vectors, or which document a row is: a resumed run must
  match it."""
  corpus_path = corpus if storage.is_remote(corpus) else os.path.abspath(corpus)
  model_path = model.path if storage.is_remote(model.path) else os.path.abspath(model.path)
  return {'model': model_path, 'corpus': corpus_path, 'corpus_bytes': storage.getsize(corpus),
          'documents': documents, 'shard_size': shard_size, 'pooling': settings.pooling,
          'normalize': settings.normalize, 'max_length': settings.max_length,
          'dtype': settings.dtype, 'hidden_size': model.model_config.hidden_size}


def run(args) -> str:
  """Embeds what is left to embed; returns the line to print."""
  for name in ('shard_size', 'batch_tokens', 'rows', 'max_length', 'max_shards'):
    value = getattr(args, name)
    if value is not None and value < 1:
      raise ConfigError(f'--{name}={value} must be positive')
  corpus = CorpusFile(args.corpus)
  documents = corpus.scan()
  shard_store.check_directory(args.out)
  from tqdm.auto import tqdm

  import encoder  # lazy: JAX loads only once the corpus and --out have been checked
  from encoder.embedding.packed import PackedEmbedder  # lazy: as above

  model = encoder.load(args.model)
  embedder = PackedEmbedder(model, args.pooling, args.normalize, args.max_length,
                            args.batch_tokens, args.rows, args.dtype)
  store = shard_store.ShardStore(args.out, identity(model, embedder.settings, args.corpus,
                                                    documents, args.shard_size))
  finished = store.finished()
  done, new_shards, new_documents, start = sum(finished.values()), 0, 0, time.perf_counter()
  with tqdm(total=documents, initial=done, unit='doc', desc='embedding',
            dynamic_ncols=True) as bar:
    for index, ids, texts in corpus.shards(args.shard_size, skip=set(finished)):
      cut, shard_start = embedder.truncated, time.perf_counter()
      vectors = embedder(texts, progress=bar.update)
      rows, width = embedder.last_shape
      store.write(index, ids, vectors, truncated=embedder.truncated - cut, rows=rows,
                  width=width, seconds=round(time.perf_counter() - shard_start, 2))
      new_shards, new_documents = new_shards + 1, new_documents + len(ids)
      if args.max_shards is not None and new_shards >= args.max_shards:
        break
  seconds = time.perf_counter() - start
  left = documents - done - new_documents
  rate = f', {new_documents / seconds:.1f} documents/s' if new_documents else ''
  status = f'{left} documents left: run it again to go on' if left else 'complete'
  return (f'embedded {new_documents} documents in {new_shards} new shard(s) in {seconds:.1f} s'
          f'{rate} ({embedder.truncated} cut to {embedder.settings.max_length} tokens); '
          f'{args.out}: {status}')


def main(argv: list[str] | None = None) -> int:
  args = parse_args(argv)
  try:
    print(run(args))
  except EncoderError as e:
    sys.stderr.write(f'error: {e}\n')
    return 2
  return 0


if __name__ == '__main__':
  sys.exit(main())
