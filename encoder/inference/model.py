"""`encoder.load(path)`: a trained (or converted) checkpoint as an object for notebooks.

Restores only the parameters (plain Orbax on the step's `params` item, never the optimizer
state), rebuilds the model's shape from the workdir's saved config.json and loads the workdir's
tokenizer. Nothing from the training code (optax, the trainer, the steps) is imported, so this
works on a laptop CPU with the runtime dependencies alone.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import numpy as np

from encoder import saved_config, storage
from encoder.checkpoint_files import resolve_checkpoint, restore_newest_params
from encoder.data.tokenizer import load_tokenizer
from encoder.errors import CheckpointError, ConfigError, DataError
from encoder.inference import answer, classify, tag
from encoder.inference import text as text_lib
from encoder.inference.fine_tuned import softmax
from encoder.inference.plot import attention_figure
from encoder.modules.config import checked, model_config
from encoder.modules.electra import generator_config
from encoder.modules.heads import MlmHead
from encoder.modules.pooling import POOLINGS, pool
from encoder.modules.transformer import Encoder


class TaskMethod(NamedTuple):
  """A `Model` method that needs a fine-tuned head: the config.task whose checkpoints have that
  head, what to call the head in an error, and the function (taking the model first)."""
  task: str
  what: str
  run: Callable


# A fine-tuning task plugs in with a module in this package whose function takes the loaded
# model first (e.g. `classify.classify(model, texts)`) and runs the task's Flax model from
# encoder.modules.task_models through `Model.task_outputs`, a row here and a method below.
TASK_METHODS = {'classify': TaskMethod('classification', 'classification', classify.classify),
                'tag': TaskMethod('tagging', 'token tagging', tag.tag),
                'answer': TaskMethod('span_qa', 'question answering', answer.answer)}
_BATCH = 32  # rows per forward pass; a batch is padded up to a power of two below this


@dataclasses.dataclass(frozen=True)
class Encoded:
  """What `encode` returns; `input_ids`/`input_mask` say which positions are real tokens."""
  sequence_output: np.ndarray  # [batch, seq, hidden] float32
  pooled_output: np.ndarray  # [batch, hidden]: the [CLS] vector or the tokens' mean (per
  #                            model.pooling), through dense + tanh unless model.pooler=none
  input_ids: np.ndarray  # [batch, seq] int32
  input_mask: np.ndarray  # [batch, seq] int32, 1 for real tokens


def load(path: str, *, attention_impl: str = 'auto') -> Model:
  """Loads a workdir (its newest checkpoint) or one checkpoint step directory; see `Model`.
  `attention_impl` is how this machine computes attention (`model.attention_impl`'s values;
  auto: the fastest form here), whatever the run was trained with: the values are the same."""
  workdir, _ = resolve_checkpoint(path)
  config, tokenizer, cfg = _read_workdir(workdir, attention_impl)
  _, params_dir, params = restore_newest_params(path)
  return Model(config, params, tokenizer, cfg, path=params_dir, workdir=workdir)


def load_untrained(workdir: str, seed: int = 0) -> Model:
  """A workdir's model (its architecture, tokenizer and config) with freshly initialised
  encoder weights and no checkpoint read: the evaluation suite's scratch baseline."""
  config, tokenizer, cfg = _read_workdir(workdir)
  ids = np.zeros((1, 8), np.int32)
  params = Encoder(cfg).init(jax.random.key(seed), ids, ids, ids + 1)['params']
  return Model(config, {'encoder': jax.device_get(params)}, tokenizer, cfg, path='untrained',
               workdir=workdir)


