"""Preparation as an Apache Beam pipeline: the same per-shard function on any Beam runner.

  pip install -r requirements-beam.txt
  python -m encoder.data.pretrain.beam_pipeline --exp mlm_nsp_base [--workdir DIR]
      [--config.KEY=VALUE ...]
      [Beam pipeline options: --runner=DataflowRunner --project=... --region=...
       --temp_location=gs://... --setup_file=./setup.py | --runner=FlinkRunner ...]

The launcher plans the shards and trains the tokenizer on its bounded sample (both small), the
pipeline runs `shard_worker.process` on every shard (Create -> Reshuffle -> Map: the reshuffle
spreads the shards over the workers instead of fusing them onto one), and the launcher then reads
the shards' markers back and writes the manifests. Bits are those of the local pool: the job of a
shard is the same JSON, and nothing in it depends on the engine. On a cluster, data.prepared_dir
(and the corpus) must be storage every worker reaches, e.g. a gs:// bucket. Without options this
runs on the DirectRunner in this process.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

from encoder import configs
from encoder.data.pretrain import preparation, shard_worker
from encoder.errors import EncoderError


def run(config, workdir: str, beam_args: list[str] | None = None) -> dict:
  """Prepares `config`'s corpus with Beam (options from beam_args); the `--prepare_data` line."""
  import apache_beam as beam  # optional (requirements-beam.txt)
  from apache_beam.options.pipeline_options import PipelineOptions
  s = preparation.settings(config, workdir)
  if preparation.is_prepared(s):
    return preparation.summary(s, preparation.read_manifest(s), 0, 0.0, 0.0, reused=True)
  start = time.time()
  preparation.ensure_tokenizer(config, s)
  seconds_tokenizer = time.time() - start
  start = time.time()
  with beam.Pipeline(options=PipelineOptions(beam_args or [])) as pipeline:
    _ = (pipeline
         | 'Shards' >> beam.Create(preparation.jobs(s))
         | 'Spread' >> beam.Reshuffle()
         | 'Prepare' >> beam.Map(shard_worker.process))
  manifest = preparation.write_manifests(s, preparation.collect(s))
  return preparation.summary(s, manifest, 0, seconds_tokenizer, time.time() - start, reused=False)


def main(argv: list[str]) -> None:
  """launch.py's --exp/--workdir/--config.KEY=VALUE; every other argument goes to Beam."""
  exp, workdir, overrides, beam_args = None, None, [], []
  it = iter(argv)
  for arg in it:
    if arg in ('--exp', '--workdir'):
      value = next(it, None)
      exp, workdir = (value, workdir) if arg == '--exp' else (exp, value)
    elif arg.startswith(('--exp=', '--workdir=')):
      key, _, value = arg.partition('=')
      exp, workdir = (value, workdir) if key == '--exp' else (exp, value)
    elif arg.startswith('--config.'):
      overrides.append(arg[len('--config.'):])
    else:
      beam_args.append(arg)
  logging.basicConfig(level=logging.INFO, format='%(asctime)s %(message)s', datefmt='%H:%M:%S')
  try:
    if not exp:
      raise EncoderError('--exp NAME is required')
    config = configs.load_experiment(exp)
    configs.apply_overrides(config, overrides)
    workdir = workdir or os.path.join('runs', exp.split(':')[0])
    print(json.dumps(run(config, workdir, beam_args)), flush=True)
  except EncoderError as e:
    sys.stderr.write(f'error: {e}\n')
    sys.exit(2)


if __name__ == '__main__':
  main(sys.argv[1:])
