"""Hugging Face BERT and ModernBERT directories <-> our workdirs, without torch (safetensors'
numpy API).

  python -m encoder.convert --from-hf DIR --out WORKDIR  # config.json, safetensors, and
                                                          # vocab.txt (BERT) or tokenizer.json
  python -m encoder.convert --to-hf WORKDIR --out DIR     # BertForPreTraining, or
                                                          # ModernBertForMaskedLM for RoPE models

A converted workdir holds config.json (an mlm_nsp_base config with the model's numbers),
tokenizer/ and checkpoints/0/params: `encoder.load(WORKDIR)` reads it, and
`--config.init_from=WORKDIR` starts training from it. It has no optimizer state, so it is a
starting point, not a run to resume. Only safetensors weights are read (not pytorch_model.bin).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from encoder import config_schema, configs, orbax_s3, storage
from encoder.data.tokenizer import JsonTokenizer, WordPieceTokenizer, load_tokenizer
from encoder.errors import CheckpointError, EncoderError
from encoder.hf import mapping, modernbert
from encoder.inference import load
from encoder.modules.config import model_config
from encoder.modules.layers import dense
from encoder.modules.transformer import Encoder

HF_ACTIVATIONS = {'gelu': 'gelu', 'gelu_new': 'gelu_tanh', 'gelu_pytorch_tanh': 'gelu_tanh'}
OUR_ACTIVATIONS = {'gelu': 'gelu', 'gelu_tanh': 'gelu_new'}


def _read_json(path: str) -> dict:
  try:
    with storage.open(path, encoding='utf-8') as f:
      value = json.load(f)
  except (OSError, ValueError, RecursionError) as e:
    raise CheckpointError(f"cannot read '{path}': {e}".split('\n')[0]) from None
  if not isinstance(value, dict):
    raise CheckpointError(f"'{path}' holds a JSON {type(value).__name__}, not an object")
  return value


def model_fields(hf: dict) -> dict:
  """HF config.json -> our `config.model` fields; refuses what our modules cannot express."""
  if not isinstance(hf, dict):
    raise CheckpointError('the config.json is not a JSON object: it is not a BERT config')
  if hf.get('model_type', 'bert') != 'bert':
    raise CheckpointError(f"model_type '{hf.get('model_type')}' is not BERT or ModernBERT: only "
                          'those checkpoints convert (BertModel, BertForMaskedLM, '
                          'BertForPreTraining, ModernBertModel, ModernBertForMaskedLM)')
  if hf.get('position_embedding_type', 'absolute') != 'absolute':
    raise CheckpointError(f"position_embedding_type '{hf['position_embedding_type']}' is not "
                          'supported: our embeddings are learned absolute positions')
  if hf.get('is_decoder') or hf.get('add_cross_attention'):
    raise CheckpointError('decoder BERT (is_decoder / add_cross_attention) is not supported: '
                          'our model is an encoder')
  act = hf.get('hidden_act', 'gelu')
  if not isinstance(act, str) or act not in HF_ACTIVATIONS:
    raise CheckpointError(f"hidden_act '{act}' is not supported (known: "
                          f"{', '.join(HF_ACTIVATIONS)})")
  try:
    fields = {'num_layers': int(hf['num_hidden_layers']), 'hidden_size': int(hf['hidden_size']),
            'num_heads': int(hf['num_attention_heads']),
            'intermediate_size': int(hf['intermediate_size']),
            'vocab_size': int(hf['vocab_size']),
            'max_position_embeddings': int(hf.get('max_position_embeddings', 512)),
            'type_vocab_size': int(hf.get('type_vocab_size', 2)),
            'activation': HF_ACTIVATIONS[act],
            'layer_norm_eps': float(hf.get('layer_norm_eps', 1e-12)),
            'initializer_range': float(hf.get('initializer_range', 0.02)),
            'dropout_rate': float(hf.get('hidden_dropout_prob', 0.1)),
            'attention_dropout_rate': float(hf.get('attention_probs_dropout_prob', 0.1))}
  except KeyError as e:
    raise CheckpointError(f'the config.json lacks {e}: it is not a BERT config') from None
  except (TypeError, ValueError, OverflowError) as e:
    raise CheckpointError(f'the config.json has a field of the wrong type ({e})') from None
  sizes = ('num_layers', 'hidden_size', 'num_heads', 'intermediate_size', 'vocab_size',
           'max_position_embeddings', 'type_vocab_size')
  bad = next((k for k in sizes if fields[k] < 1), None)
  if bad:
    raise CheckpointError(f'the config.json gives {bad}={fields[bad]}: sizes must be positive')
  if fields['hidden_size'] % fields['num_heads']:
    raise CheckpointError(f"hidden_size={fields['hidden_size']} is not divisible by "
                          f"num_attention_heads={fields['num_heads']}")
  return fields


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


def _convert_weights(tensors: dict, fields: dict, modern: bool) -> tuple[dict, list[str]]:
  """The family's hf_to_ours, with weights that contradict config.json refused in one line."""
  try:
    if modern:
      params, absent = modernbert.hf_to_ours(tensors, fields)
    else:
      params, absent = mapping.hf_to_ours(tensors, fields['num_layers'], fields['num_heads'])
  except (ValueError, TypeError, KeyError) as e:
    raise CheckpointError(f'the weights do not fit config.json ({str(e)[:160]})') from None
  _check_shapes(params['encoder'], fields)
  return params, absent


