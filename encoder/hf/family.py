"""What a Hugging Face model family implements to convert both ways (`python -m encoder.convert`).

A family reads its own config.json, tokenizer files and tensor names; the driver,
encoder/convert.py, does everything the families share (finding the family, reading
safetensors, checking shapes against our modules, writing checkpoints and config.json). Every
refusal is an EncoderError of one line that names the field at fault, raised before anything is
written.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
from typing import TYPE_CHECKING

import numpy as np

from encoder import config_schema, storage
from encoder.data.tokenizer import JsonTokenizer, WordPieceTokenizer
from encoder.errors import CheckpointError

if TYPE_CHECKING:
  from encoder.data.tokenizer import Tokenizer
  from encoder.modules.config import ModelConfig


def read_json(path: str) -> dict:
  """A JSON object file, or a one-line refusal."""
  try:
    with storage.open(path, encoding='utf-8') as f:
      value = json.load(f)
  except (OSError, ValueError, RecursionError) as e:
    raise CheckpointError(f"cannot read '{path}': {e}".split('\n')[0]) from None
  if not isinstance(value, dict):
    raise CheckpointError(f"'{path}' holds a JSON {type(value).__name__}, not an object")
  return value


@contextlib.contextmanager
def reading_fields(family: str):
  """Around the reads of a config.json's fields: a missing key or a value of the wrong type
  becomes one line naming it, as every refusal is."""
  try:
    yield
  except KeyError as e:
    raise CheckpointError(f'the config.json lacks {e}: it is not a {family} config') from None
  except (TypeError, ValueError, OverflowError) as e:
    raise CheckpointError(f'the config.json has a field of the wrong type ({e})') from None


class Family(abc.ABC):
  """One Hugging Face family (BERT, ModernBERT, ...) <-> our config fields and parameter tree.

  Weights are numpy arrays in Hugging Face's PyTorch layout (what safetensors holds) on one
  side and our Flax tree on the other; `hf_to_ours` and `ours_to_hf` are exact inverses, so a
  round trip is bitwise.
  """

  name: str  # as users know it: "Hugging Face's {name} cannot express ..."
  # The pretraining classes it reads, named when no family knows a config.
  architectures: tuple[str, ...]
  param_groups: tuple[str, ...]  # our top-level parameter groups its pretraining models hold
  # Fine-tuning task (encoder.hf.heads.TASKS) -> the HF class holding that head.
  head_architectures: dict[str, str]

  # Hugging Face -> ours.

  @abc.abstractmethod
  def recognises(self, hf: dict) -> bool:
    """Whether config.json `hf` (any JSON object) is this family's."""

  @abc.abstractmethod
  def model_fields(self, hf: dict) -> dict:
    """config.json -> our `config.model` fields; refuses what our modules cannot express."""

  @abc.abstractmethod
  def read_tokenizer(self, hf_dir: str) -> Tokenizer:
    """The directory's tokenizer, as our tokenizer class that reads the same files."""

  @abc.abstractmethod
  def hf_to_ours(self, tensors: dict[str, np.ndarray], fields: dict, task: str | None = None
                 ) -> tuple[dict, list[str]]:
    """Tensors -> (our params, the groups the checkpoint lacks: 'pooler', 'mlm', 'nsp_head').
    A pretraining head is converted only when all of its tensors are present; `task`'s head
    (config.json's architecture says it is there) must be."""

  @abc.abstractmethod
  def data_fields(self, params: dict, tokenizer: Tokenizer) -> dict:
    """`config.data` fields that continued pretraining of the converted model uses."""

  def pretraining_config(self, params: dict):
    """The config a converted model without a fine-tuned head gets (its model and data fields
    are set after): the schema's pretraining config; a family whose models pretrain otherwise
    (ELECTRA) gives its own."""
    return config_schema.pretraining_config('from_hf')

  def generator_params(self, hf: dict, tensors: dict[str, np.ndarray], params: dict,
                       fields: dict) -> dict:
    """The parameter groups of a generator (`convert --generator DIR`: its config.json `hf`
    and its tensors) for the discriminator converted as `params` from `fields`; only a family
    that trains one (ELECTRA) has it."""
    raise CheckpointError(f'--generator: {self.name} models have no generator (ELECTRA '
                          'discriminators do)')

  # Ours -> Hugging Face.

  @abc.abstractmethod
  def writes(self, cfg: ModelConfig, task: str | None = None) -> bool:
    """Whether our model `cfg`, of a run of `task` (config.json's), is exported as this family
    (the rest of its fields may still be refused by `refusal`)."""

  @abc.abstractmethod
  def refusal(self, cfg: ModelConfig, task: str | None = None) -> str | None:
    """What of `cfg` (with `task`'s head, if any) this family cannot express (the field and
    its value), or None."""

  @abc.abstractmethod
  def ours_to_hf(self, params: dict, cfg: ModelConfig, task: str | None = None
                 ) -> tuple[dict[str, np.ndarray], str]:
    """Our params -> (HF tensors, the HF architecture they make): `task`'s head class for a
    fine-tuned run, else a pretraining one."""

  @abc.abstractmethod
  def hf_config(self, cfg: ModelConfig, tokenizer: Tokenizer, architecture: str) -> dict:
    """The config.json of the export; `cfg` holds the trained dropout rates."""

  def write_tokenizer(self, tokenizer: Tokenizer, out: str, max_length: int) -> list[str]:
    """Writes the tokenizer files transformers reads; returns notes where it cannot.

    WordPiece -> vocab.txt for BertTokenizer, tokenizer.json -> PreTrainedTokenizerFast, both
    with BERT's special tokens; SentencePiece (a tokenizer we trained) has no transformers
    counterpart that segments alike, so it is written as tokenizer.model with a note.
    """
    specials = {'unk_token': '[UNK]', 'sep_token': '[SEP]', 'pad_token': '[PAD]',
                'cls_token': '[CLS]', 'mask_token': '[MASK]'}
    if isinstance(tokenizer, JsonTokenizer | WordPieceTokenizer):
      tokenizer.save(out)  # tokenizer.json, or vocab.txt (+ our tokenizer_config.json, replaced)
      extra = ({'tokenizer_class': 'PreTrainedTokenizerFast'}
               if isinstance(tokenizer, JsonTokenizer)
               else {'tokenizer_class': 'BertTokenizer', 'do_lower_case': tokenizer.lower_case})
      with storage.open(os.path.join(out, 'tokenizer_config.json'), 'w', encoding='utf-8') as f:
        json.dump({**extra, 'model_max_length': max_length, **specials}, f, indent=2)
      return []
    tokenizer.save(out)  # tokenizer.model
    return ['the tokenizer is SentencePiece: wrote tokenizer.model and no vocab.txt, since '
            "HF's BertTokenizer cannot reproduce its segmentation; tokenize with "
            'sentencepiece and pass the ids (specials: ' + ', '.join(
                f'{t}={tokenizer.token_to_id(t)}' for t in specials.values()) + ')']
