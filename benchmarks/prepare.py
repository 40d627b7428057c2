"""Prints what preparing a corpus costs (wall clock, MB/s per worker, peak RSS of all processes)
and what training on it costs in memory, for synthetic corpora of real text.

  python -m benchmarks.prepare --sizes_mb 100,400 --workers 1,2 [--train_steps 20] [--beam]

The corpora are the interpreter's own standard-library sources, one line a sentence, 40 lines a
document, shuffled anew in every pass until the size is reached (cached under --dir). Each
(size, workers) runs `launch.py --exp mlm_nsp_tiny --prepare_data` in a fresh prepared_dir; the
peak RSS sums the launcher and its worker processes (sampled every 50 ms). Then a process trains
--train_steps steps of mlm_nsp_tiny on the prepared data, and one on the embedded default, for
their peak RSS. Same-bits checks hash every prepared file. Prints a table, then JSON lines.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_corpus(directory: str, size_mb: float, lines_per_doc: int = 40,
                file_mb: int = 128) -> str:
  """DIR/corpus-SIZEmb/part-NNN.txt (made once); returns the text:GLOB."""
  out = os.path.join(directory, f'corpus-{size_mb:g}mb')
  pattern = os.path.join(out, 'part-*.txt')
  if os.path.exists(os.path.join(out, 'done')):
    return pattern
  shutil.rmtree(out, ignore_errors=True)
  os.makedirs(out)
  lib = sysconfig.get_paths()['stdlib']
  docs = []
  for path in sorted(glob.glob(os.path.join(lib, '**', '*.py'), recursive=True)):
    if 'site-packages' in path:
      continue
    with open(path, encoding='utf-8', errors='replace') as f:
      lines = [line.strip() for line in f if line.strip()]
    docs += ['\n'.join(lines[i:i + lines_per_doc]) + '\n\n'
             for i in range(0, len(lines), lines_per_doc)]
  target, written, part, rng = int(size_mb * 2**20), 0, 0, random.Random(0)
  f = open(os.path.join(out, f'part-{part:03d}.txt'), 'w', encoding='utf-8')
  while written < target:
    rng.shuffle(docs)
    for doc in docs:
      if written >= target:
        break
      if f.tell() >= file_mb * 2**20:
        f.close()
        part += 1
        f = open(os.path.join(out, f'part-{part:03d}.txt'), 'w', encoding='utf-8')
      f.write(doc)
      written += len(doc.encode('utf-8'))
  f.close()
  open(os.path.join(out, 'done'), 'w').close()
  return pattern


def run_measured(cmd: list[str]) -> dict:
  """Runs cmd; wall clock, peak RSS summed over its process tree, and the largest single RSS."""
  start = time.time()
  # Output to files, not pipes: a child blocked on a full pipe would stall (and skew) the run.
  out_file, err_file = tempfile.TemporaryFile('w+'), tempfile.TemporaryFile('w+')
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out_file, stderr=err_file, text=True)
  root, peak, single = psutil.Process(proc.pid), 0, 0
  while proc.poll() is None:
    try:
      procs = [root] + root.children(recursive=True)
      rss = []
      for p in procs:
        try:
          rss.append(p.memory_info().rss)
        except psutil.Error:
          pass
      peak, single = max(peak, sum(rss)), max(single, max(rss, default=0))
    except psutil.Error:
      pass
    time.sleep(0.05)
  out_file.seek(0)
  err_file.seek(0)
  out, err = out_file.read(), err_file.read()
  if proc.returncode:
    raise RuntimeError(f'{" ".join(cmd)} failed:\n{err[-3000:]}')
  lines = [json.loads(x) for x in out.splitlines() if x.startswith('{')]
  return {'wall_s': round(time.time() - start, 2), 'peak_rss_mb': round(peak / 2**20, 1),
          'max_process_rss_mb': round(single / 2**20, 1), 'json': lines[-1] if lines else None}


def tree_digest(directory: str) -> str:
  """sha256 over every prepared file (relative path and bytes)."""
  h = hashlib.sha256()
  for path in sorted(glob.glob(os.path.join(directory, '**', '*'), recursive=True)):
    if os.path.isfile(path):
      h.update(os.path.relpath(path, directory).encode())
      with open(path, 'rb') as f:
        h.update(f.read())
  return h.hexdigest()[:16]


def launch(*args: str) -> list[str]:
  return [sys.executable, os.path.join(ROOT, 'launch.py'), '--exp', 'mlm_nsp_tiny', *args]


def main(argv: list[str] | None = None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--sizes_mb', default='100,400')
  parser.add_argument('--workers', default='1,2')
  parser.add_argument('--train_steps', type=int, default=20, help='0 skips training')
  parser.add_argument('--shard_mb', type=float, default=8)
  parser.add_argument('--tokenizer_sample_sentences', type=int, default=1_000_000,
                      help='the SentencePiece sample (its cost does not grow with the corpus)')
  parser.add_argument('--dir', default='/tmp/encoder-prepare-bench')
  parser.add_argument('--beam', action='store_true', help='also prepare with Beam DirectRunner')
  parser.add_argument('--beam_python', default=sys.executable,
                      help='the interpreter that has apache_beam (requirements-beam.txt)')
  parser.add_argument('--train_only', action='store_true',
                      help='only the training runs, on the folders an earlier run prepared')
  args = parser.parse_args(argv)
  os.makedirs(args.dir, exist_ok=True)
  load = os.getloadavg()
  rows = []
  common = [f'--config.data.prepare_shard_mb={args.shard_mb}',
            f'--config.data.tokenizer_sample_sentences={args.tokenizer_sample_sentences}']
  for size in [float(s) for s in args.sizes_mb.split(',')]:
    pattern = make_corpus(args.dir, size)
    corpus = f'--config.data.corpus=text:{pattern}'
    first_dir = None
    for workers in [int(w) for w in args.workers.split(',')]:
      name = f'{size:g}mb-w{workers}'
      prepared = os.path.join(args.dir, 'prepared', name)
      if args.train_only:
        first_dir = first_dir or prepared
        continue
      shutil.rmtree(prepared, ignore_errors=True)
      r = run_measured(launch('--prepare_data', '--workdir', os.path.join(args.dir, 'runs', name),
                              corpus, f'--config.data.prepared_dir={prepared}',
                              f'--config.data.prepare_workers={workers}', *common))
      s = r.pop('json')
      row = {'kind': 'prepare', 'size_mb': size, 'workers': workers, **r,
             'seconds_tokenizer': s['seconds_tokenizer'], 'seconds_prepare': s['seconds_prepare'],
             'mb_per_s': s['mb_per_s'], 'mb_per_s_per_worker': round(s['mb_per_s'] / workers, 3),
             'shards': s['shards'], 'documents': s['documents'], 'tokens': s['tokens'],
             'instances': s['instances'], 'disk_mb': round(_du(prepared) / 2**20, 1),
             'digest': tree_digest(prepared), 'load': _load()}
      rows.append(row)
      _print(row)
      first_dir = first_dir or prepared
    if args.beam and not args.train_only:
      prepared = os.path.join(args.dir, 'prepared', f'{size:g}mb-beam')
      shutil.rmtree(prepared, ignore_errors=True)
      r = run_measured([args.beam_python, '-m', 'encoder.data.pretrain.beam_pipeline', '--exp',
                        'mlm_nsp_tiny', '--workdir', os.path.join(args.dir, 'runs', 'beam'),
                        corpus, f'--config.data.prepared_dir={prepared}', *common])
      row = {'kind': 'beam', 'size_mb': size, **{k: v for k, v in r.items() if k != 'json'},
             'digest': tree_digest(prepared), 'load': _load()}
      rows.append(row)
      _print(row)
    if args.train_steps:
      rows.append(_train(args, f'{size:g}mb', [corpus, f'--config.data.prepared_dir={first_dir}',
                                               *common]))
  if args.train_steps:
    cache = f'--config.data.cache_dir={os.path.join(args.dir, "cache-default")}'
    run_measured(launch('--prepare_data', '--workdir', os.path.join(args.dir, 'runs', 'default'),
                        cache))
    rows.append(_train(args, 'embedded default', [cache]))
  print('\nstarting load averages (1, 5, 15 min): ' + ' '.join(f'{x:.2f}' for x in load))
  for row in rows:
    print(json.dumps(row))
  return rows


def _train(args, name: str, overrides: list[str]) -> dict:
  workdir = os.path.join(args.dir, 'runs', f'train-{name.replace(" ", "-")}')
  shutil.rmtree(workdir, ignore_errors=True)
  r = run_measured(launch('--workdir', workdir, f'--config.train.num_steps={args.train_steps}',
                          *overrides))
  row = {'kind': 'train', 'corpus': name, 'steps': args.train_steps,
         **{k: v for k, v in r.items() if k != 'json'}, 'load': _load()}
  _print(row)
  return row


def _du(directory: str) -> int:
  return sum(os.path.getsize(p) for p in glob.glob(os.path.join(directory, '**', '*'),
                                                    recursive=True) if os.path.isfile(p))


def _load() -> str:
  return ' '.join(f'{x:.2f}' for x in os.getloadavg())


def _print(row: dict) -> None:
  if row['kind'] == 'train':
    print(f"train {row['corpus']:>16}  {row['steps']} steps  wall {row['wall_s']:7.1f}s  "
          f"peak RSS {row['peak_rss_mb']:7.1f} MB  (load {row['load']})", flush=True)
    return
  label = f"{row['size_mb']:g} MB, " + (f"{row['workers']} worker(s)" if row['kind'] ==
                                         'prepare' else 'beam DirectRunner')
  extra = (f"prepare {row['seconds_prepare']:6.1f}s ({row['mb_per_s_per_worker']:.2f} MB/s per "
           f"worker), tokenizer {row['seconds_tokenizer']:5.1f}s, " if row['kind'] == 'prepare'
           else '')
  print(f"{row['kind']:7} {label:<26} wall {row['wall_s']:7.1f}s  {extra}peak RSS "
        f"{row['peak_rss_mb']:7.1f} MB (largest process {row['max_process_rss_mb']:.1f})  "
        f"digest {row['digest']}  (load {row['load']})", flush=True)


if __name__ == '__main__':
  main()
