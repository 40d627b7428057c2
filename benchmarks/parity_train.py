"""Differential training test: our train step against Hugging Face's PyTorch BERT, step by step.

  python -m benchmarks.parity_train --size tiny --steps 100 [--no_nsp]
  python -m benchmarks.parity_train --recipe --steps 2500 --eval_every 500 --curves c.json \
      --plot curves.png
  python -m benchmarks.parity_train --plot_from c.json --plot curves.png   # redraw, no training

Both sides start from the same weights (ours, initialised by our code and exported by
`encoder.hf.bert.FAMILY.ours_to_hf`, the function behind `convert --to-hf`, into
`BertForPreTraining`, or `BertForMaskedLM` with `--no_nsp`) and train on the same batches from
our loader (`input_ids`, `segment_ids`, `input_mask`; masked positions become `labels`, -100
elsewhere; NSP labels), in float32. Ours is the step `launch.py` runs, set up as the trainer
sets it up (`encoder.train.run_setup.setup_steps`: the strategy `parallel` names, pmap by
default; `make_optimizer`; weights seeded by `train.seed`). Theirs is a plain PyTorch loop:
`torch.optim.AdamW` with the same betas, epsilon and weight decay, decay off for biases and
LayerNorm weights (Hugging Face Trainer's rule), `clip_grad_norm_`, and
`transformers.get_linear_schedule_with_warmup` stepped after each update. Per-step losses
(total, MLM, NSP) and the final parameters are compared.

Without `--recipe` the run is BERT's recipe at the experiment's sizes (post-LN, mask rate 0.15,
NSP weight 1), dropout is off and the warmup is a tenth of `--steps`, so the schedule reaches
both its warmup and its decay. With `--recipe` the experiment's own settings stand
(dropout included, each side with its own RNG) and only the length changes; `--eval_every`
then scores both sides on the held-out batches, for curves side by side.

The noise floor is what float32 summation order alone does: the same run of our code on 1 and
on 8 simulated CPU devices (a subprocess each, since XLA's device count is fixed at import), the
largest per-step relative difference of their total losses. Parity passes when every step's
total loss is within max(1e-4, 3 x noise floor) of Hugging Face's (relative) and every final
tensor within 1e-3 (||ours - theirs|| / ||theirs||). The output ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks.common.cli import print_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LOSS_KEYS = ('loss', 'mlm_loss', 'nsp_loss')


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--exp', default='mlm_nsp_tiny', help='the pretraining experiment')
  parser.add_argument('--size', default=None, help='model.size (default: the experiment\'s)')
  parser.add_argument('--steps', type=int, default=100)
  parser.add_argument('--no_nsp', action='store_true', help='MLM only (BertForMaskedLM)')
  parser.add_argument('--recipe', action='store_true',
                      help='keep the experiment\'s dropout and schedule (only the length changes)')
  parser.add_argument('--config', action='append', default=[], metavar='KEY=VALUE',
                      help='extra experiment override, applied last')
  parser.add_argument('--eval_every', type=int, default=0, help='held-out eval of both sides')
  parser.add_argument('--noise_devices', type=int, default=8,
                      help='devices of the second run of ours (0: no noise floor)')
  parser.add_argument('--workdir', default='runs/parity_train',
                      help='where the tokenizer and data cache live (reused between runs)')
  parser.add_argument('--curves', default='', help='write both sides\' per-step numbers here')
  parser.add_argument('--plot', default='',
                      help='draw both sides\' training loss and held-out accuracies (PNG)')
  parser.add_argument('--plot_from', default='', metavar='CURVES_JSON',
                      help='only redraw --plot from a --curves file written earlier')
  parser.add_argument('--_worker', type=int, default=0, help=argparse.SUPPRESS)
  parser.add_argument('--_out', default='', help=argparse.SUPPRESS)
  return parser.parse_args(argv)


def parity_config(args):
  """The experiment with the harness's overrides: the run both sides train."""
  from encoder import configs
  config = configs.load_experiment(args.exp)
  overrides = [f'train.num_steps={args.steps}', f'data.nsp={not args.no_nsp}',
               'train.grad_accum_steps=1', 'model.dtype=float32']
  if args.size:
    overrides.append(f'model.size={args.size}')
  if not args.recipe:  # BERT's recipe at the experiment's sizes, as Hugging Face runs it
    overrides += ['model.dropout_rate=0.0', 'model.attention_dropout_rate=0.0',
                  f'train.warmup_steps={max(1, args.steps // 10)}', 'model.norm=post',
                  'data.mask_rate=0.15', 'train.nsp_loss_weight=1.0']
  configs.apply_overrides(config, overrides + list(args.config))
  return config


