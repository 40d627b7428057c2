"""What a suite evaluates: the arms, each an encoder to fine-tune from, and the scratch baseline.

`init_from` may be
  a run (ours, or one `python -m encoder.convert --from-hf` wrote): one arm, `pretrained`, from
      its newest checkpoint; with `suite.checkpoints=all` or `STEP,STEP` one arm per saved
      step (`step500`, ...), to plot downstream score against pretraining step, or against
      minutes where the run had a wall-clock budget (each step's saved training clock);
  one checkpoint step directory: one arm, `pretrained`;
  a sweep folder (`launch.py --sweep`): one arm per finished run, named as the run;
  several of these, comma-separated (runs/cram,runs/cram_electra): one arm each, named by its
      folder (the Hub's by its name), to judge runs that no sweep made in one table, their
      seed ranges compared;
  a model on the Hub, hf://ORG/NAME[@REVISION]: one arm, `pretrained`, its runs starting from
      the name pinned to the commit converted (encoder/hub_cache.py), which their configs say.
`scratch` (`suite.scratch=true`) is the first arm's architecture and tokenizer with random
weights: what the table would say without pretraining.

A causal arm (`model.attention=causal`: the attention ablation) is pooled by the mean of its
tokens whatever it pretrained with: its [CLS] sees only itself, so a [CLS] classifier would
score it as scratch by construction and say nothing about the encoder. Each arm's pooling is
in the report.
"""

from __future__ import annotations

import dataclasses
import os

from encoder import hub_cache, saved_config, storage
from encoder.checkpoint_files import find_run_directory, step_data_state
from encoder.errors import ConfigError
from encoder.modules.config import ARCHITECTURE_FIELDS
from encoder.sweep.status import STATUS_FILE, read_status
from encoder.train.time_budget import CLOCK_KEY

SCRATCH = 'scratch'


@dataclasses.dataclass(frozen=True)
class Arm:
  """One encoder: its name in the tables, the overrides that start a run from it, and its
  pretraining step (None: not one of several steps of one run) with the minutes of training
  the run's clock had counted by then (None: a run without a wall-clock budget)."""
  name: str
  overrides: tuple[str, ...]
  run_dir: str
  step: int | None = None
  minutes: float | None = None
  pooling: str = ''  # how its sentence-level heads pool (fair_pooling)
  hidden_size: int = 0  # its width: picks BERT's or the compact recipe (catalog.recipe_for)


def find_arms(init_from: str, checkpoints: str = 'last', scratch: bool = True) -> list[Arm]:
  if not init_from:
    raise ConfigError('--eval_suite needs --config.init_from=RUN (a workdir, a checkpoint, a '
                      'sweep folder, a converted Hugging Face model or hf://ORG/NAME)')
  sources = split_sources(init_from)
  if len(sources) == 1:
    arms = source_arms(sources[0], checkpoints)
  else:
    arms = []
    for source in sources:
      found = source_arms(source, checkpoints)
      arms += [dataclasses.replace(arm, name=source_name(source) if len(found) == 1
                                   else f'{source_name(source)}-{arm.name}') for arm in found]
    names = [arm.name for arm in arms]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
      raise ConfigError(f"init_from names two runs '{repeated[0]}': the arms are named by "
                        'their folders, so give runs in folders of different names')
  if scratch:
    arms.append(scratch_arm(arms[0].run_dir))
  return [fair_pooling(arm) for arm in arms]


def split_sources(init_from: str) -> list[str]:
  """The runs (or sweep folders, checkpoints, Hub names) a comma-separated init_from names."""
  return [s.strip() for s in str(init_from).split(',') if s.strip()]


def source_name(source: str) -> str:
  """An arm's name for one of several sources: its folder's name (a checkpoint step's run's
  and step), or a Hub model's name."""
  if hub_cache.is_hub_name(source):
    return hub_cache.parse_name(source).repo_id.split('/')[-1]
  path = os.path.normpath(os.path.expanduser(source))
  run = run_of_step(path)
  if run != path:
    return f'{os.path.basename(run)}-step{os.path.basename(path)}'
  return os.path.basename(path)


def run_of_step(path: str) -> str:
  """The run a checkpoint step folder (RUN/checkpoints/STEP) belongs to; any other path as
  it is."""
  checkpoints, _ = os.path.split(path)
  if os.path.basename(checkpoints) == 'checkpoints':
    return os.path.dirname(checkpoints)
  return path


