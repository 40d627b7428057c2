"""Hugging Face directories <-> our workdirs, without torch (safetensors' numpy API).

  python -m encoder.convert --from-hf DIR --out WORKDIR  # config.json, safetensors, and
                                                          # vocab.txt (BERT) or tokenizer.json
  python -m encoder.convert --from-hf hf://ORG/NAME[@REVISION] [--out WORKDIR]
                                                          # from the Hub; without --out into
                                                          # the cache encoder.load reads
  python -m encoder.convert --to-hf WORKDIR --out DIR     # BertForPreTraining, or
                                                          # ModernBertForMaskedLM for RoPE models

A fine-tuned run (config task classification, tagging or span_qa) exports as the family's
...ForSequenceClassification, ...ForTokenClassification or ...ForQuestionAnswering with its
label names, and such a directory imports with its head: the workdir's config then says the
task and labels as a run of ours does (encoder/hf/heads.py), so classify/tag/answer run it.

A converted workdir holds config.json (the schema's pretraining config with the model's numbers,
or the task's fine-tuning config), tokenizer/ and checkpoints/0/params: `encoder.load(WORKDIR)`
reads it, and `--config.init_from=WORKDIR` starts training from it. It has no optimizer state,
so it is a starting point, not a run to resume. Only safetensors weights are read (not
pytorch_model.bin). A model on the Hub, hf://ORG/NAME[@REVISION], is downloaded through
huggingface_hub (only the files read here: encoder/hf/hub.py) and converted once per commit
into a cache of ours (`from_hub`, encoder/hub_cache.py) that `encoder.load`, `init_from` and
`python -m encoder.embed --model` read by the same name.

Each Hugging Face family is one file in encoder/hf/ implementing encoder.hf.family.Family, and
one line of FAMILIES below; this file does what they share. JAX is imported only once a
conversion runs, so --help and the refusals of a config.json answer at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import numpy as np

from encoder import configs, hub_cache, orbax_s3, storage
from encoder.errors import CheckpointError, EncoderError
from encoder.hf import bert, electra, heads, hub, modernbert, sentence_transformers
from encoder.hf.family import Family, read_json

# In the order they are asked: the first that recognises a config.json (from_hf), or that
# writes our model (to_hf), converts it.
FAMILIES: tuple[Family, ...] = (electra.FAMILY, bert.FAMILY, modernbert.FAMILY)


def _listed(names) -> str:
  names = list(names)
  return ', '.join(names[:-1]) + ' or ' + names[-1] if len(names) > 1 else names[0]


def family_of(hf: dict) -> Family:
  """The family whose config.json `hf` is, or a one-line refusal naming its model_type."""
  known = _listed(f.name for f in FAMILIES)
  if not isinstance(hf, dict):
    raise CheckpointError(f'the config.json is not a JSON object: it is not a {known} config')
  for family in FAMILIES:
    if family.recognises(hf):
      return family
  architectures = ', '.join(a for f in FAMILIES for a in f.architectures)
  raise CheckpointError(f"model_type '{hf.get('model_type')}' is not {known}: only those "
                        f'checkpoints convert ({architectures})')


def model_fields(hf: dict) -> dict:
  """A Hugging Face config.json -> our `config.model` fields; refuses what we cannot express."""
  return family_of(hf).model_fields(hf)


def read_safetensors(directory: str) -> dict[str, np.ndarray]:
  """Every tensor of model.safetensors (or its shards)."""
  from safetensors.numpy import load, load_file
  files = sorted(storage.glob(os.path.join(directory, 'model*.safetensors')))
  if not files:
    other = [n for n in ('pytorch_model.bin', 'tf_model.h5') if
             storage.exists(os.path.join(directory, n))]
    hint = f' (found {other[0]}: re-save it with safe_serialization=True)' if other else ''
    raise CheckpointError(f"'{directory}' has no model.safetensors{hint}")
  tensors = {}
  for path in files:
    try:
      tensors.update(load(storage.read_bytes(path)) if storage.is_remote(path) else
                     load_file(path))
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
      first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
      raise CheckpointError(f"cannot read '{path}' ({first}): is it a complete safetensors "
                            'file?') from None
  return tensors


def _write_params(workdir: str, params: dict) -> None:
  """Step 0 in the Checkpointer layout (the `params` item only), committed atomically."""
  import orbax.checkpoint as ocp

  directory = os.path.join(workdir, 'checkpoints')
  options = orbax_s3.manager_options(directory, create=True, enable_async_checkpointing=False)
  manager = ocp.CheckpointManager(directory, options=options)
  manager.save(0, args=ocp.args.Composite(params=ocp.args.StandardSave(params)))
  manager.wait_until_finished()
  manager.close()


def _convert_weights(family: Family, tensors: dict, fields: dict, task: str | None = None,
                     num_labels: int = 0) -> tuple[dict, list[str]]:
  """The family's hf_to_ours, with weights that contradict config.json refused in one line."""
  try:
    params, absent = family.hf_to_ours(tensors, fields, task)
  except (ValueError, TypeError, KeyError) as e:
    raise CheckpointError(f'the weights do not fit config.json ({str(e)[:160]})') from None
  groups = ('encoder', heads.GROUPS[task]) if task else ('encoder',)
  _check_shapes({g: params[g] for g in groups}, fields, task, num_labels)
  return params, absent


