"""The tasks an evaluation suite fine-tunes, each with its papers' recipe, and the named suites.

A task names the experiment that fine-tunes it (`classify_sst2`, ...), where its files lie in
the folder the GLUE download unpacks to (or CoNLL's, SQuAD's), the metrics its leaderboard
reports, and the recipe: BERT's (Devlin et al., 2019, section 4 and appendix A.3): batch 32, 3
epochs, 10% linear warmup, and the learning rate picked on dev from {5e-5, 4e-5, 3e-5, 2e-5}.
With `suite.lr_grid=false` (the default: one fine-tuning run per seed) each task uses its
default rate, the one the experiment ships (Hugging Face run_glue's 2e-5 for GLUE, 5e-5 for
CoNLL, run_squad's 3e-5 for SQuAD).

Compact encoders (narrower than BERT-base's 768) get the recipe Google published with its 24
small BERTs (Turc et al., 2019, "Well-Read Students Learn Better"; google-research/bert README):
4 epochs, learning rate from {3e-4, 1e-4, 5e-5, 3e-5}, default 1e-4. At BERT's 2e-5 a 6-layer,
384-wide model barely moves in 3 epochs (docs/finetuning.md measures it). Turc et al. tuned on
GLUE; CoNLL and SQuAD take the same recipe (CoNLL-2003 measured 0.915 entity F1 with it, the
imported MiniLM-L6). `suite.recipe=auto` picks by each arm's width; `bert` or `compact` forces
one.
"""

from __future__ import annotations

import dataclasses

from encoder.errors import ConfigError

BERT_GLUE_GRID = (5e-5, 4e-5, 3e-5, 2e-5)
COMPACT_GRID = (3e-4, 1e-4, 5e-5, 3e-5)
COMPACT_BELOW_WIDTH = 768  # BERT-base's hidden size: narrower encoders are compact
RECIPES = ('auto', 'bert', 'compact')


@dataclasses.dataclass(frozen=True)
class Recipe:
  learning_rate: float
  lr_grid: tuple[float, ...]
  batch_size: int = 32
  num_epochs: float = 3.0
  warmup_fraction: float = 0.1

  def compact(self) -> Recipe:
    """The small-BERT recipe for this task (same batch and warmup; a rate of 0 stays 0: the
    embedding tasks do not fine-tune)."""
    if not self.learning_rate:
      return self
    return dataclasses.replace(self, learning_rate=1e-4, lr_grid=COMPACT_GRID, num_epochs=4.0)


@dataclasses.dataclass(frozen=True)
class SuiteTask:
  """One task: its experiment, its files under the data folder of its `source`, its metrics."""
  name: str
  experiment: str
  # 'glue' (suite.data_dir), 'conll' (suite.conll_dir), 'squad' (suite.squad_dir), or 'embed'
  # (no fine-tuning: suite.sts_file, suite.beir_dir; see embed_suite.py)
  source: str
  train_file: str  # relative to the source's folder
  dev_file: str
  metrics: tuple[str, ...]  # the leaderboard's metrics; the task's score is their mean
  recipe: Recipe
  header_lines: int = 1  # lines before the examples (CoLA's GLUE files have none)
  label: str = ''  # the column title in tables
  # The training file holds every phrase of each sentence's parse tree (SST-2): a held-out
  # slice is whole sentences, their phrases out of training (sentence_split.py).
  phrase_tree: bool = False

  @property
  def kind(self) -> str:
    """How its files are sliced: rows of a table, CoNLL sentences, or SQuAD paragraphs."""
    return {'glue': 'rows', 'conll': 'sentences', 'squad': 'paragraphs',
            'embed': 'none'}[self.source]

  @property
  def fine_tunes(self) -> bool:
    """False for the embedding tasks, which judge an arm's encoder as it is (embed_suite.py)."""
    return self.source != 'embed'


def _glue(name: str, folder: str, metrics: tuple[str, ...], label: str, dev: str = 'dev.tsv',
          header_lines: int = 1, phrase_tree: bool = False) -> SuiteTask:
  return SuiteTask(name, f'classify_{name}', 'glue', f'{folder}/train.tsv', f'{folder}/{dev}',
                   metrics, Recipe(2e-5, BERT_GLUE_GRID), header_lines, label, phrase_tree)


