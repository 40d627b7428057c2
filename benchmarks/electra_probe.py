"""ELECTRA runs' discriminators judged on the same corrupted rows: a comparison across runs
whose generators differ.

  python -m benchmarks.electra_probe runs/probes_electra/g1_4,lr2e-3 runs/probes_electra/g1_2,lr2e-3
  python -m benchmarks.electra_probe RUN... --generator RUN --batches 10

A run's own held-out `disc_*` metrics depend on its generator (a better one makes harder
replacements), so runs with generators of other sizes do not compare by them. Here every run's
discriminator (its newest checkpoint) reads the held-out rows of the first run's data,
corrupted by one generator (`--generator`, default: the first run's) with the evaluation's
fixed key: the same inputs for every run. One JSON line per run: its step, the generator, and
the discriminator's loss, accuracy, precision and recall on those rows; then a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import jax

from encoder import configs, saved_config
from encoder.checkpoint_files import restore_newest_params
from encoder.errors import EncoderError
from encoder.modules.config import model_config
from encoder.modules.electra import ElectraForPretraining, generator_config
from encoder.tasks import electra, pretraining


def _config(run: str):
  return configs.from_json(json.dumps(saved_config.read_saved(run)))


def _generator_groups(params: dict) -> dict:
  """A run's generator with its embeddings (its own, or the discriminator's it shared)."""
  own = params['generator']
  if 'embeddings' not in own:
    own = {**own, 'embeddings': params['encoder']['embeddings']}
  return {'generator': own, 'generator_mlm': params['generator_mlm']}


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('runs', nargs='+', help='workdirs of task=electra runs')
  parser.add_argument('--generator', default='', help="the run whose generator corrupts the "
                      "rows (default: the first run's)")
  parser.add_argument('--batches', type=int, default=10, help='held-out batches (the runs\' '
                      'train.eval_batches is 10 in cram)')
  args = parser.parse_args(argv)
  source = args.generator or args.runs[0]
  config = _config(args.runs[0])
  data = pretraining.datasets(config, args.runs[0])
  batches = data.eval_batches(args.batches)
  _, _, generator_params = restore_newest_params(source)
  fraction = float(_config(source).electra.generator_size)
  rows = []
  for run in args.runs:
    run_config = _config(run)
    cfg = model_config(run_config.model, platform='cpu')
    _, params_dir, params = restore_newest_params(run)
    model = ElectraForPretraining(cfg, generator_config(cfg, fraction), 'none')
    mixed = {'encoder': params['encoder'], 'discriminator_head': params['discriminator_head'],
             **_generator_groups(generator_params)}
    apply = jax.jit(lambda p, b, model=model: model.apply({'params': p}, b))
    weight = float(run_config.electra.discriminator_weight)
    total: dict = {}
    for batch in batches:
      _, sums = electra.loss_and_metrics(apply(mixed, batch), batch, discriminator_weight=weight)
      total = {k: total.get(k, 0.0) + float(v) for k, v in sums.items()}
    metrics = electra.reduce_metrics(total, discriminator_weight=weight)
    row = {'run': run, 'step': int(os.path.basename(os.path.dirname(params_dir))),
           'generator': source, 'rows': sum(len(b['input_ids']) for b in batches),
           **{k: round(metrics[k], 4) for k in ('disc_loss', 'disc_accuracy', 'disc_precision',
                                                'disc_recall', 'replaced_fraction')}}
    print(json.dumps(row), flush=True)
    rows.append(row)
  print(f"\ngenerator: {source} (its {fraction:g}); {rows[0]['rows']} held-out rows")
  print('| run | step | disc loss | accuracy | precision | recall |')
  print('|---|---|---|---|---|---|')
  for r in rows:
    print(f"| {r['run']} | {r['step']} | {r['disc_loss']:.4f} | {r['disc_accuracy']:.4f} | "
          f"{r['disc_precision']:.4f} | {r['disc_recall']:.4f} |")
  return 0


def _cli() -> int:
  """main, with a run that cannot be read (no such workdir, not an ELECTRA run) as one
  `error:` line and exit 2, as launch.py says it."""
  try:
    return main()
  except (EncoderError, OSError) as e:  # OSError: a workdir without config.json
    print(f'error: {e}', file=sys.stderr)
    return 2


if __name__ == '__main__':
  raise SystemExit(_cli())

