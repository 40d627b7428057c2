"""Text -> padded id arrays for inference: [CLS]/[SEP], segments, truncation, shape buckets.

Shapes are rounded up to a few buckets (sequence 16, 32, 64, ... up to the model's
max_position_embeddings; batch a power of two) so jit compiles once per bucket, not once per
input length.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from encoder.data.finetune.finetuning_data import truncate_pair
from encoder.errors import DataError

MASK = '[MASK]'
Text = str | tuple[str, str]


def text_ids(tokenizer, text: str) -> list[int]:
  """Ids of `text` where a literal "[MASK]" becomes the mask id.

  Our tokenizers split "[MASK]" into ordinary pieces (as BERT's does, so corpus text can never
  forge a mask); here the user means the token, so we cut the text there and insert it.
  """
  if not isinstance(text, str):
    raise DataError(f'expected a string or an (a, b) pair of strings, got {type(text).__name__}')
  ids: list[int] = []
  for k, piece in enumerate(text.split(MASK)):
    if k:
      ids.append(tokenizer.mask_id)
    if piece.strip():
      ids.extend(tokenizer.encode(piece))
  return ids


def build_inputs(tokenizer, texts: Sequence[Text], max_length: int) -> dict:
  """[CLS] a [SEP] (b [SEP]) per text, truncated to `max_length` tokens, unpadded.

  Returns {'input_ids', 'segment_ids'} as lists of lists and warns once if anything was cut.
  """
  ids, segments, truncated = [], [], 0
  for text in texts:
    pair = isinstance(text, tuple | list) and not isinstance(text, str)
    if pair and len(text) != 2:
      raise DataError(f'a text pair must be (a, b), got {len(text)} items')
    a = text_ids(tokenizer, text[0] if pair else text)
    b = text_ids(tokenizer, text[1]) if pair else []
    budget = max_length - (3 if pair else 2)
    if budget < 1:
      raise DataError(f'max_length={max_length} leaves no room for text')
    if len(a) + len(b) > budget:  # longest first, B on ties: as the fine-tuning data is cut
      truncated += 1
      truncate_pair(a, b, budget)
    row = [tokenizer.cls_id, *a, tokenizer.sep_id]
    seg = [0] * len(row)
    if pair:
      row += [*b, tokenizer.sep_id]
      seg += [1] * (len(b) + 1)
    ids.append(row)
    segments.append(seg)
  if truncated:
    warnings.warn(f'{truncated} text(s) longer than {max_length} tokens were truncated '
                  '(longest segment first)', stacklevel=3)
  return {'input_ids': ids, 'segment_ids': segments}


def seq_bucket(length: int, max_length: int) -> int:
  """Smallest of 16, 32, 64, ... that fits `length`, capped at `max_length`."""
  bucket = 16
  while bucket < length:
    bucket *= 2
  return min(bucket, max_length)


def batch_bucket(size: int) -> int:
  return 1 << max(size - 1, 0).bit_length()


def pad(rows: list[list[int]], segments: list[list[int]], max_length: int, pad_id: int
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(input_ids, segment_ids, input_mask) int32, padded to the sequence bucket."""
  width = seq_bucket(max(len(r) for r in rows), max_length)
  ids = np.full((len(rows), width), pad_id, np.int32)
  seg = np.zeros_like(ids)
  mask = np.zeros_like(ids)
  for i, (row, s) in enumerate(zip(rows, segments, strict=True)):
    ids[i, :len(row)], seg[i, :len(row)], mask[i, :len(row)] = row, s, 1
  return ids, seg, mask


def pad_batch(arrays: Sequence[np.ndarray], size: int) -> list[np.ndarray]:
  """Repeats the first row up to `size` rows; the copies' outputs are dropped by the caller.

  Copies of a real row (rather than all-padding rows) keep every attention row well defined.
  """
  extra = size - arrays[0].shape[0]
  return [np.concatenate([a, np.repeat(a[:1], extra, axis=0)]) if extra else a for a in arrays]