def load_data(config, workdir: str):
  """Our pipeline (tokenizer, instances, masks), cached in `workdir`, and the resolved config."""
  from encoder.tasks import pretraining as task
  from encoder.train import resolve
  data = task.datasets(config, os.path.abspath(workdir))
  return data, resolve.resolve(resolve.resolve_config(config), task, data)


def check_supported(config) -> None:
  """What this harness compares: the plain BERT recipe a BertForPreTraining trainer can run."""
  m, t = config.model, config.train
  wanted = {'model.attention': (m.attention, 'bidirectional'), 'model.norm': (m.norm, 'post'),
            'train.optimizer': (t.optimizer, 'adamw'), 'train.schedule': (t.schedule, 'linear')}
  for key, (value, want) in wanted.items():
    if value != want:
      sys.exit(f'error: {key}={value}: the Hugging Face side runs only {key}={want} '
               f'(add --config {key}={want})')


# ----------------------------------------------------------------------------------------------
# Ours: a subprocess per device count.


def run_ours_worker(args) -> None:
  """Trains ours on `args._worker` devices; writes losses, evals and params to `args._out`."""
  import jax

  from encoder.hf import bert
  from encoder.modules.config import model_config
  from encoder.tasks import pretraining as task
  from encoder.train.run_setup import setup_steps
  assert jax.local_device_count() == args._worker, jax.devices()
  config = parity_config(args)
  data, config = load_data(config, args.workdir)
  run = setup_steps(config)
  strategy, state, train_step, eval_step = run.strategy, run.state, run.train_step, run.eval_step
  init = strategy.to_checkpoint(state).params
  batches = data.train_iterator()
  eval_batches = [strategy.place_batch(b) for b in data.eval_batches(config.train.eval_batches)]
  losses, evals, start = [], [], time.perf_counter()
  for step in range(args.steps):
    if args.eval_every and step % args.eval_every == 0:
      evals.append(_eval_ours(step, state, eval_step, eval_batches, strategy, task))
    state, sums = train_step(state, strategy.place_batch(next(batches)))
    losses.append(sums)  # device arrays: fetched once, at the end
  if args.eval_every:
    evals.append(_eval_ours(args.steps, state, eval_step, eval_batches, strategy, task))
  seconds = time.perf_counter() - start
  rows = [task.reduce_metrics(strategy.sum_metrics([s])) for s in jax.device_get(losses)]
  final = strategy.to_checkpoint(state).params
  cfg = model_config(config.model)
  out = {f'init/{k}': v for k, v in bert.FAMILY.ours_to_hf(jax.device_get(init), cfg)[0].items()}
  out.update({f'final/{k}': v for k, v in bert.FAMILY.ours_to_hf(jax.device_get(final),
                                                                    cfg)[0].items()})
  out.update({f'losses/{k}': np.array([r.get(k, np.nan) for r in rows]) for k in LOSS_KEYS})
  out['meta'] = np.array(json.dumps({'config': config.to_dict(), 'evals': evals,
                                     'seconds': seconds}))
  np.savez(args._out, **out)


def _eval_ours(step, state, eval_step, eval_batches, strategy, task) -> dict:
  sums = strategy.sum_metrics([eval_step(state.params, b) for b in eval_batches])
  return {'step': step, **task.reduce_metrics(sums)}


def run_ours(argv: list[str], devices: int, out: str) -> dict:
  """Our run on `devices` simulated CPU devices, in a fresh process (the flag precedes jax)."""
  flags = [f for f in os.environ.get('XLA_FLAGS', '').split()
           if not f.startswith('--xla_force_host_platform_device_count')]
  flags.append(f'--xla_force_host_platform_device_count={devices}')
  env = dict(os.environ, JAX_PLATFORMS='cpu', XLA_FLAGS=' '.join(flags))
  cmd = [sys.executable, '-m', 'benchmarks.parity_train', *argv, '--_worker', str(devices),
         '--_out', out]
  subprocess.run(cmd, env=env, check=True, cwd=ROOT)
  with np.load(out) as f:
    arrays = {k: f[k] for k in f.files}
  result = json.loads(str(arrays.pop('meta')))
  for group in ('init', 'final', 'losses'):
    result[group] = {k.split('/', 1)[1]: v for k, v in arrays.items() if k.startswith(group + '/')}
  return result