def _check_shapes(converted: dict, fields: dict, task: str | None, num_labels: int) -> None:
  """Every converted encoder (and `task` head) weight has the shape config.json implies (else
  load() would fail later, far from the cause)."""
  import flax.linen as nn
  import jax

  from encoder.modules import task_models  # lazy: JAX loads only when converting
  from encoder.modules.config import model_config  # lazy: as above
  from encoder.modules.transformer import Encoder  # lazy: as above

  cfg, ids = model_config(fields), np.zeros((1, 2), np.int32)
  if task is None:
    init = lambda: {'encoder': Encoder(cfg).init(jax.random.key(0), ids, ids, ids)['params']}  # noqa: E731
  else:
    module = (task_models.BertForQuestionAnswering(cfg) if task == 'span_qa' else
              task_models.BertForClassification(cfg, num_labels) if task == 'classification'
              else task_models.BertForTagging(cfg, num_labels))
    batch = {'input_ids': ids, 'segment_ids': ids, 'input_mask': ids + 1}
    init = lambda: module.init(jax.random.key(0), batch)['params']  # noqa: E731
  expected = jax.eval_shape(lambda: nn.unbox(init()))
  flat = dict(jax.tree_util.tree_flatten_with_path(expected)[0])
  for path, value in jax.tree_util.tree_flatten_with_path(converted)[0]:
    want = flat.get(path)
    if want is None or tuple(want.shape) != tuple(np.shape(value)):
      name = '/'.join(str(getattr(k, 'key', k)) for k in path)
      raise CheckpointError(f"the weight {name} has shape {np.shape(value)} but config.json "
                            f"implies {None if want is None else tuple(want.shape)}")


def _fresh_pooler(fields: dict) -> dict:
  """A newly initialised pooler, for checkpoints that have none (BertForMaskedLM)."""
  import flax.linen as nn
  import jax

  from encoder.modules.config import model_config  # lazy: JAX loads only when converting
  from encoder.modules.layers import dense  # lazy: as above

  cfg = model_config(fields)
  layer = dense(cfg, cfg.hidden_size, ('embed', 'embed_out'), 'pooler')
  variables = layer.init(jax.random.key(0), np.zeros((1, cfg.hidden_size), np.float32))
  return jax.tree.map(np.asarray, nn.unbox(variables)['params'])


def _check_out(out: str) -> None:
  storage.check_bucket(out)
  if storage.exists(out) and (not storage.isdir(out) or storage.listdir(out)):
    raise CheckpointError(f"'{out}' already exists and is not empty: choose a new --out")


