"""BERT-base's bf16 train step on one GPU: its profile, then its variants beside Hugging Face's,
for a short borrowed GPU slot.

  bash benchmarks/gpu.sh              # on the GPU host (see gpu.sh)
  bash benchmarks/gpu.sh --rehearse   # here, on CPU at tiny sizes: the same code paths
  python -m benchmarks.gpu_step [--rehearse] [--budget_s S] [--keep_trace DIR]

In one call, sequence 128, bfloat16, BERT's recipe (dropout 0.1 on hidden states and attention
probabilities, `model.attention_impl=auto`, threefry, the state donated), each line JSON and
flushed as it comes:

1. the GPU's bf16 matmul ceiling (an 8192^3 product through the model's own matmul);
2. the profile: the batch-128 step under `jax.profiler` (`common/profiled_step.py`; compiled
   without command buffers so that each kernel names its HLO op), its device time by op
   category (`common/xla_trace.py`'s, as `benchmarks.step_profile` on CPU) against the step
   time, with the device's idle time, the phases and the largest ops, as a JSON line and a
   table;
3. the attention alone (`common/attention_kernels.py`) at the batch-128 shape, forward and
   backward by kernel, cuDNN's fused kernel with dropout among them (JAX's internal API; an
   `error` where this jax or machine lacks it), with a check of each one's dropout;
4. the variants (`VARIANTS`), each config overrides on the recipe (`train.rng_impl`,
   `model.attention_impl` from `ATTENTION_IMPLS`, `model.remat`, batch 256 and 512, attention
   dropout off) or the state not donated, one JSON line each with `python -m
   benchmarks.train_step`'s keys (seq/s, MFU against the ceiling, ...), `forms` (the form each
   kind of layer ran, from `attention.layer_form`, as the run's log says it), `vs_recipe` (its
   seq/s over the recipe's at batch 128) and, where Hugging Face runs beside it,
   `BertForPreTraining` (SDPA, torch AdamW, bf16 autocast) on the same batch with `ratio` = its
   step time over ours. A variant that would run what one before it ran (the same forms at the
   same batch, nothing else changed: `model.attention_impl=explicit` where the recipe's cuDNN
   is refused for its dropout and runs the explicit form) is a `skipped` line that names that
   one; one that fails (out of memory) is an `error` line, and the run goes on;
5. a closing table.

LayerNorm and softmax: Flax's nn.LayerNorm with dtype=bfloat16 (encoder/modules/layers.py)
already computes its statistics in float32 from bfloat16 inputs and returns bfloat16, and the
explicit attention's softmax runs in float32 on bfloat16 scores and hands bfloat16
probabilities to the second product: no variant changes them; the profile shows their cost.

Time: the call must fit a slot of 8 minutes. The plan's `budget_s` bounds this script: a variant
whose expected cost (the longest of its kind so far, a guess before the first) would cross it is
skipped with an `error`, so the call ends with every line printed. Estimates for an H100 or
H200, from the last run (6 configurations of ours and HF in under 6 minutes on an H200, about
55 s each): JAX start and ceiling 20 s; the profile 80 s (a compile without command buffers,
3 + 3 + 10 steps, the trace written and read); the attention alone 15 s; a variant of ours 40 s
(its compile, 30 timed steps), with HF 60 s. The ten variants then need about 8 minutes: the
last (in priority order) may be skipped on a cold machine; JAX's persistent compilation cache
(gpu.sh keeps it under $TMPDIR) lets a second call on the same machine skip the compiles.
"""

from __future__ import annotations

import argparse
import gc
import json
import time

import jax

from benchmarks.common import attention_kernels
from benchmarks.common.cli import print_machine, print_table
from benchmarks.common.profiled_step import GPU_PROFILE_OPTIONS, ProfiledStep, print_profile
from benchmarks.common.profiled_step import summary as profile_summary
from benchmarks.common.step_timing import Ceiling, measure, torch_available
from benchmarks.common.synthetic import bench_config, random_batch
from encoder.modules.attention import forms_by_layer_kind
from encoder.tasks import pretraining as task