def source_arms(source: str, checkpoints: str) -> list[Arm]:
  if hub_cache.is_hub_name(source):  # converted here (launch.py converts it first)
    model = hub_cache.find(source)
    return [Arm('pretrained', (f'init_from={model.pinned}',), model.workdir)]
  path = storage.abspath(os.path.expanduser(source))
  if not storage.exists(path):
    raise ConfigError(f"init_from '{source}' does not exist")
  if is_sweep_folder(path):
    return sweep_arms(path)
  return run_arms(path, checkpoints)


def fair_pooling(arm: Arm) -> Arm:
  """The arm with its pooling and width stated, and pooled by the tokens' mean if causal."""
  saved = saved_config.read_saved(arm.run_dir)
  model, pooling = saved['model'], saved_config.head_pooling(saved)
  arm = dataclasses.replace(arm, hidden_size=int(model.get('hidden_size') or 0))
  if model.get('attention') != 'causal' or pooling == 'mean':
    return dataclasses.replace(arm, pooling=pooling)
  kept = tuple(o for o in arm.overrides if not o.startswith('model.pooling='))
  return dataclasses.replace(arm, overrides=(*kept, 'model.pooling=mean'),
                             pooling='mean (causal attention)')


def is_sweep_folder(path: str) -> bool:
  """A folder of run directories with sweep status records and no run of its own."""
  if storage.isfile(os.path.join(path, 'config.json')):
    return False
  return any(storage.isfile(os.path.join(path, name, STATUS_FILE))
             for name in storage.listdir(path))


def sweep_arms(sweep_dir: str) -> list[Arm]:
  arms = []
  for name in sorted(storage.listdir(sweep_dir)):
    workdir = os.path.join(sweep_dir, name)
    if read_status(workdir).get('status') == 'done':
      arms.append(Arm(name, (f'init_from={workdir}',), workdir))
  if not arms:
    raise ConfigError(f"sweep folder '{sweep_dir}' has no finished run to evaluate")
  return arms


def run_arms(path: str, checkpoints: str) -> list[Arm]:
  run_dir = find_run_directory(path)
  if run_dir is None:
    raise ConfigError(f"init_from '{path}' is no run: no config.json in it or above it")
  if checkpoints == 'last' or path != run_dir:
    return [Arm('pretrained', (f'init_from={path}',), run_dir)]
  steps = checkpoint_steps(run_dir)
  if checkpoints != 'all':
    try:
      wanted = [int(s) for s in checkpoints.split(',') if s.strip()]
    except ValueError:
      raise ConfigError(f"suite.checkpoints='{checkpoints}': expected last, all or STEP,STEP"
                        ) from None
    absent = [s for s in wanted if s not in steps]
    if absent:
      raise ConfigError(f'{run_dir} has no checkpoint at step {absent[0]} (saved steps: '
                        f"{', '.join(map(str, steps)) or 'none'})")
    steps = wanted
  if not steps:
    raise ConfigError(f'{run_dir} has no saved checkpoint')
  folders = {s: os.path.join(run_dir, 'checkpoints', str(s)) for s in steps}
  return [Arm(f'step{s}', (f'init_from={folders[s]}',), run_dir, s, training_minutes(folders[s]))
          for s in steps]


def training_minutes(step_dir: str) -> float | None:
  """Minutes of training a budgeted run's clock had counted when it saved this step (the
  clock `train.max_minutes` runs on: the loop's time, compiles and evaluations included, the
  data preparation not); None where the step saved no clock."""
  elapsed = step_data_state(step_dir).get(CLOCK_KEY, {}).get('elapsed_s')
  return None if elapsed is None else round(float(elapsed) / 60, 2)


def checkpoint_steps(run_dir: str) -> list[int]:
  """The complete checkpoint steps of a run (Orbax's step folders; temporaries skipped)."""
  folder = os.path.join(run_dir, 'checkpoints')
  if not storage.isdir(folder):
    return []
  return sorted(int(n) for n in storage.listdir(folder) if n.isdigit())


def scratch_arm(run_dir: str) -> Arm:
  """The run's architecture (every field its config.json fixes) and tokenizer, no weights."""
  model = saved_config.read_saved(run_dir)['model']
  overrides = ['init_from=', f"data.tokenizer={os.path.join(run_dir, 'tokenizer')}"]
  overrides += [f'model.{k}={_text(model[k])}' for k in ARCHITECTURE_FIELDS
                if model[k] is not None]
  return Arm(SCRATCH, tuple(overrides), run_dir)


def _text(value) -> str:
  return str(value).lower() if isinstance(value, bool) else str(value)