# ----------------------------------------------------------------------------------------------
# Theirs: Hugging Face in this process.


def hf_model(model_config: dict, nsp: bool, init: dict):
  """BertForPreTraining (BertForMaskedLM without NSP) built from config, holding `init`."""
  import torch
  import transformers
  m = model_config
  act = {'gelu': 'gelu', 'gelu_tanh': 'gelu_new'}[m['activation']]
  hf_config = transformers.BertConfig(
      vocab_size=m['vocab_size'], hidden_size=m['hidden_size'],
      num_hidden_layers=m['num_layers'], num_attention_heads=m['num_heads'],
      intermediate_size=m['intermediate_size'], hidden_act=act,
      max_position_embeddings=m['max_position_embeddings'], type_vocab_size=m['type_vocab_size'],
      hidden_dropout_prob=m['dropout_rate'],
      attention_probs_dropout_prob=m['attention_dropout_rate'],
      layer_norm_eps=m['layer_norm_eps'], initializer_range=m['initializer_range'])
  cls = transformers.BertForPreTraining if nsp else transformers.BertForMaskedLM
  model = cls._from_config(hf_config, attn_implementation='eager', dtype=torch.float32)
  state = {k: torch.from_numpy(np.array(v)) for k, v in init.items()}
  if not nsp:  # BertForMaskedLM has no pooler; ours keeps one that nothing trains
    state = {k: v for k, v in state.items() if not k.startswith('bert.pooler.')}
  missing, unexpected = model.load_state_dict(state, strict=False)
  tied = {'cls.predictions.decoder.weight', 'cls.predictions.decoder.bias'}
  if unexpected or set(missing) - tied:
    raise RuntimeError(f'weights do not fit: missing {missing}, unexpected {unexpected}')
  decoder = model.cls.predictions.decoder
  assert decoder.weight.data_ptr() == model.bert.embeddings.word_embeddings.weight.data_ptr()
  assert decoder.bias.data_ptr() == model.cls.predictions.bias.data_ptr()
  return model


def hf_optimizer(model, train: dict):
  """AdamW, decay off for biases and LayerNorm weights, linear warmup then decay to 0."""
  import torch
  import transformers
  params = dict(model.named_parameters())  # tied tensors once, under their first name
  no_decay = [n for n in params if n.endswith('bias') or 'LayerNorm' in n]
  groups = [{'params': [p for n, p in params.items() if n not in no_decay],
             'weight_decay': train['weight_decay']},
            {'params': [params[n] for n in no_decay], 'weight_decay': 0.0}]
  opt = torch.optim.AdamW(groups, lr=train['learning_rate'], betas=(train['b1'], train['b2']),
                          eps=train['eps'], foreach=False)
  schedule = transformers.get_linear_schedule_with_warmup(opt, train['warmup_steps'],
                                                          train['num_steps'])
  return opt, schedule


def hf_inputs(batch: dict) -> dict:
  """Our batch as BertForPreTraining's arguments: masked positions -> labels, -100 elsewhere."""
  import torch
  labels = np.full(batch['input_ids'].shape, -100, np.int64)
  rows, cols = np.nonzero(batch['masked_weights'] > 0)
  labels[rows, batch['masked_positions'][rows, cols]] = batch['masked_ids'][rows, cols]
  return {'input_ids': torch.from_numpy(batch['input_ids'].astype(np.int64)),
          'token_type_ids': torch.from_numpy(batch['segment_ids'].astype(np.int64)),
          'attention_mask': torch.from_numpy(batch['input_mask'].astype(np.int64)),
          'labels': torch.from_numpy(labels),
          'next_sentence_label': torch.from_numpy(batch['nsp_label'].astype(np.int64))}