FULL = dict(size='base', seq=128, vocab=30522, batches=(128, 256, 512), steps=10, rounds=3,
            ceiling=(8192, 8192, 8192), profile_steps=3, profile_warmup=3, profile_timed=10,
            attention_repeats=20, budget_s=420, guess_s={'ours': 40, 'hf': 60, 'profile': 80})
REHEARSAL = dict(size='tiny', seq=32, vocab=1024, batches=(8, 16, 32), steps=1, rounds=1,
                 ceiling=(256, 256, 256), profile_steps=2, profile_warmup=1, profile_timed=2,
                 attention_repeats=2, budget_s=1200, guess_s={'ours': 15, 'hf': 20,
                                                              'profile': 20})
RECIPE = ('model.attention_dropout_rate=0.1', 'model.attention_impl=auto')

# The model.attention_impl values run as variants beside the recipe's `auto` (one that runs
# the recipe's forms is skipped). Blockwise runs in tiles of half the row: at its default of
# 256 a 128-token row takes the explicit form (`attention.layer_form`), the recipe's.
ATTENTION_IMPLS = ('explicit', 'blockwise')
IMPL_OVERRIDES = {'blockwise': ('model.attention_block_size={half_row}',)}
# name: (what it changes, config overrides on the recipe, batch (index into the plan's
# batches), Hugging Face beside it, state donated). In priority order: the budget cuts the last.
VARIANTS = {
    'recipe': ("BERT's recipe: threefry, attention auto, state donated", (), 0, True, True),
    'rbg': ('train.rng_impl=rbg', ('train.rng_impl=rbg',), 0, False, True),
    'unsafe_rbg': ('train.rng_impl=unsafe_rbg', ('train.rng_impl=unsafe_rbg',), 0, False, True),
    'batch_256': ('batch 256', (), 1, True, True),
    **{f'attention_{impl}': (f'model.attention_impl={impl}', (f'model.attention_impl={impl}',
                                                              *IMPL_OVERRIDES.get(impl, ())),
                             0, False, True) for impl in ATTENTION_IMPLS},
    'no_donate': ('the state not donated to the step', (), 0, False, False),
    'remat': ('model.remat=true (each encoder block rematerialised)', ('model.remat=true',), 0,
              False, True),
    'batch_512': ('batch 512', (), 2, True, True),
    'no_attention_dropout': ('attention dropout 0 (fused kernels need no mask)',
                             ('model.attention_dropout_rate=0.0',), 0, False, True),
}
# The attention alone (common/attention_kernels.py): cuDNN's fused kernel with dropout beside
# the model's explicit form and the dropout-free kernels.
ATTENTION_KERNELS = ('explicit', 'cudnn_dropout', 'cudnn', 'xla')


class Budget:
  """Seconds left for the call; what each kind of work has cost so far (the longest)."""

  def __init__(self, seconds: float, guesses: dict):
    self.start, self.seconds, self.cost = time.perf_counter(), seconds, dict(guesses)
    self.measured = set()

  def elapsed(self) -> float:
    return time.perf_counter() - self.start

  def allows(self, kind: str) -> bool:
    return self.elapsed() + self.cost[kind] <= self.seconds

  def spent(self, kind: str, seconds: float) -> None:
    known = self.cost[kind] if kind in self.measured else 0.0
    self.cost[kind] = max(known, seconds)
    self.measured.add(kind)


def _error(e: Exception) -> str:
  text = str(e).splitlines()[0][:300] if str(e) else ''
  return f'{type(e).__name__}: {text}' if text else type(e).__name__


def run_profile(plan: dict, keep_trace: str = '') -> tuple[dict, object]:
  """The batch-128 recipe step profiled (see the module docstring); its row and HLO index."""
  batch = plan['batches'][0]
  config = bench_config(plan['size'], plan['seq'], batch, 'bfloat16', plan['vocab'], RECIPE)
  options = GPU_PROFILE_OPTIONS if jax.default_backend() == 'gpu' else None
  step = ProfiledStep(config, random_batch(config, batch), options)
  for _ in range(plan['profile_warmup']):
    step.step()
  profiled = step.profile(plan['profile_steps'], keep_trace or None)
  row = {'profile': True, 'variant': 'recipe', 'batch': batch,
         'what': "BERT's recipe" + (', no command buffers' if options else ''),
         'attention_impl': task.build_model(config).config.attention_impl,
         'forms': forms_ran(config),
         'platform': jax.default_backend(), 'compile_s': round(step.compile_s, 2),
         'profiled_steps': plan['profile_steps'],
         **profile_summary(step.times_ms(plan['profile_timed']), profiled)}
  row['seq_per_s'] = batch / row['step_ms'] * 1e3  # the unprofiled step, no command buffers
  return row, step.hlo