def _check_shapes(converted: dict, fields: dict) -> None:
  """Every converted encoder weight has the shape config.json implies (else load() would fail
  later, far from the cause)."""
  import flax.linen as nn
  import jax

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
  """A newly initialised pooler, for BertForMaskedLM checkpoints that have none."""
  import flax.linen as nn
  import jax

  cfg = model_config(fields)
  layer = dense(cfg, cfg.hidden_size, ('embed', 'embed_out'), 'pooler')
  variables = layer.init(jax.random.key(0), np.zeros((1, cfg.hidden_size), np.float32))
  return jax.tree.map(np.asarray, nn.unbox(variables)['params'])


def _check_out(out: str) -> None:
  storage.check_bucket(out)
  if storage.exists(out) and (not storage.isdir(out) or storage.listdir(out)):
    raise CheckpointError(f"'{out}' already exists and is not empty: choose a new --out")


def _bert_tokenizer(hf_dir: str) -> WordPieceTokenizer:
  if not storage.isfile(os.path.join(hf_dir, 'vocab.txt')):
    raise CheckpointError(f"'{hf_dir}' has no vocab.txt: only WordPiece BERT tokenizers convert")
  tok_config_path = os.path.join(hf_dir, 'tokenizer_config.json')
  tok_config = _read_json(tok_config_path) if storage.exists(tok_config_path) else {}
  lower_case = tok_config.get('do_lower_case')
  tokenizer = load_tokenizer(os.path.join(hf_dir, 'vocab.txt'),
                             True if lower_case is None else bool(lower_case))
  assert isinstance(tokenizer, WordPieceTokenizer)
  return tokenizer


def _json_tokenizer(hf_dir: str) -> JsonTokenizer:
  path = os.path.join(hf_dir, 'tokenizer.json')
  if not storage.isfile(path):
    raise CheckpointError(f"'{hf_dir}' has no tokenizer.json: a ModernBERT directory has one")
  try:
    tokenizer = load_tokenizer(path)
  except EncoderError as e:
    raise CheckpointError(str(e)) from None
  assert isinstance(tokenizer, JsonTokenizer)
  return tokenizer


def from_hf(hf_dir: str, workdir: str) -> list[str]:
  """Converts a HF BERT or ModernBERT directory into a workdir; returns notes for the user."""
  storage.check_bucket(hf_dir)
  storage.check_checkpoint_location(workdir)
  workdir = storage.abspath(workdir)  # Orbax refuses a relative checkpoint path
  if not storage.isfile(os.path.join(hf_dir, 'config.json')):
    raise CheckpointError(f"'{hf_dir}' has no config.json: give a Hugging Face BERT or "
                          'ModernBERT directory')
  _check_out(workdir)
  hf = _read_json(os.path.join(hf_dir, 'config.json'))
  modern = hf.get('model_type') == modernbert.MODEL_TYPE
  fields = modernbert.model_fields(hf) if modern else model_fields(hf)
  tokenizer = _json_tokenizer(hf_dir) if modern else _bert_tokenizer(hf_dir)
  if tokenizer.vocab_size > fields['vocab_size']:
    raise CheckpointError(f'the tokenizer has {tokenizer.vocab_size} tokens but the model only '
                          f"{fields['vocab_size']} embeddings")
  params, absent = _convert_weights(read_safetensors(hf_dir), fields, modern)
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
  if isinstance(tokenizer, WordPieceTokenizer):
    config.data.lower_case = tokenizer.lower_case
  config.data.max_seq_length = min(config.data.max_seq_length, fields['max_position_embeddings'])
  config.data.nsp = not modern and ('nsp_head' in params or 'mlm' not in params)
  storage.makedirs(workdir)
  tokenizer.save(os.path.join(workdir, 'tokenizer'))
  _write_params(workdir, params)
  with storage.open(os.path.join(workdir, 'config.json'), 'w', encoding='utf-8') as f:
    f.write(configs.to_json(config))
  return notes


def _bert_refusal(cfg) -> str | None:
  """What Hugging Face's BERT cannot express in `cfg`, or None."""
  for bad, why in ((cfg.norm == 'pre', 'pre-LN (model.norm=pre)'),
                   (cfg.activation in ('geglu', 'swiglu'),
                    f'a gated MLP (model.activation={cfg.activation})'),
                   (cfg.attention == 'causal', 'causal attention'),
                   (cfg.position_embedding != 'learned',
                    f'model.position_embedding={cfg.position_embedding}'),
                   (cfg.local_window > 0 and any(cfg.is_local(i) for i in range(cfg.num_layers)),
                    'local attention (model.local_window)'),
                   (not cfg.use_bias, 'bias-free layers (model.use_bias=false)'),
                   (not cfg.embedding_norm, 'no embedding norm (model.embedding_norm=false)'),
                   (cfg.type_vocab_size == 0, 'no segment embeddings (model.type_vocab_size=0)'),
                   (cfg.pooler != 'tanh', f'model.pooler={cfg.pooler}')):
    if bad:
      return why
  return None


