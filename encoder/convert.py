"""Hugging Face directories <-> our workdirs, without torch (safetensors' numpy API).

  python -m encoder.convert --from-hf DIR --out WORKDIR  # config.json, safetensors, and
                                                          # vocab.txt (BERT) or tokenizer.json
  python -m encoder.convert --to-hf WORKDIR --out DIR     # BertForPreTraining, or
                                                          # ModernBertForMaskedLM for RoPE models

A converted workdir holds config.json (the schema's pretraining config with the model's numbers),
tokenizer/ and checkpoints/0/params: `encoder.load(WORKDIR)` reads it, and
`--config.init_from=WORKDIR` starts training from it. It has no optimizer state, so it is a
starting point, not a run to resume. Only safetensors weights are read (not pytorch_model.bin).

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

from encoder import config_schema, configs, orbax_s3, storage
from encoder.errors import CheckpointError, EncoderError
from encoder.hf import bert, modernbert, sentence_transformers
from encoder.hf.family import Family, read_json

# In the order they are asked: the first that recognises a config.json (from_hf), or that
# writes our model (to_hf), converts it.
FAMILIES: tuple[Family, ...] = (bert.FAMILY, modernbert.FAMILY)


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


def _convert_weights(family: Family, tensors: dict, fields: dict) -> tuple[dict, list[str]]:
  """The family's hf_to_ours, with weights that contradict config.json refused in one line."""
  try:
    params, absent = family.hf_to_ours(tensors, fields)
  except (ValueError, TypeError, KeyError) as e:
    raise CheckpointError(f'the weights do not fit config.json ({str(e)[:160]})') from None
  _check_shapes(params['encoder'], fields)
  return params, absent


def _check_shapes(converted: dict, fields: dict) -> None:
  """Every converted encoder weight has the shape config.json implies (else load() would fail
  later, far from the cause)."""
  import flax.linen as nn
  import jax

  from encoder.modules.config import model_config  # lazy: JAX loads only when converting
  from encoder.modules.transformer import Encoder  # lazy: as above

  ids = np.zeros((1, 2), np.int32)
  expected = jax.eval_shape(lambda: nn.unbox(Encoder(model_config(fields)).init(
      jax.random.key(0), ids, ids, ids))['params'])
  flat = dict(jax.tree_util.tree_flatten_with_path(expected)[0])
  for path, value in jax.tree_util.tree_flatten_with_path(converted)[0]:
    want = flat.get(path)
    if want is None or tuple(want.shape) != tuple(np.shape(value)):
      name = '/'.join(str(getattr(k, 'key', k)) for k in path)
      raise CheckpointError(f"the weight encoder/{name} has shape {np.shape(value)} but "
                            f"config.json implies {None if want is None else tuple(want.shape)}")


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


def from_hf(hf_dir: str, workdir: str) -> list[str]:
  """Converts a Hugging Face directory of a known family into a workdir; returns notes for the
  user."""
  storage.check_bucket(hf_dir)
  storage.check_checkpoint_location(workdir)
  workdir = storage.abspath(workdir)  # Orbax refuses a relative checkpoint path
  embed = None
  if sentence_transformers.is_sentence_transformers(hf_dir):
    hf_dir, embed = sentence_transformers.read(hf_dir)
  if not storage.isfile(os.path.join(hf_dir, 'config.json')):
    raise CheckpointError(f"'{hf_dir}' has no config.json: give a Hugging Face "
                          f'{_listed(f.name for f in FAMILIES)} directory')
  _check_out(workdir)
  hf = read_json(os.path.join(hf_dir, 'config.json'))
  family = family_of(hf)
  fields = family.model_fields(hf)
  tokenizer = family.read_tokenizer(hf_dir)
  if tokenizer.vocab_size > fields['vocab_size']:
    raise CheckpointError(f'the tokenizer has {tokenizer.vocab_size} tokens but the model only '
                          f"{fields['vocab_size']} embeddings")
  params, absent = _convert_weights(family, read_safetensors(hf_dir), fields)
  notes = []
  if 'pooler' in absent:
    params['encoder']['pooler'] = _fresh_pooler(fields)
    notes.append('the model has no pooler: pooled_output uses a freshly initialised one')
  heads = [name for key, name in (('mlm', 'MLM'), ('nsp_head', 'NSP')) if key in absent]
  if heads:
    notes.append(f"no {' or '.join(heads)} head: training with init_from initialises "
                 'it freshly; fill_mask needs the MLM head')
  config = config_schema.pretraining_config('from_hf')
  config.model.update(fields)
  config.data.tokenizer = os.path.join(storage.abspath(workdir), 'tokenizer')
  config.data.vocab_size = tokenizer.vocab_size
  config.data.max_seq_length = min(config.data.max_seq_length, fields['max_position_embeddings'])
  config.data.update(family.data_fields(params, tokenizer))
  if embed is not None:
    config.embed.update(embed)
    notes.append(f"sentence-transformers pipeline: embed() pools by {embed['pooling']}"
                 f"{', normalised' if embed['normalize'] else ''}, "
                 f"{embed['max_seq_length'] or 'all'} tokens per text")
  storage.makedirs(workdir)
  tokenizer.save(os.path.join(workdir, 'tokenizer'))
  _write_params(workdir, params)
  with storage.open(os.path.join(workdir, 'config.json'), 'w', encoding='utf-8') as f:
    f.write(configs.to_json(config))
  return notes