def hf_losses(model, inputs: dict, nsp: bool):
  """HF's own total loss, and its MLM and NSP terms (the same CrossEntropyLoss, term by term)."""
  import torch
  kwargs = dict(inputs) if nsp else {k: v for k, v in inputs.items()
                                     if k != 'next_sentence_label'}
  out = model(**kwargs)
  vocab = model.config.vocab_size
  logits = out.prediction_logits if nsp else out.logits
  mlm = torch.nn.functional.cross_entropy(logits.view(-1, vocab), inputs['labels'].view(-1))
  nsp_loss = torch.nn.functional.cross_entropy(out.seq_relationship_logits,
                                               inputs['next_sentence_label']) if nsp else None
  return out, mlm, nsp_loss


def eval_hf(model, eval_batches: list, nsp: bool) -> dict:
  """Held-out metrics as our eval reports them: means over masked tokens and over sequences."""
  import torch
  sums = {'mlm_loss': 0.0, 'mlm_accuracy': 0.0, 'mlm_count': 0.0, 'nsp_loss': 0.0,
          'nsp_accuracy': 0.0, 'seq_count': 0.0}
  with torch.no_grad():
    for inputs in eval_batches:
      out, _, _ = hf_losses(model, inputs, nsp)
      logits = out.prediction_logits if nsp else out.logits
      mask = inputs['labels'] != -100
      picked, labels = logits[mask], inputs['labels'][mask]
      sums['mlm_loss'] += float(torch.nn.functional.cross_entropy(picked, labels,
                                                                  reduction='sum'))
      sums['mlm_accuracy'] += float((picked.argmax(-1) == labels).sum())
      sums['mlm_count'] += float(mask.sum())
      sums['seq_count'] += float(inputs['input_ids'].shape[0])
      if nsp:
        nsp_logits, nsp_labels = out.seq_relationship_logits, inputs['next_sentence_label']
        sums['nsp_loss'] += float(torch.nn.functional.cross_entropy(nsp_logits, nsp_labels,
                                                                    reduction='sum'))
        sums['nsp_accuracy'] += float((nsp_logits.argmax(-1) == nsp_labels).sum())
  result = {'mlm_loss': sums['mlm_loss'] / sums['mlm_count'],
            'mlm_accuracy': sums['mlm_accuracy'] / sums['mlm_count']}
  result['loss'] = result['mlm_loss']
  if nsp:
    result['nsp_loss'] = sums['nsp_loss'] / sums['seq_count']
    result['nsp_accuracy'] = sums['nsp_accuracy'] / sums['seq_count']
    result['loss'] += result['nsp_loss']
  return result


def run_hf(config: dict, init: dict, data, steps: int, eval_every: int) -> dict:
  """The same training in PyTorch: per-step losses, held-out evals, final parameters."""
  import torch
  torch.manual_seed(int(config['train']['seed']))
  nsp = bool(config['data']['nsp'])
  model = hf_model(config['model'], nsp, init)
  model.train()
  opt, schedule = hf_optimizer(model, config['train'])
  clip = config['train']['clip_norm']
  batches = data.train_iterator()
  eval_batches = [hf_inputs(b) for b in data.eval_batches(config['train']['eval_batches'])]
  losses, evals, start = {k: [] for k in LOSS_KEYS}, [], time.perf_counter()
  for step in range(steps + 1):
    if eval_every and (step % eval_every == 0 or step == steps):
      model.eval()
      evals.append({'step': step, **eval_hf(model, eval_batches, nsp)})
      model.train()
    if step == steps:
      break
    out, mlm, nsp_loss = hf_losses(model, hf_inputs(next(batches)), nsp)
    weight = config['train'].get('nsp_loss_weight', 1.0)
    (out.loss if not nsp or weight == 1.0 else mlm + weight * nsp_loss).backward()
    if clip:
      torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    schedule.step()
    opt.zero_grad(set_to_none=True)
    losses['loss'].append(float(out.loss.detach()))
    losses['mlm_loss'].append(float(mlm.detach()))
    losses['nsp_loss'].append(float(nsp_loss.detach()) if nsp else np.nan)
  final = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
  return {'losses': {k: np.array(v) for k, v in losses.items()}, 'final': final,
          'evals': evals, 'seconds': time.perf_counter() - start}


# ----------------------------------------------------------------------------------------------
# The comparison.


