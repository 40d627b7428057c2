"""The suite's own settings (`--config.suite.KEY=...`, `--config.init_from=...`) and the split
of the command line's overrides into those and the ones every fine-tuning run takes."""

from __future__ import annotations

from ml_collections import config_dict

from encoder import configs
from encoder.errors import ConfigError
from encoder.suite.catalog import TASKS, recipe_name

DEV_SETS = ('auto', 'official', 'heldout')


def suite_config() -> config_dict.ConfigDict:
  """Every suite setting, with its default."""
  c = config_dict.ConfigDict()
  c.init_from = ''  # a workdir, one step, a sweep folder, a converted HF model or hf://ORG/NAME
  s = c.suite = config_dict.ConfigDict()
  s.seeds = 3  # fine-tuning seeds per task (train.seed = 0, 1, ...)
  s.tasks = ''  # comma-separated task names: replaces the named suite's list
  s.data_dir = ''  # GLUE's layout (SST-2/train.tsv, MRPC/train.tsv, ...); '' = TFDS glue/*
  s.conll_dir = ''  # CoNLL-2003 (train.txt, valid.txt); '' = TFDS conll2003
  s.squad_dir = ''  # SQuAD v1.1 (train-v1.1.json, dev-v1.1.json); '' = TFDS squad
  # auto: each task's own dev file (dev.tsv, valid.txt, ...) where the folder has it, else a
  # held-out slice of its training file (the same slice for every arm, seed and rerun: a seeded
  # shuffle); official: always the dev file (missing: the task is listed as missing); heldout:
  # always the slice.
  s.dev_set = 'auto'
  s.heldout_fraction = 0.1
  s.dev_size = 0  # at most this many dev examples (0: all the slice holds)
  s.train_size = 0  # at most this many training examples (0: all): budgets for small machines
  s.train_sizes = ''  # per-task caps that beat train_size, e.g. 'sst2=20000,conll2003=5000'
  s.split_seed = 0
  # Each arm's recipe (catalog.py): bert (Devlin et al.: 3 epochs, lr 2e-5 GLUE), compact
  # (Turc et al.'s small BERTs: 4 epochs, lr 1e-4), or auto: compact below BERT-base's width.
  s.recipe = 'auto'
  s.lr_grid = False  # the recipe's learning-rate grid (best median on dev), else its one rate
  # With lr_grid: the grid runs this many seeds per rate, the rate whose median dev score is
  # best is chosen, and the other seeds run at it alone (about half the runs of the whole grid
  # at 3 seeds, 4 rates); 0: every seed at every rate, chosen by the medians of all seeds.
  s.grid_seeds = 0
  # An NLI training file (GLUE's MNLI/train.tsv, or JSONL premise/hypothesis/label): the tasks
  # of intermediate_tasks fine-tune from each arm first fine-tuned on it (as RoBERTa does for
  # RTE, MRPC and STS-B; intermediate.py). '': from the arm itself.
  s.intermediate = ''
  s.intermediate_tasks = 'rte,mrpc,stsb'
  s.parallel = 1  # runs at once; above 1, each in its own process with a share of the host
  s.checkpoints = 'last'  # on a pretraining run: last | all | STEP,STEP
  s.scratch = True  # a baseline arm: the same architecture, randomly initialised
  s.compile_cache = True  # the runs share compiled steps (SUITE/compile_cache; compile_cache.py)
  s.keep_weights = False  # keep each fine-tuned run's checkpoints (else only its metrics)
  # The embed suite (no fine-tuning: each arm's embed() as it is): scored pairs (a TSV with
  # sentence1, sentence2, score) and a BEIR folder (corpus.jsonl, queries.jsonl,
  # qrels/SPLIT.tsv); a task without its file is listed as missing.
  s.sts_file = ''
  s.beir_dir = ''
  s.beir_split = 'test'
  return c


def split_overrides(overrides: list[str]) -> tuple[list[str], list[str]]:
  """(the suite's, the runs'): `suite.*` and `init_from` configure the suite; everything else
  (`train.num_steps=100`, `data.max_seq_length=64`) is passed to every fine-tuning run."""
  own, runs = [], []
  for item in overrides:
    key = item.partition('=')[0].strip()
    (own if key == 'init_from' or key.startswith('suite.') else runs).append(item)
  return own, runs


def build(overrides: list[str]) -> config_dict.ConfigDict:
  """The suite settings: defaults, then the overrides (a named suite's first, the user's)."""
  config = suite_config()
  configs.apply_overrides(config, overrides)
  if config.suite.dev_set not in DEV_SETS:
    raise ConfigError(f"suite.dev_set={config.suite.dev_set!r}: expected one of "
                      f"{', '.join(DEV_SETS)}")
  recipe_name(config.suite.recipe, 0)  # an unknown recipe fails here
  if config.suite.grid_seeds < 0:
    raise ConfigError(f'suite.grid_seeds={config.suite.grid_seeds} must be >= 0 (0: every seed '
                      'at every rate)')
  train_caps(config.suite)  # a mistyped per-task cap fails before any run starts
  intermediate_tasks(config.suite)
  return config


def intermediate_tasks(suite) -> tuple[str, ...]:
  """The tasks that start from the intermediate NLI run (none without `suite.intermediate`)."""
  names = tuple(t.strip() for t in str(suite.intermediate_tasks).split(',') if t.strip())
  tuned = [name for name, task in TASKS.items() if task.fine_tunes and name != 'mnli']
  unknown = [n for n in names if n not in tuned]
  if unknown:
    raise ConfigError(f"suite.intermediate_tasks: '{unknown[0]}' cannot start from the NLI "
                      f"run (tasks that can: {', '.join(tuned)})")
  return names if suite.intermediate else ()


def train_caps(suite) -> dict[str, int]:
  """`suite.train_sizes` ('sst2=20000,conll2003=5000') as {task: cap}; a cap of 0 is all."""
  caps: dict[str, int] = {}
  for item in (i.strip() for i in str(suite.train_sizes).split(',') if i.strip()):
    name, _, value = (part.strip() for part in item.partition('='))
    try:
      cap = int(value)
    except ValueError:
      cap = -1
    if name not in TASKS or cap < 0 or name in caps:
      why = 'twice' if name in caps else f'not TASK=N (tasks: {", ".join(TASKS)})'
      raise ConfigError(f"suite.train_sizes: '{item}' is {why}")
    caps[name] = cap
  return caps


def train_cap(task: str, suite) -> int:
  """At most this many training examples for `task` (0: all): its own cap, else train_size."""
  return train_caps(suite).get(task, int(suite.train_size))