def recognise(hf_dir: str) -> tuple[str, dict | None, dict, Family]:
  """What --from-hf reads of a directory before its weights: (the folder of the model's own
  files, a sentence-transformers pipeline's `embed` fields or None, its config.json, its
  family), or the one-line refusal of a pipeline, a missing config.json or a family no
  converter reads."""
  embed = None
  if sentence_transformers.is_sentence_transformers(hf_dir):
    hf_dir, embed = sentence_transformers.read(hf_dir)
  if not storage.isfile(os.path.join(hf_dir, 'config.json')):
    raise CheckpointError(f"'{hf_dir}' has no config.json: give a Hugging Face "
                          f'{_listed(f.name for f in FAMILIES)} directory')
  hf = read_json(os.path.join(hf_dir, 'config.json'))
  return hf_dir, embed, hf, family_of(hf)


def _model_folder(hf_dir: str) -> str:
  """`recognise` with the family's refusals of config.json's fields: what a Hub download
  checks before it fetches any weights (encoder/hf/hub.py)."""
  model_dir, _, hf, family = recognise(hf_dir)
  family.model_fields(hf)
  return model_dir


def from_hub(text: str, refresh: bool = False) -> tuple[hub_cache.HubModel, list[str]]:
  """(The workdir of Hub model `text`, hf://ORG/NAME[@REVISION], notes for the user): its
  conversion in our cache (encoder/hub_cache.py), read without the network; else the files
  from_hf reads downloaded (encoder/hf/hub.py) and converted once per commit. `refresh`: ask
  the Hub (or, offline, huggingface_hub's cache) which commit a branch is at, even where a
  conversion of it is cached."""
  name = hub_cache.parse_name(text)
  found = None if refresh else hub_cache.cached(name)
  if found is not None:
    return found, []
  snapshot = hub.download(name, _model_folder)
  found, notes = hub_cache.cached(hub_cache.HubName(name.repo_id, snapshot.commit)), []
  if found is None:
    target = hub_cache.workdir_path(name.repo_id, snapshot.commit)
    with hub_cache.placing(name.repo_id, snapshot.commit) as partial:
      notes = from_hf(snapshot.directory, partial)
      config_path = os.path.join(partial, 'config.json')
      config = json.loads(storage.read_text(config_path))
      config['data']['tokenizer'] = os.path.join(target, 'tokenizer')  # where it will be
      storage.write_atomic(config_path, json.dumps(config, indent=2, sort_keys=True))
    found = hub_cache.cached(hub_cache.HubName(name.repo_id, snapshot.commit))
    notes.append(f'converted {found.pinned} into {found.workdir} (later loads read it)')
  hub_cache.record_revision(name, snapshot.commit)
  return found, notes