def to_hf(path: str, out: str) -> list[str]:
  """Writes our checkpoint as a Hugging Face directory of the family that writes its
  architecture (BERT, or ModernBERT for a rotary model); returns notes for the user."""
  from safetensors.numpy import save, save_file

  from encoder.inference import load  # lazy: JAX loads only when converting

  _check_out(out)
  model = load(path)
  # load() zeroes dropout for inference; the export states the rates the model trained with.
  saved = model.config['model']
  cfg = dataclasses.replace(model.model_config, dropout_rate=saved['dropout_rate'],
                            attention_dropout_rate=saved['attention_dropout_rate'])
  family = next((f for f in FAMILIES if f.writes(cfg)), None)
  if family is None:
    raise CheckpointError(f'no Hugging Face family ({_listed(f.name for f in FAMILIES)}) '
                          'writes this architecture: this model does not convert')
  why = family.refusal(cfg)
  if why:
    raise CheckpointError(f"Hugging Face's {family.name} cannot express {why}: this model does "
                          'not convert')
  tensors, architecture = family.ours_to_hf(model.params, cfg)
  notes = [f'dropped {k}: {family.name} has no such head' for k in model.params
           if k not in family.param_groups]
  storage.makedirs(out)
  weights = os.path.join(out, 'model.safetensors')
  if storage.is_remote(out):
    storage.write_atomic(weights, save(tensors, metadata={'format': 'pt'}))
  else:
    save_file(tensors, weights, metadata={'format': 'pt'})
  with storage.open(os.path.join(out, 'config.json'), 'w', encoding='utf-8') as f:
    json.dump(family.hf_config(cfg, model.tokenizer, architecture), f, indent=2)
  notes += family.write_tokenizer(model.tokenizer, out, cfg.max_position_embeddings)
  embed = model.config['embed']
  if embed['sentence_transformers']:  # imported from one: the same pipeline goes back out
    sentence_transformers.write(out, embed, cfg.hidden_size, cfg.max_position_embeddings)
  return notes


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog='python -m encoder.convert', description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  direction = parser.add_mutually_exclusive_group(required=True)
  direction.add_argument('--from-hf', metavar='DIR', help='a Hugging Face '
                         f'{_listed(f.name for f in FAMILIES)} directory')
  direction.add_argument('--to-hf', metavar='WORKDIR', help='our workdir or checkpoint step')
  parser.add_argument('--out', required=True, help='the directory to create')
  args = parser.parse_args(argv)
  try:
    if args.from_hf:
      notes = from_hf(os.path.expanduser(args.from_hf), os.path.expanduser(args.out))
    else:
      notes = to_hf(os.path.expanduser(args.to_hf), os.path.expanduser(args.out))
  except EncoderError as e:
    sys.stderr.write(f'error: {e}\n')
    return 2
  for note in notes:
    sys.stderr.write(f'note: {note}\n')
  print(f'wrote {args.out}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