def _write_tokenizer(tok, out: str, max_length: int) -> list[str]:
  """The tokenizer files transformers reads for `tok`; notes where it cannot."""
  specials = {'unk_token': '[UNK]', 'sep_token': '[SEP]', 'pad_token': '[PAD]',
              'cls_token': '[CLS]', 'mask_token': '[MASK]'}
  if isinstance(tok, JsonTokenizer | WordPieceTokenizer):
    tok.save(out)  # tokenizer.json, or vocab.txt (+ our tokenizer_config.json, replaced here)
    extra = ({'tokenizer_class': 'PreTrainedTokenizerFast'} if isinstance(tok, JsonTokenizer)
             else {'tokenizer_class': 'BertTokenizer', 'do_lower_case': tok.lower_case})
    with storage.open(os.path.join(out, 'tokenizer_config.json'), 'w', encoding='utf-8') as f:
      json.dump({**extra, 'model_max_length': max_length, **specials}, f, indent=2)
    return []
  tok.save(out)  # tokenizer.model
  return ['the tokenizer is SentencePiece: wrote tokenizer.model and no vocab.txt, since '
          "HF's BertTokenizer cannot reproduce its segmentation; tokenize with "
          'sentencepiece and pass the ids (specials: ' + ', '.join(
              f'{t}={tok.token_to_id(t)}' for t in specials.values()) + ')']


def _bert_config(cfg, tok, saved: dict, architecture: str) -> dict:
  return {
      'architectures': [architecture], 'model_type': 'bert', 'vocab_size': cfg.vocab_size,
      'hidden_size': cfg.hidden_size, 'num_hidden_layers': cfg.num_layers,
      'num_attention_heads': cfg.num_heads, 'intermediate_size': cfg.intermediate_size,
      'hidden_act': OUR_ACTIVATIONS[cfg.activation],
      # load() zeroes dropout for inference; the trained rates are in the saved config.
      'hidden_dropout_prob': float(saved.get('dropout_rate', 0.1)),
      'attention_probs_dropout_prob': float(saved.get('attention_dropout_rate', 0.1)),
      'max_position_embeddings': cfg.max_position_embeddings,
      'type_vocab_size': cfg.type_vocab_size, 'initializer_range': cfg.initializer_range,
      'layer_norm_eps': cfg.layer_norm_eps, 'pad_token_id': int(tok.pad_id),
      'position_embedding_type': 'absolute', 'tie_word_embeddings': True}


def to_hf(path: str, out: str) -> list[str]:
  """Writes our checkpoint as a HF BERT directory, or a ModernBERT one for a rotary model;
  returns notes for the user."""
  from safetensors.numpy import save, save_file

  _check_out(out)
  model = load(path)
  cfg = model.model_config
  modern = cfg.position_embedding == 'rope'
  why = modernbert.expressible(cfg) if modern else _bert_refusal(cfg)
  if why:
    family = 'ModernBERT' if modern else 'BERT'
    raise CheckpointError(f"Hugging Face's {family} cannot express {why}: this model does not "
                          'convert')
  if modern:
    tensors, architecture = modernbert.ours_to_hf(model.params, cfg)
    kept = ('encoder', 'mlm')
  else:
    tensors, architecture = mapping.ours_to_hf(model.params, cfg.num_layers)
    kept = ('encoder', 'mlm', 'nsp_head')
  family = 'ModernBERT' if modern else 'BERT'
  notes = [f'dropped {k}: {family} has no such head' for k in model.params if k not in kept]
  tok, saved = model.tokenizer, model.config['model']
  hf_config = (modernbert.hf_config(cfg, tok, saved, architecture) if modern
               else _bert_config(cfg, tok, saved, architecture))
  storage.makedirs(out)
  weights = os.path.join(out, 'model.safetensors')
  if storage.is_remote(out):
    storage.write_atomic(weights, save(tensors, metadata={'format': 'pt'}))
  else:
    save_file(tensors, weights, metadata={'format': 'pt'})
  with storage.open(os.path.join(out, 'config.json'), 'w', encoding='utf-8') as f:
    json.dump(hf_config, f, indent=2)
  return notes + _write_tokenizer(tok, out, cfg.max_position_embeddings)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog='python -m encoder.convert', description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  direction = parser.add_mutually_exclusive_group(required=True)
  direction.add_argument('--from-hf', metavar='DIR',
                         help='a Hugging Face BERT or ModernBERT directory')
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