def from_hf(hf_dir: str, workdir: str, generator: str = '') -> list[str]:
  """Converts a Hugging Face directory of a known family into a workdir (with `generator`, the
  directory of the ELECTRA generator that trained it); returns notes for the user."""
  storage.check_bucket(hf_dir)
  storage.check_checkpoint_location(workdir)
  workdir = storage.abspath(workdir)  # Orbax refuses a relative checkpoint path
  _check_out(workdir)
  hf_dir, embed, hf, family = recognise(hf_dir)
  fields = family.model_fields(hf)
  task = heads.task_of(hf, family.head_architectures)  # None: no fine-tuned head
  names, num_labels = heads.labels_from_hf(hf, task) if task else (None, 0)
  tokenizer = family.read_tokenizer(hf_dir)
  if tokenizer.vocab_size > fields['vocab_size']:
    raise CheckpointError(f'the tokenizer has {tokenizer.vocab_size} tokens but the model only '
                          f"{fields['vocab_size']} embeddings")
  params, absent = _convert_weights(family, read_safetensors(hf_dir), fields, task, num_labels)
  if generator:
    params.update(family.generator_params(read_json(os.path.join(generator, 'config.json')),
                                          read_safetensors(generator), params, fields))
  notes = []
  if 'pooler' in absent:
    params['encoder']['pooler'] = _fresh_pooler(fields)
    notes.append('the model has no pooler: pooled_output uses a freshly initialised one')
  if task:
    config = heads.run_config(task, names, fields['max_position_embeddings'])
    notes.append(_head_note(hf, task, names))
  else:
    config = family.pretraining_config(params)
    notes += _pretraining_notes(hf, family, absent)
  config.model.update(fields)
  config.data.tokenizer = os.path.join(storage.abspath(workdir), 'tokenizer')
  config.data.vocab_size = tokenizer.vocab_size
  config.data.max_seq_length = min(config.data.max_seq_length, fields['max_position_embeddings'])
  # Only the fields the task's config has (a fine-tuning config has no data.nsp).
  config.data.update({k: v for k, v in family.data_fields(params, tokenizer).items()
                      if k in config.data})
  if embed is not None:
    config.embed.update(embed)
    notes.append(f"sentence-transformers pipeline: embed() pools by {embed['pooling']}"
                 f"{', normalised' if embed['normalize'] else ''}, "
                 f"{embed['max_seq_length'] or 'all'} tokens per text")
  write_workdir(workdir, config, tokenizer, params)
  return notes


def _head_note(hf: dict, task: str, names: list[str] | None) -> str:
  labels = (f"labels {','.join(names)}" if names else
            'regression' if task == 'classification' else 'SQuAD v1.1 decoding (set '
            'data.version_2_with_negative in config.json for a v2.0 model)')
  return (f"{hf['architectures'][0]}: task {task}, {labels}; "
          f'{heads.METHODS[task]}() runs its head')


def _pretraining_notes(hf: dict, family: Family, absent: list[str]) -> list[str]:
  notes = []
  names = hf.get('architectures')
  first = names[0] if isinstance(names, list) and names else None
  if isinstance(first, str) and first not in family.architectures:
    notes.append(f"{first}'s own head is not converted (fine-tuned heads convert from "
                 f'{_listed(family.head_architectures.values())})')
  missing = [name for key, name in (('mlm', 'MLM'), ('nsp_head', 'NSP')) if key in absent]
  if missing:
    notes.append(f"no {' or '.join(missing)} head: training with init_from initialises "
                 'it freshly; fill_mask needs the MLM head')
  return notes


def write_workdir(workdir: str, config, tokenizer, params: dict) -> None:
  """A workdir `encoder.load` reads and `init_from` starts from: tokenizer/, checkpoints/0
  (the params only) and config.json, written last, so a failed conversion leaves no config
  that names missing weights."""
  storage.makedirs(workdir)
  tokenizer.save(os.path.join(workdir, 'tokenizer'))
  _write_params(workdir, params)
  with storage.open(os.path.join(workdir, 'config.json'), 'w', encoding='utf-8') as f:
    f.write(configs.to_json(config))