def relative(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """|a - b| / |b| elementwise (per step)."""
  return np.abs(a - b) / np.maximum(np.abs(b), 1e-30)


# Softmax ignores a shift shared by a query's scores, and q . b_key shifts them all alike: the key
# bias has a zero gradient in exact arithmetic. It starts at zero and each side moves it by its
# own rounding noise only (norms ~3e-7 after 100 steps), which Adam normalises into steps of
# either sign, so a relative difference means nothing there. These tensors are checked to stay
# near zero instead (`max_inert_norm`), which shows they change nothing.
INERT = ('attention.self.key.bias',)
INERT_LIMIT = 1e-4


def param_differences(ours: dict, theirs: dict) -> dict[str, float]:
  """||ours - theirs|| / ||theirs|| for every tensor both sides have (inert ones aside)."""
  out = {}
  for name, value in ours.items():
    if name in theirs and not name.endswith(INERT):
      ref = np.asarray(theirs[name], np.float64)
      out[name] = float(np.linalg.norm(value - ref) / max(np.linalg.norm(ref), 1e-30))
  return out


def compare(ours: dict, noise: dict | None, theirs: dict, steps: int) -> dict:
  o, t = ours['losses'], theirs['losses']
  diffs = {k: relative(o[k], t[k]) for k in LOSS_KEYS if not np.isnan(t[k]).all()}
  noise_floor = float(relative(noise['losses']['loss'], o['loss']).max()) if noise else None
  params = param_differences(ours['final'], theirs['final'])
  worst = max(params, key=params.get)
  inert = [np.linalg.norm(side[n]) for side in (ours['final'], theirs['final'])
           for n in side if n.endswith(INERT)]
  tolerance = max(1e-4, 3 * (noise_floor or 0.0))
  result = {'steps': steps, 'nsp': 'nsp_loss' in diffs,
            'max_rel_loss_diff': float(diffs['loss'].max()),
            'max_rel_mlm_loss_diff': float(diffs['mlm_loss'].max()),
            'max_rel_nsp_loss_diff': float(diffs['nsp_loss'].max()) if 'nsp_loss' in diffs
            else None,
            'worst_loss_step': int(diffs['loss'].argmax()),
            'max_rel_param_diff': params[worst], 'worst_param': worst,
            'max_inert_norm': float(max(inert, default=0.0)),
            'noise_floor': noise_floor, 'loss_tolerance': tolerance,
            'ours_final_loss': float(o['loss'][-1]), 'hf_final_loss': float(t['loss'][-1]),
            'ours_s': round(ours['seconds'], 1), 'hf_s': round(theirs['seconds'], 1)}
  result['param_diffs'] = params
  result['pass'] = bool(result['max_rel_loss_diff'] <= tolerance
                        and result['max_rel_param_diff'] <= 1e-3
                        and result['max_inert_norm'] <= INERT_LIMIT)
  return result


def _smooth(values, window: int) -> np.ndarray:
  """Trailing mean over `window` steps: per-step losses of one batch each are too noisy to
  compare two curves by eye."""
  values = np.asarray(values, np.float64)
  sums = np.cumsum(np.concatenate([[0.0], values]))
  lo = np.maximum(np.arange(1, len(values) + 1) - window, 0)
  return (sums[1:] - sums[lo]) / (np.arange(1, len(values) + 1) - lo)


def plot_curves(curves: dict, path: str) -> None:
  """Both frameworks side by side: smoothed training MLM and NSP loss, then held-out MLM and
  NSP accuracy at each eval (when the run evaluated)."""
  from matplotlib.figure import Figure
  evals = bool(curves.get('ours_evals'))
  fig = Figure(figsize=(11, 4.2 if not evals else 7.5), layout='constrained')
  axes = fig.subplots(2 if evals else 1, 2, squeeze=False)
  sides = (('ours', 'ours (JAX)', 'tab:blue'), ('hf', 'Hugging Face (PyTorch)', 'tab:orange'))
  window = max(1, len(curves['ours']['loss']) // 50)
  for ax, key in zip(axes[0], ('mlm_loss', 'nsp_loss'), strict=True):
    for side, label, color in sides:
      if key in curves[side]:
        ax.plot(_smooth(curves[side][key], window), color=color, label=label, lw=1.2)
    ax.set_title(f'training {key.replace("_", " ")} (mean of {window} steps)', fontsize=10)
  if evals:
    for ax, key in zip(axes[1], ('mlm_accuracy', 'nsp_accuracy'), strict=True):
      for side, label, color in sides:
        points = [(e['step'], e[key]) for e in curves[f'{side}_evals'] if key in e]
        if points:
          ax.plot(*zip(*points, strict=True), marker='o', color=color, label=label)
      ax.set_title(f'held-out {key.replace("_", " ")}', fontsize=10)
  for ax in axes.flat:
    ax.set_xlabel('step')
    ax.grid(alpha=0.3)
    if ax.lines:
      ax.legend(fontsize=8)
  fig.savefig(path, dpi=110)


def main(argv=None):
  argv = list(sys.argv[1:] if argv is None else argv)
  args = parse_args(argv)
  if args._worker:
    return run_ours_worker(args)
  if args.plot_from:
    if not args.plot:
      sys.exit('error: --plot_from needs --plot PATH for the image')
    with open(args.plot_from, encoding='utf-8') as f:
      plot_curves(json.load(f), args.plot)
    print(f'wrote {args.plot}')
    return None
  try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
  except ImportError as e:
    sys.exit(f'error: the Hugging Face side needs torch and transformers ({e})')
  config = parity_config(args)
  check_supported(config)
  print(f'# load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs', flush=True)
  data, _ = load_data(config, args.workdir)  # builds the cache the workers then read
  with tempfile.TemporaryDirectory() as tmp:
    ours = run_ours(argv, 1, os.path.join(tmp, 'ours1.npz'))
    noise = (run_ours(argv, args.noise_devices, os.path.join(tmp, 'ours_n.npz'))
             if args.noise_devices else None)
  theirs = run_hf(ours['config'], ours['init'], data, args.steps, args.eval_every)
  result = compare(ours, noise, theirs, args.steps)
  every = max(1, args.steps // 10)
  rows = [{'step': s, **{f'ours_{k}': float(ours['losses'][k][s]) for k in LOSS_KEYS},
           **{f'hf_{k}': float(theirs['losses'][k][s]) for k in LOSS_KEYS},
           'rel': float(relative(ours['losses']['loss'][s:s + 1],
                                 theirs['losses']['loss'][s:s + 1])[0])}
          for s in [*range(0, args.steps, every), args.steps - 1]]
  columns = [('step', 'step', '5.0f'), ('ours loss', 'ours_loss', '10.5f'),
             ('HF loss', 'hf_loss', '10.5f'), ('ours MLM', 'ours_mlm_loss', '9.5f'),
             ('HF MLM', 'hf_mlm_loss', '9.5f'), ('ours NSP', 'ours_nsp_loss', '9.5f'),
             ('HF NSP', 'hf_nsp_loss', '9.5f'), ('rel diff', 'rel', '9.2e')]
  print_table(rows, [c for c in columns if result['nsp'] or 'NSP' not in c[0]])
  if args.eval_every:
    evals = [{'step': a['step'], **{f'ours_{k}': a.get(k, np.nan) for k in a},
              **{f'hf_{k}': b.get(k, np.nan) for k in b}}
             for a, b in zip(ours['evals'], theirs['evals'], strict=True)]
    print_table(evals, [('step', 'step', '5.0f'), ('ours MLM acc', 'ours_mlm_accuracy', '.4f'),
                        ('HF MLM acc', 'hf_mlm_accuracy', '.4f'),
                        ('ours NSP acc', 'ours_nsp_accuracy', '.4f'),
                        ('HF NSP acc', 'hf_nsp_accuracy', '.4f')])
  curves = {'result': result, 'config': ours['config'],
            'ours': {k: v.tolist() for k, v in ours['losses'].items()},
            'hf': {k: v.tolist() for k, v in theirs['losses'].items()},
            'ours_evals': ours['evals'], 'hf_evals': theirs['evals']}
  if args.curves:
    with open(args.curves, 'w', encoding='utf-8') as f:
      json.dump(curves, f)
  if args.plot:
    plot_curves(curves, args.plot)
  diffs = result.pop('param_diffs')
  worst = sorted(diffs, key=diffs.get, reverse=True)[:6]
  print_table([{'name': n, 'diff': diffs[n], 'norm': float(np.linalg.norm(theirs['final'][n]))}
               for n in worst], [('rel param diff', 'diff', '14.3e'),
                                 ('||theirs||', 'norm', '10.3e'), ('tensor', 'name', '>60')])
  print(json.dumps(result), flush=True)
  return result


if __name__ == '__main__':
  main()
