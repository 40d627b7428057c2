"""Texts embedded several to a row: tokenized in one call, sorted by length, packed first-fit
into rows of one fixed [rows, width] shape, and pooled per text on the device.

Why: `Model.embed` pads every text of a batch to the batch's longest, rounded up to a power of
two, and compiles once per (batch, length) bucket. Packed, short texts share a row:
`input_segmentation` makes attention block-diagonal and `input_positions` restart at each text,
so each text gives what it gives alone (tests/embedding/test_packed.py: equal to `Model.embed`
to 1e-5), while every step of a call has one shape (its last on a power of two of the rows),
so a corpus costs a compile or a few, not one per length.

Pooling is `Model.embed`'s, per packed text and over `sequence_output` (never the encoder's
`pooled_output`, which is the pretraining pooler's tanh of `model.pooling`): `mean` over the
text's own tokens, [CLS] and [SEP] included; `cls` its first token; `last` its last. The
settings default to the config's `embed` section, as `Model.embed`'s do.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from encoder.data.finetune import packing
from encoder.errors import DataError
from encoder.inference import text as text_lib
from encoder.modules import pooling as pooling_lib
from encoder.modules.transformer import Encoder

POOLINGS = pooling_lib.POOLINGS
DTYPES = ('float32', 'bfloat16')
# Tokens per device step where neither batch_tokens nor rows is given. On a CPU 8 rows of 256:
# all-MiniLM-L6-v2 on SciFact ran 1.31x faster (bfloat16 1.13x) than at 32 rows, 4 rows no
# faster than 8 (a step's [tokens, 1536] activations stay nearer the caches;
# docs/embeddings.md). An accelerator wants many more tokens in flight (a guess, not measured
# yet: pass batch_tokens to tune it).
BATCH_TOKENS = {'cpu': 2048}
ACCELERATOR_BATCH_TOKENS = 131072
_TOKENIZE_CHUNK = 4096  # texts per encode_batch call: its Python lists stay small


@dataclasses.dataclass(frozen=True)
class Settings:
  """What decides a text's vector: how it is pooled, normalised and cut."""
  pooling: str
  normalize: bool
  max_length: int  # tokens per text, [CLS] and [SEP] included
  dtype: str  # the compute dtype (float32 unless asked: bfloat16 changes the vectors a little)


def resolve_settings(model, pooling: str | None = None, normalize: bool | None = None,
                     max_length: int | None = None, dtype: str | None = None) -> Settings:
  """The arguments, or where None the model's config.embed (and its compute dtype),
  resolved as `Model.embed` does."""
  embed = model.config['embed']
  pooling = embed['pooling'] if pooling is None else pooling
  if pooling not in POOLINGS:
    raise DataError(f"pooling='{pooling}' is not one of {', '.join(POOLINGS)}")
  normalize = embed['normalize'] if normalize is None else bool(normalize)
  limit = max_length or embed['max_seq_length'] or model.max_length
  dtype = dtype or model.model_config.dtype
  if dtype not in DTYPES:
    raise DataError(f"dtype='{dtype}' is not one of {', '.join(DTYPES)}")
  return Settings(pooling, normalize, min(int(limit), model.max_length), dtype)


class Tokens:
  """[CLS] text [SEP] of each text, cut to `max_length`, as one flat id array and offsets."""

  def __init__(self, tokenizer, texts: Sequence[str], max_length: int):
    """The ids `Model.tokenize` gives each text alone (text_lib.build_inputs: a literal [MASK]
    is the mask token, longer texts lose their end), encoded a chunk of texts per
    `encode_batch` call rather than one call per text (the tokenizers backends run a batch
    in parallel, natively)."""
    budget = max_length - 2
    if budget < 1:
      raise DataError(f'max_length={max_length} leaves no room for text')
    pieces, self.truncated = [], 0
    for start in range(0, len(texts), _TOKENIZE_CHUNK):
      chunk = list(texts[start:start + _TOKENIZE_CHUNK])
      for i, text in enumerate(chunk):
        if not isinstance(text, str):
          raise DataError(f'text {start + i} is a {type(text).__name__}, not a string')
      plain = [i for i, t in enumerate(chunk) if t.strip() and text_lib.MASK not in t]
      ids: list[list[int]] = [[] for _ in chunk]
      for i, row in zip(plain, tokenizer.encode_batch([chunk[i] for i in plain]), strict=True):
        ids[i] = row
      for i, text in enumerate(chunk):
        if text_lib.MASK in text:
          ids[i] = text_lib.text_ids(tokenizer, text)
      for row in ids:
        self.truncated += len(row) > budget
        pieces.append(np.asarray([tokenizer.cls_id, *row[:budget], tokenizer.sep_id], np.int32))
    self.lengths = np.array([len(p) for p in pieces], np.int64)
    self.offsets = np.cumsum(self.lengths) - self.lengths
    self.ids = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)