TASKS = {t.name: t for t in (
    _glue('cola', 'CoLA', ('mcc',), 'CoLA mcc', header_lines=0),
    _glue('sst2', 'SST-2', ('accuracy',), 'SST-2 acc', phrase_tree=True),
    _glue('mrpc', 'MRPC', ('f1', 'accuracy'), 'MRPC F1/acc'),
    _glue('stsb', 'STS-B', ('pearson', 'spearman'), 'STS-B P/S'),
    _glue('qqp', 'QQP', ('f1', 'accuracy'), 'QQP F1/acc'),
    _glue('mnli', 'MNLI', ('accuracy',), 'MNLI-m acc', dev='dev_matched.tsv'),
    _glue('qnli', 'QNLI', ('accuracy',), 'QNLI acc'),
    _glue('rte', 'RTE', ('accuracy',), 'RTE acc'),
    SuiteTask('conll2003', 'ner_conll2003', 'conll', 'train.txt', 'valid.txt', ('f1',),
              Recipe(5e-5, (5e-5, 3e-5, 2e-5)), 0, 'CoNLL F1'),
    SuiteTask('squad', 'qa_squad', 'squad', 'train-v1.1.json', 'dev-v1.1.json',
              ('exact_match', 'f1'), Recipe(3e-5, (5e-5, 3e-5), num_epochs=2.0), 0,
              'SQuAD EM/F1'),
    SuiteTask('sts', '', 'embed', '', '', ('spearman',), Recipe(0.0, ()), 0, 'STS Spearman'),
    SuiteTask('beir', '', 'embed', '', '', ('ndcg@10',), Recipe(0.0, ()), 0, 'BEIR nDCG@10'),
)}

GLUE = ('cola', 'sst2', 'mrpc', 'stsb', 'qqp', 'mnli', 'qnli', 'rte')  # WNLI left out, as BERT
SUITES = {'glue': GLUE, 'ner': ('conll2003',), 'squad': ('squad',),
          'all': (*GLUE, 'conll2003', 'squad'), 'embed': ('sts', 'beir')}


RECIPE_TEXT = {'bert': "BERT's (3 epochs; lr 2e-5 GLUE, 5e-5 CoNLL, 3e-5 SQuAD)",
               'compact': 'compact (Turc et al., 2019: 4 epochs, lr 1e-4)'}
GRID_RECIPE_TEXT = {'bert': "BERT's (3 epochs; lr per task from its grid, chosen on held-out)",
                    'compact': 'compact (Turc et al., 2019: 4 epochs; lr per task from '
                    f"{{{', '.join(f'{r:.0e}'.replace('e-0', 'e-') for r in COMPACT_GRID)}}}, "
                    'chosen on held-out)'}


def recipe_name(choice: str, hidden_size: int) -> str:
  """'bert' or 'compact': what `suite.recipe=choice` gives an arm of `hidden_size` (a width of
  0, unknown, keeps BERT's under auto)."""
  if choice not in RECIPES:
    raise ConfigError(f"suite.recipe={choice!r}: expected one of {', '.join(RECIPES)}")
  if choice == 'auto':
    return 'compact' if 0 < hidden_size < COMPACT_BELOW_WIDTH else 'bert'
  return choice


def recipe_for(task: SuiteTask, choice: str, hidden_size: int) -> Recipe:
  """The recipe an arm of `hidden_size` fine-tunes `task` with under `suite.recipe=choice`."""
  compact = recipe_name(choice, hidden_size) == 'compact'
  return task.recipe.compact() if compact else task.recipe


def suite_tasks(name: str, experiment=None, task_list: str = '') -> list[SuiteTask]:
  """The tasks of suite `name`: `suite.tasks` when given, a built-in suite, or one the
  experiment module names in its `SUITES` dict (user-defined suites live there)."""
  names: tuple[str, ...] | list[str]
  if task_list:
    names = [t.strip() for t in task_list.split(',') if t.strip()]
  elif name in SUITES:
    names = SUITES[name]
  elif experiment is not None and name in getattr(experiment, 'SUITES', {}):
    names = experiment.SUITES[name]
  else:
    extra = sorted(getattr(experiment, 'SUITES', {})) if experiment is not None else []
    raise ConfigError(f"unknown suite '{name}' (known: {', '.join([*SUITES, *extra])}; or set "
                      '--config.suite.tasks=sst2,rte,...)')
  unknown = [n for n in names if n not in TASKS]
  if unknown:
    raise ConfigError(f"suite '{name}': unknown task '{unknown[0]}' (known: {', '.join(TASKS)})")
  return [TASKS[n] for n in names]