def _read_workdir(workdir: str, attention_impl: str = 'auto'):
  """(completed config, tokenizer, model config for inference) of one of our workdirs."""
  config_path = os.path.join(workdir, 'config.json')
  if not storage.isfile(config_path):
    raise CheckpointError(f"'{workdir}' has no config.json: load() needs the workdir the "
                          'checkpoint was trained in')
  config = json.loads(storage.read_text(config_path))
  if not isinstance(config.get('model'), dict):
    raise CheckpointError(f"'{config_path}' has no 'model' section: not one of our workdirs")
  tokenizer_dir = os.path.join(workdir, 'tokenizer')
  if not storage.isdir(tokenizer_dir):
    raise CheckpointError(f"'{workdir}' has no tokenizer/ directory: copy the tokenizer the "
                          'model was trained with there')
  try:
    tokenizer = load_tokenizer(tokenizer_dir)
  except DataError as e:
    raise CheckpointError(f"'{workdir}': unreadable tokenizer ({e})") from None
  config = saved_config.complete(config)  # fields an earlier version did not write
  try:  # what training refuses, refused here too: the override below would hide a bad name
    checked(config['model'])
  except ConfigError as e:
    raise ConfigError(f"'{config_path}': {e}") from None
  vocab = config['model']['vocab_size'] or tokenizer.vocab_size
  # Inference never drops out, and attention is computed as suits this machine (`auto`, or
  # the caller's choice), whatever the machine the checkpoint was trained on was told.
  cfg = model_config({**config['model'], 'dropout_rate': 0.0, 'attention_dropout_rate': 0.0,
                      'attention_impl': attention_impl}, vocab)
  return config, tokenizer, cfg