class PackedEmbedder:
  """A loaded model's `embed`, computed on packed rows of `rows` x `width` tokens.

  `width` is the shortest power of two (16 upwards, at most max_length) that holds the
  longest text of a call; `rows` is `batch_tokens // width` unless given. `truncated` counts
  the texts cut to max_length so far.
  """

  def __init__(self, model, pooling: str | None = None, normalize: bool | None = None,
               max_length: int | None = None, batch_tokens: int | None = None,
               rows: int | None = None, dtype: str | None = None):
    self.model = model
    self.settings = resolve_settings(model, pooling, normalize, max_length, dtype)
    self.encoder = model.encoder_module
    if self.settings.dtype != model.model_config.dtype:  # the same weights, cast at use
      self.encoder = Encoder(dataclasses.replace(model.model_config, dtype=self.settings.dtype))
    platform = jax.devices()[0].platform
    self.batch_tokens = int(batch_tokens or BATCH_TOKENS.get(platform, ACCELERATOR_BATCH_TOKENS))
    self.fixed_rows = rows
    if (rows is not None and rows < 1) or self.batch_tokens < 1:
      raise DataError(f'rows={rows} and batch_tokens={batch_tokens} must be positive')
    self.truncated = 0
    self.last_shape = (0, 0)  # (rows, width) of the last call's steps

  def shape(self, longest: int) -> tuple[int, int]:
    """(rows, width) of the steps that embed texts whose longest has `longest` tokens."""
    width = text_lib.seq_bucket(longest, self.settings.max_length)
    return self.fixed_rows or max(1, self.batch_tokens // width), width

  def __call__(self, texts: Sequence[str], progress: Callable[[int], object] | None = None
               ) -> np.ndarray:
    """[len(texts), hidden] float32 in the texts' order; `progress(n)` after each step with
    the number of texts it finished."""
    tokens = Tokens(self.model.tokenizer, texts, self.settings.max_length)
    self.truncated += tokens.truncated
    hidden = self.model.model_config.hidden_size
    out = np.zeros((len(texts), hidden), np.float32)
    if not len(texts):
      return out
    rows, width = self.last_shape = self.shape(int(tokens.lengths.max()))
    slots = packing.slots_per_row(width)
    order = np.argsort(-tokens.lengths, kind='stable')  # longest first: first-fit decreasing
    plan = packing.first_fit(order, tokens.lengths, rows, width, slots)
    params = self.model.device_params['encoder']
    pending = None
    for step in range(plan.num_steps):  # step j + 1 is dispatched before j is read back
      # Every step but the last fills its rows (first-fit opens a step only when no row has
      # room); the last runs on the power of two of rows it needs, not on all of them.
      used = int(plan.row[plan.entries(step)].max()) + 1
      batch = assemble(tokens, plan, step, min(rows, text_lib.batch_bucket(used)), width,
                       slots, self.model.tokenizer.pad_id, self.settings.pooling)
      result = pooled_step(params, *batch, encoder=self.encoder,
                           pooling=self.settings.pooling)
      if pending is not None:
        self._collect(out, plan, *pending, progress)
      pending = (step, result)
    self._collect(out, plan, *pending, progress)
    if self.settings.normalize:
      out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out

  @staticmethod
  def _collect(out, plan, step, result, progress) -> None:
    span = plan.entries(step)
    out[plan.example[span]] = np.asarray(result)[plan.row[span], plan.slot[span]]
    if progress is not None:
      progress(span.stop - span.start)


def assemble(tokens: Tokens, plan: packing.Plan, step: int, rows: int, width: int, slots: int,
             pad_id: int, pooling: str) -> tuple[np.ndarray, ...]:
  """Step `step`'s (input_ids, input_positions, input_segmentation) [rows, width] and the
  position each slot's text is read at [rows, slots] (its [CLS] for `cls`, its last token for
  `last`; unused by `mean`)."""
  span = plan.entries(step)
  example, row, start = plan.example[span], plan.row[span], plan.start[span]
  slot, length = plan.slot[span], plan.length[span]
  which, offsets = packing.spans(length)
  token_row, token_col = row[which], start[which] + offsets
  ids = np.full((rows, width), pad_id, np.int32)
  ids[token_row, token_col] = tokens.ids[tokens.offsets[example][which] + offsets]
  positions = np.zeros((rows, width), np.int32)
  positions[token_row, token_col] = offsets
  segmentation = np.zeros((rows, width), np.int32)
  segmentation[token_row, token_col] = slot[which] + 1
  read_at = np.zeros((rows, slots), np.int32)
  read_at[row, slot] = start + (length - 1 if pooling == 'last' else 0)
  return ids, positions, segmentation, read_at


@functools.partial(jax.jit, static_argnames=('encoder', 'pooling'))
def pooled_step(params, ids, positions, segmentation, read_at, *, encoder, pooling: str):
  """[rows, slots, hidden] float32: each slot's text pooled over its own tokens (a slot with
  no text gives zeros or an unread vector)."""
  mask = (segmentation > 0).astype(jnp.int32)
  out = encoder.apply({'params': params}, ids, jnp.zeros_like(ids), mask,
                      input_segmentation=segmentation, input_positions=positions)
  return pooling_lib.pool(out.sequence_output.astype(jnp.float32), mask, pooling, segmentation,
                          read_at)


def embed_packed(model, texts: Sequence[str], *, pooling: str | None = None,
                 normalize: bool | None = None, max_length: int | None = None,
                 batch_tokens: int | None = None, rows: int | None = None,
                 dtype: str | None = None, progress: Callable[[int], object] | None = None
                 ) -> np.ndarray:
  """`model.embed(texts, pooling, normalize, max_length)`, computed packed (see the module
  docstring; `dtype='bfloat16'` computes in bfloat16, which is faster on CPUs and GPUs with
  bfloat16 units and changes the vectors slightly); warns once if any text was truncated, as
  `embed` does."""
  embedder = PackedEmbedder(model, pooling, normalize, max_length, batch_tokens, rows, dtype)
  vectors = embedder(texts, progress)
  if embedder.truncated:
    warnings.warn(f'{embedder.truncated} text(s) longer than {embedder.settings.max_length} '
                  'tokens were truncated', stacklevel=2)
  return vectors
