"""Command line: train, describe, inspect or sweep an experiment (see docs in README.md).

  python launch.py --exp mlm_nsp_tiny          # from a checkout; or, installed, from anywhere:
  python -m encoder.launch --exp mlm_nsp_tiny  # (the same as the `encoder-train` command)
  python launch.py --exp mlm_nsp_base --config.train.batch_size=128 --workdir runs/b128
  python launch.py --list | --exp NAME --print_config | --describe | --inspect_data N
  python launch.py --exp mlm_nsp_base --prepare_data
  python launch.py --exp mlm_nsp_base --compile_for v5e:2x2 [--fit]   # does it fit? (no TPU)
  python launch.py --eval_suite glue --config.init_from=runs/bert --config.suite.data_dir=glue_data

User errors print one line `error: ...` and exit with status 2. A listing piped into a reader
that stops early (`--list | head -5`) ends quietly, as any command-line tool does.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import select
import sys

from encoder import config_schema, configs, storage
from encoder.errors import ConfigError, EncoderError


class _Parser(argparse.ArgumentParser):
  def error(self, message):  # one line, exit 2, as every user error
    sys.stderr.write(f'error: {message} (see --help)\n')
    sys.exit(2)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
  parser = _Parser(description=__doc__.split('\n')[0],
                   epilog='Override any config field with --config.KEY=VALUE.')
  parser.add_argument('--exp', help='experiment NAME[:ARG], ARG a comma-separated variant list')
  parser.add_argument('--workdir', help='run directory (default runs/NAME)')
  parser.add_argument('--list', action='store_true', help='list experiments')
  parser.add_argument('--print_config', action='store_true',
                      help='print the resolved config (the fields the data fills say so); '
                      'with --sweep or --eval_suite, list the runs as --dry_run does')
  parser.add_argument('--describe', action='store_true', help='print the model summary')
  parser.add_argument('--inspect_data', type=int, metavar='N',
                      help='print N decoded training examples, save a batch, exit')
  parser.add_argument('--prepare_data', action='store_true',
                      help='prepare the corpus (tokenizer, shards, instances) once, then exit')
  parser.add_argument('--sweep', action='append', metavar='KEY=V1,V2|NAME',
                      help='run the grid of these values (repeatable), or a named sweep')
  parser.add_argument('--dry_run', action='store_true', help='with --sweep: list the runs')
  parser.add_argument('--report', metavar='DIR', help='rebuild a sweep report from its runs')
  parser.add_argument('--compile_for', metavar='TARGET',
                      help='compile the run for a TPU topology (v5e:2x2, v4:2x2x1, ...) or '
                      'h100[:N] on this host: memory a device, WORKDIR/compile/TARGET/report.json')
  parser.add_argument('--fit', action='store_true',
                      help='with --compile_for: the largest global batch that fits')
  parser.add_argument('--eval_suite', metavar='NAME',
                      help='fine-tune --config.init_from on every task of suite NAME (glue, ner, '
                      'squad, all, or one the --exp experiment names), several seeds, one table')
  args, rest = parser.parse_known_args(argv)
  overrides = []
  for item in rest:
    if not item.startswith('--config.'):
      parser.error(f"unrecognized argument '{item}'")
    overrides.append(item[len('--config.'):])
  if not args.list and not args.exp and not args.report and not args.eval_suite:
    parser.error('--exp NAME is required (see --list)')
  if args.fit and not args.compile_for:
    parser.error('--fit searches the batch of a --compile_for TARGET: give both')
  return args, overrides


def _hub_model(value: str) -> str:
  """An `init_from` naming a model on the Hub (hf://ORG/NAME[@REVISION]), downloaded and
  converted the first time, as that name pinned to its commit, which the run's config.json
  then records; any other value as it is."""
  if not str(value).startswith('hf://'):
    return value
  from encoder.convert import from_hub  # lazy: JAX only to convert a model the first time
  return from_hub(value)[0].pinned


def run(argv: list[str]) -> int:
  args, overrides = parse_args(argv)
  for given in (args.workdir, args.report):  # refused before anything is written
    if given:
      storage.check(given)

  if args.list:
    for name, description in configs.list_experiments().items():
      print(f'{name:<24} {description}')
    return 0
  # The commands below import only what they use, here rather than at the top, so that
  # --list, --help, --print_config and a mistyped flag, experiment or key answer without
  # starting JAX (tests/test_launch.py checks it).
  if args.report:
    from encoder.sweep.report import write_report  # lazy: see above
    storage.check_bucket(args.report)
    records = write_report(args.report)
    if not records:
      raise ConfigError(f"no sweep runs under '{args.report}'")
    print(storage.read_text(os.path.join(args.report, 'sweep.md')), end='')
    return 0
  # A grid of runs has no one config to print: --print_config lists its runs, never starts one.
  listing = args.dry_run or args.print_config
  if args.eval_suite:
    from encoder.suite import run_suite  # lazy
    from encoder.suite.arms import split_sources  # lazy
    experiment = configs.experiment_module(args.exp) if args.exp else None
    # A Hub name is fetched only once the experiment is known to exist (not for a typo).
    overrides = [f"init_from={','.join(map(_hub_model, split_sources(o.partition('=')[2])))}"
                 if o.startswith('init_from=') else o for o in overrides]
    run_suite(args.eval_suite, overrides, args.workdir, experiment, dry_run=listing)
    return 0
  config = configs.load_experiment(args.exp)
  configs.apply_overrides(config, overrides)
  config.init_from = _hub_model(config.init_from)  # an experiment's own default too
  workdir = args.workdir or os.path.join('runs', args.exp.split(':')[0])
  if args.sweep:
    from encoder.sweep import grid  # lazy
    from encoder.sweep.run import run_sweep  # lazy: the trainer
    experiment = configs.experiment_module(args.exp)
    user_keys = frozenset(o.partition('=')[0] for o in overrides)
    axes = [axis for spec in args.sweep
            for axis in grid.parse_sweep(spec, config, experiment, user_keys)]
    sweep_dir = args.workdir or os.path.join('runs', 'sweeps', grid.sweep_dir_name(args))
    run_sweep(args.exp, config, axes, sweep_dir, dry_run=listing)
    return 0
  if args.compile_for:
    return _compile_for(config, workdir, args.compile_for, args.fit)
  if args.prepare_data and config.task not in config_schema.PRETRAINING_TASKS:
    raise ConfigError(f"--prepare_data prepares pretraining corpora; '{args.exp}' is a "
                      f'{config.task} experiment, whose data needs no preparation')
  if args.print_config or args.describe or args.prepare_data or args.inspect_data is not None:
    from encoder.train.resolve import printable, resolve_config  # lazy: no JAX to print
    config = resolve_config(config)  # refuses what training would, before anything is written
  if args.print_config:
    print(json.dumps(printable(config), indent=2, sort_keys=True))
    return 0
  if args.describe:
    from encoder import describe  # lazy
    from encoder.tasks import get_task  # lazy
    task = get_task(config.task)
    print(describe.recipe(config) + '\n')
    print(describe.describe(task.build_model(config), task.dummy_batch(config)))
    return 0
  if args.prepare_data:
    from encoder.data.pretrain import preparation, pretraining_data  # lazy
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(message)s', datefmt='%H:%M:%S')
    for phase in pretraining_data.phase_configs(config):  # a shorter first phase: own instances
      print(json.dumps(preparation.prepare(phase, workdir)), flush=True)
    return 0
  if args.inspect_data is not None:
    from encoder.data.pretrain.inspection import inspect_data  # lazy
    inspect_data(config, workdir, args.inspect_data)
    return 0
  from encoder.train.trainer import train_and_evaluate  # lazy
  train_and_evaluate(config, workdir)
  return 0


def _compile_for(config, workdir: str, target: str, fit: bool) -> int:
  """--compile_for: the run compiled for `target` from this host (encoder/train/
  compile_report.py), its name and config refused before JAX starts."""
  from encoder.train.targets import check_name  # lazy: no JAX to refuse a name
  check_name(target)
  from encoder.train.resolve import resolve_config  # lazy
  config = resolve_config(config)
  from encoder.train.compile_report import compile_for  # lazy: JAX
  from encoder.train.trainer import setup_logging  # lazy
  setup_logging()
  compile_for(config, workdir, target, fit=fit)
  return 0


def _stdout_reader_gone() -> bool:
  """Whether stdout is a pipe whose reader has closed it (`--list | head -5`), rather than some
  other pipe that broke (a data preparation worker's): poll reports an error on the write end
  of a pipe without readers, without writing to it. Where there is no poll (Windows), False."""
  try:
    fd = sys.stdout.fileno()
  except (AttributeError, OSError, ValueError):  # stdout replaced by an object with no fd
    return False
  if not hasattr(select, 'poll'):
    return False
  poller = select.poll()
  poller.register(fd, select.POLLOUT)
  return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def main() -> None:
  """The `encoder-train` console script, `python -m encoder.launch` and `python launch.py`."""
  try:
    status = run(sys.argv[1:])
    sys.stdout.flush()  # here, not at exit: a listing smaller than the buffer is written now
  except EncoderError as e:
    sys.stderr.write(f'error: {e}\n')
    sys.exit(2)
  except BrokenPipeError:
    if not _stdout_reader_gone():
      raise
    # The interpreter flushes stdout once more as it exits, which would raise (and print) the
    # same error again: what is left goes to devnull. Status 1, as Python's own handling of a
    # closed pipe gives and the contract's "anything else" (not a shell's 141 for SIGPIPE).
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(1)
  sys.exit(status)


if __name__ == '__main__':
  main()