def to_hf(path: str, out: str) -> list[str]:
  """Writes our checkpoint as a Hugging Face directory of the family that writes its
  architecture (BERT, or ModernBERT for a rotary model); returns notes for the user."""
  from safetensors.numpy import save, save_file

  from encoder.inference import load  # lazy: JAX loads only when converting
  from encoder.inference.fine_tuned import head_size, label_names  # lazy: as above

  _check_out(out)
  model = load(path)
  # load() zeroes dropout for inference; the export states the rates the model trained with.
  saved = model.config['model']
  cfg = dataclasses.replace(model.model_config, dropout_rate=saved['dropout_rate'],
                            attention_dropout_rate=saved['attention_dropout_rate'])
  family = next((f for f in FAMILIES if f.writes(cfg, model.config['task'])), None)
  if family is None:
    raise CheckpointError(f'no Hugging Face family ({_listed(f.name for f in FAMILIES)}) '
                          'writes this architecture: this model does not convert')
  # A fine-tuned run's head goes out as the family's class for its task; a pretraining or
  # contrastive run's as the pretraining classes.
  task = model.config['task'] if model.config['task'] in heads.TASKS else None
  why = family.refusal(cfg, task)
  if why:
    raise CheckpointError(f"Hugging Face's {family.name} cannot express {why}: this model does "
                          'not convert')
  params, num_labels = model.params, 0
  if task:
    num_labels = head_size(params, heads.GROUPS[task])
    if task == 'classification' and num_labels == 1:
      params = heads.fold_target_scale(params, model.config['data'])
  tensors, architecture = family.ours_to_hf(params, cfg, task)
  hf_config = family.hf_config(cfg, model.tokenizer, architecture)
  if task:
    hf_config.update(heads.hf_label_fields(task, label_names(model.config), num_labels))
  kept = ('encoder', heads.GROUPS[task]) if task else family.param_groups
  notes = [f'dropped {k}: {family.name} has no such head' for k in model.params if k not in kept]
  storage.makedirs(out)
  weights = os.path.join(out, 'model.safetensors')
  if storage.is_remote(out):
    storage.write_atomic(weights, save(tensors, metadata={'format': 'pt'}))
  else:
    save_file(tensors, weights, metadata={'format': 'pt'})
  with storage.open(os.path.join(out, 'config.json'), 'w', encoding='utf-8') as f:
    json.dump(hf_config, f, indent=2)
  notes += family.write_tokenizer(model.tokenizer, out, cfg.max_position_embeddings)
  embed = model.config['embed']
  # Imported from one (or fine-tuned from such an import, which inherits its embed section):
  # the same pipeline goes back out, unless the export is a task head's class.
  if embed['sentence_transformers'] and not task:
    sentence_transformers.write(out, embed, cfg.hidden_size, cfg.max_position_embeddings)
  return notes


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog='python -m encoder.convert', description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  direction = parser.add_mutually_exclusive_group(required=True)
  direction.add_argument('--from-hf', metavar='DIR', help='a Hugging Face '
                         f'{_listed(f.name for f in FAMILIES)} directory, or a model on the '
                         'Hub: hf://ORG/NAME[@REVISION]')
  direction.add_argument('--to-hf', metavar='WORKDIR', help='our workdir or checkpoint step')
  parser.add_argument('--generator', metavar='DIR', default='', help='with --from-hf of an '
                      'ELECTRA discriminator: its generator (ElectraForMaskedLM), for fill_mask')
  parser.add_argument('--out', help='the directory to create (without it, --from-hf '
                      "hf://ORG/NAME converts into the cache encoder.load('hf://ORG/NAME') reads)")
  args = parser.parse_args(argv)
  named = bool(args.from_hf) and hub_cache.is_hub_name(args.from_hf)
  if args.generator and (not args.from_hf or named):
    parser.error('--generator goes with --from-hf DIR (a local ELECTRA discriminator)')
  if not args.out and not named:
    parser.error('--out is required (optional only with --from-hf hf://ORG/NAME)')
  out = os.path.expanduser(args.out) if args.out else None
  try:
    if named and not out:
      model, notes = from_hub(args.from_hf, refresh=True)
      wrote = f'{model.pinned}: {model.workdir}'
    elif named:
      _check_out(storage.abspath(out))  # before anything is downloaded
      notes = from_hf(hub.download(hub_cache.parse_name(args.from_hf), _model_folder).directory,
                      out)
    elif args.from_hf:
      notes = from_hf(os.path.expanduser(args.from_hf), out, os.path.expanduser(args.generator))
    else:
      notes = to_hf(os.path.expanduser(args.to_hf), out)
  except EncoderError as e:
    sys.stderr.write(f'error: {e}\n')
    return 2
  for note in notes:
    sys.stderr.write(f'note: {note}\n')
  print(wrote if named and not out else f'wrote {args.out}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