class Model:
  """A loaded checkpoint: `config` (dict), `params` (numpy tree), `tokenizer`, and the methods
  notebooks need. Every forward pass is jit-compiled once per (batch, sequence) shape bucket."""

  def __init__(self, config: dict, params: dict, tokenizer, model_config, path: str = '',
               workdir: str = ''):
    self.config, self.params, self.tokenizer = config, params, tokenizer
    self.model_config, self.path, self.workdir = model_config, path, workdir
    self._encoder = Encoder(model_config)
    self._device_params = jax.device_put(params)
    self._forward = jax.jit(functools.partial(_forward, self._encoder),
                            static_argnames='return_probs')
    if 'mlm' not in params and 'generator_mlm' in params:  # ELECTRA: its generator fills masks
      generator = Encoder(generator_config(model_config,
                                           float(config['electra']['generator_size'])))
      self._mlm = jax.jit(functools.partial(_generator_logits, generator))
    else:
      self._mlm = jax.jit(functools.partial(_mlm_logits, self._encoder))
    self._task_forward = jax.jit(_task_forward, static_argnames='module')

  def __repr__(self) -> str:
    c = self.model_config
    return (f'<encoder.Model {self.config["task"]} {c.num_layers} layers, '
            f'hidden {c.hidden_size}, {c.num_heads} heads, vocab {c.vocab_size}: {self.path}>')

  @property
  def max_length(self) -> int:
    return self.model_config.max_position_embeddings

  @property
  def encoder_module(self) -> Encoder:
    """The Flax encoder (dropout off), for code that jits its own passes over it with
    `device_params` (encoder.embedding.packed's packed rows)."""
    return self._encoder

  @property
  def device_params(self) -> dict:
    """`params`, placed on the device once and shared by every pass."""
    return self._device_params

  def tokenize(self, texts: Sequence[text_lib.Text], max_length: int | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Padded (input_ids, segment_ids, input_mask); pairs become [CLS] a [SEP] b [SEP]."""
    limit = min(max_length or self.max_length, self.max_length)
    rows = text_lib.build_inputs(self.tokenizer, texts, limit)
    return text_lib.pad(rows['input_ids'], rows['segment_ids'], limit, self.tokenizer.pad_id)

  def _run(self, fn, arrays: list[np.ndarray], **kwargs) -> list:
    """`fn` over chunks of at most _BATCH rows, each padded to a power of two; numpy results."""
    n, outputs = arrays[0].shape[0], []
    for start in range(0, n, _BATCH):
      chunk = [a[start:start + _BATCH] for a in arrays]
      rows = chunk[0].shape[0]
      result = fn(self._device_params, *text_lib.pad_batch(chunk, text_lib.batch_bucket(rows)),
                  **kwargs)
      outputs.append(jax.tree.map(lambda x, rows=rows: np.asarray(x)[:rows], result))
    return jax.tree.map(lambda *xs: np.concatenate(xs), *outputs)

  def encode(self, texts: Sequence[text_lib.Text] | str | None = None, *, input_ids=None,
             segment_ids=None, input_mask=None, max_length: int | None = None) -> Encoded:
    """Sequence and pooled outputs of texts, (a, b) pairs, or ready-made id arrays.

    Texts longer than `max_length` (default: max_position_embeddings) are truncated with a
    warning. Given arrays, they are used as they are (no bucketing); segment ids default to 0
    and the mask to all ones.
    """
    if texts is not None:
      ids, seg, mask = self.tokenize([texts] if isinstance(texts, str) else texts, max_length)
    elif input_ids is not None:
      ids = np.asarray(input_ids, np.int32)
      seg = np.zeros_like(ids) if segment_ids is None else np.asarray(segment_ids, np.int32)
      mask = np.ones_like(ids) if input_mask is None else np.asarray(input_mask, np.int32)
      if ids.ndim != 2 or ids.shape[1] > self.max_length:
        raise DataError(f'input_ids must be [batch, seq] with seq <= {self.max_length}, got '
                        f'shape {ids.shape}')
    else:
      raise DataError('encode() needs texts or input_ids')
    sequence, pooled = self._run(self._forward, [ids, seg, mask])
    return Encoded(sequence, pooled, ids, mask)

  def embed(self, texts: Sequence[text_lib.Text] | str, pooling: str | None = None,
            normalize: bool | None = None, max_length: int | None = None) -> np.ndarray:
    """One vector per text, [batch, hidden]; by default as the config's `embed` section says
    (an imported sentence-transformers model's own pooling, normalisation and length).

    `mean`: the average of sequence_output over real tokens ([CLS] and [SEP] included), as
    sentence-transformers models such as all-MiniLM-L6-v2 are trained to be used. `cls`: the
    [CLS] position of sequence_output (not the pooled output, whose tanh layer was trained for
    NSP only). `last`: the last real token. `normalize`: unit length. `max_length`: tokens
    per text (longer ones are truncated).
    """
    settings = self.config['embed']  # load() completes the config: always there
    pooling = settings['pooling'] if pooling is None else pooling
    normalize = settings['normalize'] if normalize is None else normalize
    max_length = max_length or settings['max_seq_length'] or None
    if pooling not in POOLINGS:
      raise DataError(f"pooling='{pooling}' is not one of {', '.join(POOLINGS)}")
    out = self.encode(texts, max_length=max_length)
    # Pooled in float32 whatever the compute dtype, as embed_packed pools: a bfloat16 model's
    # mean taken in bfloat16 would round each vector to bfloat16 (float32: the same array).
    sequence = np.asarray(out.sequence_output, np.float32)
    # A writable host array, as callers normalise in place (np.asarray of a jax.Array is not).
    vectors = np.array(pool(sequence, out.input_mask, pooling))
    if normalize:
      vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return vectors

  def fill_mask(self, text: str | Sequence[str], top_k: int = 5):
    """For each [MASK] in the text, the `top_k` (token, probability) from the tied MLM head
    (an ELECTRA run's: its generator's; the discriminator `encode` runs has none).

    Tokens are vocabulary entries (WordPiece '##' continuations and SentencePiece '▁' word
    starts kept, so a prediction shows whether it starts a word). A list of texts gives a list
    of results.
    """
    if not isinstance(text, str):
      return [self.fill_mask(t, top_k) for t in text]
    if 'mlm' not in self.params and 'generator_mlm' not in self.params:
      raise CheckpointError('this checkpoint has no MLM head (it was converted from a BertModel '
                            'or an ELECTRA discriminator without --generator, or fine-tuned): '
                            'fill_mask needs a pretraining checkpoint')
    if text_lib.MASK not in text:
      raise DataError(f'the text has no {text_lib.MASK}: write [MASK] where a token should be '
                      'predicted')
    ids, seg, mask = self.tokenize([text])
    positions = np.flatnonzero(ids[0] == self.tokenizer.mask_id)
    if not len(positions):
      raise DataError(f'every {text_lib.MASK} was truncated: shorten the text')
    slots = np.zeros((1, text_lib.seq_bucket(len(positions), ids.shape[1])), np.int32)
    slots[0, :len(positions)] = positions
    logits = self._run(self._mlm, [ids, seg, mask, slots])[0, :len(positions)]
    probs = softmax(logits)
    top = np.argsort(-probs, axis=-1, kind='stable')[:, :top_k]
    return [[(self.tokenizer.id_to_token(int(i)), float(p[i])) for i in row]
            for row, p in zip(top, probs, strict=True)]

  def attention_maps(self, text: text_lib.Text) -> tuple[list[str], np.ndarray]:
    """The tokens and every layer's attention probabilities, [layers, heads, seq, seq]."""
    ids, seg, mask = self.tokenize([text])
    n = int(mask[0].sum())
    _, _, probs = self._run(self._forward, [ids, seg, mask], return_probs=True)
    maps = np.stack([p[0, :, :n, :n] for p in probs])
    return [self.tokenizer.id_to_token(int(i)) for i in ids[0, :n]], maps

  def plot_attention(self, text: text_lib.Text, layer: int = -1, head: int | None = None):
    """A heatmap Figure of one layer's attention (head=None averages the heads)."""
    tokens, maps = self.attention_maps(text)
    layers, heads = maps.shape[:2]
    if not -layers <= layer < layers or (head is not None and not -heads <= head < heads):
      raise DataError(f'layer={layer}, head={head} out of range: the model has {layers} layers '
                      f'of {heads} heads')
    weights = maps[layer].mean(0) if head is None else maps[layer, head]
    which = 'mean of heads' if head is None else f'head {head % heads}'
    return attention_figure(tokens, weights, f'layer {layer % layers}, {which}')

  def task_outputs(self, module, arrays: dict) -> dict:
    """A fine-tuned task's Flax model (`module`, from encoder.modules.task_models: the encoder
    and the head the trainer trained, built on this model's config, so dropout is off) applied
    to encoded rows (`input_ids`, `segment_ids`, `input_mask`, [rows, seq]): its outputs as
    numpy. Columns past the longest row's sequence bucket are dropped first: they are padding,
    which changes no output, and one compile serves every batch of a bucket."""
    mask = np.asarray(arrays['input_mask'])
    width = text_lib.seq_bucket(int(mask.sum(1).max()), mask.shape[1])
    inputs = [np.asarray(arrays[k])[:, :width] for k in ('input_ids', 'segment_ids',
                                                         'input_mask')]
    return self._run(self._task_forward, inputs, module=module)

  def _task(self, method: str, *args):
    task, what, run = TASK_METHODS[method]
    trained = self.config['task']
    if trained != task:
      raise CheckpointError(f'this checkpoint has no {what} head (it was trained for {trained}); '
                            f'fine-tune with --config.init_from={self.workdir or self.path} first')
    return run(self, *args)

  def classify(self, texts: Sequence[text_lib.Text]):
    """Labels for texts or (a, b) pairs: needs a checkpoint fine-tuned for classification."""
    return self._task('classify', texts)

  def tag(self, texts: Sequence[str]):
    """Per-token labels: needs a checkpoint fine-tuned for token tagging (e.g. NER)."""
    return self._task('tag', texts)

  def answer(self, question: str, context: str):
    """The answer span in `context`: needs a checkpoint fine-tuned for extractive QA."""
    return self._task('answer', question, context)


def _forward(encoder, params, ids, seg, mask, *, return_probs: bool = False):
  out = encoder.apply({'params': params['encoder']}, ids, seg, mask, return_probs=return_probs)
  if return_probs:
    return out.sequence_output, out.pooled_output, out.attention_probs
  return out.sequence_output, out.pooled_output


def _task_forward(params, ids, seg, mask, *, module):
  return module.apply({'params': params}, {'input_ids': ids, 'segment_ids': seg,
                                           'input_mask': mask})


def _generator_logits(generator, params, ids, seg, mask, positions):
  """An ELECTRA run's generator's logits at `positions`: its encoder (reading the
  discriminator's embeddings where it shares them) and MLM head, tied to those embeddings."""
  own = params['generator']
  if 'embeddings' not in own:
    own = {**own, 'embeddings': params['encoder']['embeddings']}
  sequence = generator.apply({'params': own}, ids, seg, mask).sequence_output
  table = own['embeddings']['word_embeddings']['embedding']
  return MlmHead(generator.config).apply({'params': params['generator_mlm']}, sequence, table,
                                         positions)


def _mlm_logits(encoder, params, ids, seg, mask, positions):
  """Logits at `positions` through the MLM head decoding with the word embeddings (tied)."""
  sequence = encoder.apply({'params': params['encoder']}, ids, seg, mask).sequence_output
  table = params['encoder']['embeddings']['word_embeddings']['embedding']
  return MlmHead(encoder.config).apply({'params': params['mlm']}, sequence, table, positions)