def forms_ran(config) -> str:
  """The form each kind of layer runs in this config's train step (`attention.layer_form`),
  as the run's log says it: `global explicit`, `global cudnn, local blockwise`."""
  forms = forms_by_layer_kind(task.build_model(config).config, config.data.max_seq_length,
                              packed=False, training=True)
  return ', '.join(f'{kind} {form}' for kind, form in forms.items())


def variant_overrides(name: str, plan: dict) -> list[str]:
  """The recipe's overrides and the variant's, for the plan's row length."""
  return [*RECIPE, *(o.format(half_row=plan['seq'] // 2) for o in VARIANTS[name][1])]


def variant_config(name: str, plan: dict):
  batch = plan['batches'][VARIANTS[name][2]]
  return bench_config(plan['size'], plan['seq'], batch, 'bfloat16', plan['vocab'],
                      variant_overrides(name, plan))


def what_runs(name: str, plan: dict) -> tuple:
  """What a variant's step computes: its batch, donation, forms and every override but those
  that only pick the forms (the attention's implementation, and its tiles where no layer runs
  blockwise). Two variants alike in this run the same program."""
  _, _, batch_index, _, donate = VARIANTS[name]
  forms = forms_ran(variant_config(name, plan))
  picks = ('model.attention_impl=',) + (() if 'blockwise' in forms
                                         else ('model.attention_block_size=',))
  others = tuple(o for o in variant_overrides(name, plan) if not o.startswith(picks))
  return plan['batches'][batch_index], donate, forms, others


def run_variant(name: str, plan: dict, compare: str) -> dict:
  what, _, batch_index, hf, donate = VARIANTS[name]
  batch = plan['batches'][batch_index]
  overrides = variant_overrides(name, plan)
  row = {'variant': name, 'what': what, 'batch': batch, 'overrides': overrides[len(RECIPE):],
         'platform': jax.default_backend()}
  config = variant_config(name, plan)
  row['attention_dropout'] = config.model.attention_dropout_rate
  row['attention_impl'] = task.build_model(config).config.attention_impl
  row['forms'] = forms_ran(config)
  row['rng_impl'] = config.train.rng_impl
  args = argparse.Namespace(seq=plan['seq'], batch=batch, dtype='bfloat16', vocab=plan['vocab'],
                            config=overrides, ceiling_shape=plan['ceiling'],
                            rounds=plan['rounds'], steps=plan['steps'],
                            compare=compare if hf else 'none', donate=donate)
  row.update(measure(plan['size'], args))
  return row


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rehearse', action='store_true', help='tiny sizes, any device')
  parser.add_argument('--budget_s', type=float, default=0.0,
                      help="seconds for the whole call (0: the plan's)")
  parser.add_argument('--keep_trace', default='', help="a folder to keep the profile's trace in")
  args = parser.parse_args(argv)
  plan = REHEARSAL if args.rehearse else FULL
  budget = Budget(args.budget_s or plan['budget_s'], plan['guess_s'])
  print_machine()
  ceiling = Ceiling(*plan['ceiling'], 'bfloat16').measure()
  print(json.dumps({'ceiling_tflops': round(ceiling / 1e12, 2),
                    'ceiling_shape': plan['ceiling']}), flush=True)
  compare = 'torch' if torch_available() else 'none'
  if compare == 'none':
    print('# torch/transformers not importable: the Hugging Face half is skipped', flush=True)

  started = time.perf_counter()
  try:
    profile, hlo = run_profile(plan, args.keep_trace)
  except Exception as e:  # noqa: BLE001 - the variants still run
    profile, hlo = {'profile': True, 'variant': 'recipe', 'error': _error(e)}, None
  budget.spent('profile', time.perf_counter() - started)
  print(json.dumps(_rounded(profile)), flush=True)
  if 'error' not in profile:
    print_profile(_rounded(profile), hlo)
  del hlo
  gc.collect()

  results = run_attention(plan)
  results += run_variants(plan, compare, budget)
  print_summary(results)
  return [profile, *results]


def run_attention(plan: dict) -> list[dict]:
  """The attention alone at the profiled batch's shape, one JSON line per kernel."""
  batch = plan['batches'][0]
  model = task.build_model(bench_config(plan['size'], plan['seq'], batch, 'bfloat16',
                                        plan['vocab'], RECIPE)).config
  shape = (batch, plan['seq'], model.num_heads, model.head_dim)  # [b, t, n, h]
  rows = []
  for name in ATTENTION_KERNELS:
    rows.append(attention_kernels.measure(name, 0.1, shape, plan['attention_repeats']))
    print(json.dumps(rows[-1]), flush=True)
  return rows


def run_variants(plan: dict, compare: str, budget: Budget) -> list[dict]:
  """Every variant in order, one JSON line each, while the budget allows; one that would
  run what a variant before it ran is skipped, its line naming that one."""
  results, ran = [], {}
  for name in VARIANTS:
    kind = 'hf' if VARIANTS[name][3] and compare == 'torch' else 'ours'
    same = ran.setdefault(what_runs(name, plan), name)
    if same != name:
      batch, _, forms, _ = what_runs(name, plan)
      row = {'variant': name, 'what': VARIANTS[name][0], 'batch': batch, 'forms': forms,
             'skipped': f'runs what {same} ran: {forms} at batch {batch}'}
    elif not budget.allows(kind):
      row = {'variant': name, 'what': VARIANTS[name][0],
             'error': f'skipped: the {budget.seconds:.0f} s budget would run out '
             f'({budget.elapsed():.0f} s spent, about {budget.cost[kind]:.0f} s needed)'}
    else:
      started = time.perf_counter()
      try:  # one failure (out of memory, a refused field) must not cost the slot the others
        row = run_variant(name, plan, compare)
        budget.spent(kind, time.perf_counter() - started)
      except Exception as e:  # noqa: BLE001 - reported as a JSON line, the run goes on
        row = {'variant': name, 'what': VARIANTS[name][0], 'error': _error(e)}
      gc.collect()
    recipe = [r for r in [*results, row] if r['variant'] == 'recipe' and 'seq_per_s' in r]
    if recipe and 'seq_per_s' in row:
      row['vs_recipe'] = round(row['seq_per_s'] / recipe[0]['seq_per_s'], 3)
    results.append(row)
    print(json.dumps(row), flush=True)
  return results


def print_summary(results: list[dict]) -> None:
  print_table([r for r in results if not r['variant'].startswith('attention:')], [
      ('variant', 'variant', '>20'), ('batch', 'batch', '>5'), ('impl', 'attention_impl', '>9'),
      ('forms', 'forms', '>24'),
      ('rng', 'rng_impl', '>10'), ('seq/s', 'seq_per_s', '9.1f'), ('MFU', 'mfu', '6.1%'),
      ('vs recipe', 'vs_recipe', '9.2f'), ('HF seq/s', 'torch_seq_per_s', '9.1f'),
      ('HF MFU', 'torch_mfu', '7.1%'), ('HF/ours', 'ratio', '7.2f')])
  print('\nattention alone, forward + backward, ms (dropout check: dropped fraction, pass)')
  for r in results:
    if r['variant'].startswith('attention:'):
      check = r.get('dropout_check')
      print(f"  {r['variant']:<26}{r.get('fwd_bwd_ms', float('nan')):9.3f}  "
            + (f"{check['dropped_fraction']:.4f} {check['pass']}" if check else '')
            + (f"  {r['error']}" if 'error' in r else ''))


def _rounded(x):
  if isinstance(x, float):
    return round(x, 3)
  if isinstance(x, dict):
    return {k: _rounded(v) for k, v in x.items()}
  if isinstance(x, list):
    return [_rounded(v) for v in x]
  return x


if __name__ == '__main__':
  main()
