"""One tokenizer interface over SentencePiece (trained or loaded), BERT WordPiece (vocab.txt) and
a Hugging Face tokenizer.json (ModernBERT's byte-level BPE, read by the `tokenizers` package).

All expose the five special tokens BERT needs; a SentencePiece model we train has them at fixed
ids ([PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4) as control symbols, so text that happens to
contain "[MASK]" is never encoded as the real mask token.
"""

from __future__ import annotations

import abc
import io
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator

import numpy as np

from encoder import storage
from encoder.data import cache
from encoder.errors import DataError

SPECIALS = ('[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]')
_SP_MODEL = 'tokenizer.model'
_VOCAB = 'vocab.txt'
_JSON = 'tokenizer.json'
_CONFIG = 'tokenizer_config.json'


class Tokenizer(abc.ABC):
  """Text <-> ids. `encode` adds no special tokens: the data pipeline places [CLS]/[SEP] itself."""

  vocab_size: int
  pad_id: int
  unk_id: int
  cls_id: int
  sep_id: int
  mask_id: int
  word_starts: np.ndarray  # bool [vocab_size]: the token begins a word (specials count as words)

  @abc.abstractmethod
  def encode_batch(self, texts: list[str]) -> list[list[int]]:
    """Ids of each text, without special tokens."""

  @abc.abstractmethod
  def decode(self, ids: Iterable[int]) -> str:
    """Text of `ids` (special tokens are spelled out)."""

  @abc.abstractmethod
  def id_to_token(self, i: int) -> str:
    """The vocabulary entry of id `i`."""

  @abc.abstractmethod
  def token_to_id(self, token: str) -> int | None:
    """The id of vocabulary entry `token`, or None."""

  @abc.abstractmethod
  def save(self, directory: str) -> list[str]:
    """Writes the files `load_tokenizer(directory)` reads; returns their paths."""

  def encode(self, text: str) -> list[int]:
    return self.encode_batch([text])[0]

  @staticmethod
  def _encodable(texts: list[str]) -> list[str]:
    """Texts both backends accept: an unpaired surrogate (from a JSON \\ud800 escape or
    Python code) becomes U+FFFD instead of a UnicodeEncodeError deep inside the tokenizer."""
    out = []
    for text in texts:
      text = str(text)
      try:
        text.encode('utf-8')
      except UnicodeEncodeError:
        # Through UTF-16: paired surrogates recombine, unpaired ones decode as U+FFFD.
        text = text.encode('utf-16', 'surrogatepass').decode('utf-16', 'replace')
      out.append(text)
    return out

  def tokenize(self, text: str) -> list[str]:
    return [self.id_to_token(i) for i in self.encode(text)]

  @property
  def special_ids(self) -> np.ndarray:
    return np.array([self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id], np.int32)

  def _init_specials(self, lookup) -> None:
    ids = []
    for token in SPECIALS:
      i = lookup(token)
      if i is None:
        raise DataError(f'the tokenizer has no {token} token: BERT pretraining needs {SPECIALS}')
      ids.append(i)
    self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = ids


class SentencePieceTokenizer(Tokenizer):
  """A SentencePiece model; word starts are pieces beginning with '▁'."""

  def __init__(self, model_proto: bytes):
    import sentencepiece as spm
    self.proto = model_proto
    self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
    self.vocab_size = self.sp.get_piece_size()
    self._init_specials(lambda t: _sp_id(self.sp, t))
    pieces = [self.sp.id_to_piece(i) for i in range(self.vocab_size)]
    self.word_starts = np.array(
      [p.startswith('▁') or self.sp.is_control(i) or self.sp.is_unknown(i)
       for i, p in enumerate(pieces)], bool)

  def encode_batch(self, texts: list[str]) -> list[list[int]]:
    return self.sp.encode(self._encodable(texts))

  def decode(self, ids: Iterable[int]) -> str:
    # Control pieces decode to '' in sentencepiece; spell them out so inspection shows them.
    out, run = [], []
    for i in ids:
      i = int(i)
      if self.sp.is_control(i) or i == self.pad_id:
        out.append(self.sp.decode(run))
        out.append(self.id_to_token(i))
        run = []
      else:
        run.append(i)
    out.append(self.sp.decode(run))
    return ' '.join(s for s in out if s)

  def id_to_token(self, i: int) -> str:
    return self.sp.id_to_piece(int(i))

  def token_to_id(self, token: str) -> int | None:
    return _sp_id(self.sp, token)

  def save(self, directory: str) -> list[str]:
    storage.makedirs(directory)
    path = os.path.join(directory, _SP_MODEL)
    with storage.open(path, 'wb') as f:
      f.write(self.proto)
    return [path]


def _sp_id(sp, token: str) -> int | None:
  i = sp.piece_to_id(token)
  return None if (i == sp.unk_id() and token != sp.id_to_piece(i)) else i


class _TokenizersBackend(Tokenizer):
  """A tokenizer run by the `tokenizers` package (`self.tok`), specials never added."""

  tok: object  # tokenizers.Tokenizer

  def encode_batch(self, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in self.tok.encode_batch(self._encodable(texts),
                                                 add_special_tokens=False)]

  def decode(self, ids: Iterable[int]) -> str:
    return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)


class WordPieceTokenizer(_TokenizersBackend):
  """BERT's WordPiece from a vocab.txt (one token per line), via the `tokenizers` library."""

  def __init__(self, vocab: list[str], lower_case: bool):
    import tokenizers
    from tokenizers import decoders, models, normalizers, pre_tokenizers
    self.vocab, self.lower_case = vocab, lower_case
    self._ids = {t: i for i, t in enumerate(vocab)}
    if len(self._ids) != len(vocab):
      raise DataError('the vocab.txt repeats a token: give one distinct token per line')
    self.vocab_size = len(vocab)
    self._init_specials(self._ids.get)
    # Special tokens are deliberately not registered as "added tokens": like the original BERT
    # tokenizer, a literal "[MASK]" in the text is split into ordinary pieces.
    self.tok = tokenizers.Tokenizer(models.WordPiece(self._ids, unk_token='[UNK]'))
    self.tok.normalizer = normalizers.BertNormalizer(
      clean_text=True, handle_chinese_chars=True, strip_accents=lower_case, lowercase=lower_case)
    self.tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    self.tok.decoder = decoders.WordPiece()
    self.word_starts = np.array([not t.startswith('##') for t in vocab], bool)

  def id_to_token(self, i: int) -> str:
    return self.vocab[int(i)]

  def token_to_id(self, token: str) -> int | None:
    return self._ids.get(token)

  def save(self, directory: str) -> list[str]:
    storage.makedirs(directory)
    paths = [os.path.join(directory, _VOCAB), os.path.join(directory, _CONFIG)]
    with storage.open(paths[0], 'w', encoding='utf-8') as f:
      f.write(''.join(t + '\n' for t in self.vocab))
    with storage.open(paths[1], 'w', encoding='utf-8') as f:
      json.dump({'type': 'wordpiece', 'lower_case': self.lower_case}, f)
    return paths


class JsonTokenizer(_TokenizersBackend):
  """A Hugging Face `tokenizer.json` (any model the `tokenizers` package reads: ModernBERT's
  byte-level BPE, ...) whose vocabulary has [PAD] [UNK] [CLS] [SEP] [MASK]. Its post-processor
  ([CLS] ... [SEP] templates) is not applied: the data pipeline places specials itself. A word
  starts at a piece that begins with a space marker (byte-level 'Ġ', SentencePiece '▁'), or
  at a special token."""

  def __init__(self, text: str):
    import tokenizers
    try:
      self.tok = tokenizers.Tokenizer.from_str(text)
    except Exception as e:  # noqa: BLE001 - tokenizers raises its own Exception type
      raise DataError(f'not a tokenizer.json the tokenizers package reads ({e})'
                      .split('\n')[0]) from None
    self.text = text
    self.vocab_size = self.tok.get_vocab_size(with_added_tokens=True)
    self._init_specials(self.tok.token_to_id)
    tokens = [self.tok.id_to_token(i) or '' for i in range(self.vocab_size)]
    specials = {t.content for t in self.tok.get_added_tokens_decoder().values() if t.special}
    self.word_starts = np.array([t[:1] in ('Ġ', '▁') or t in specials for t in tokens], bool)

  def id_to_token(self, i: int) -> str:
    return self.tok.id_to_token(int(i))

  def token_to_id(self, token: str) -> int | None:
    return self.tok.token_to_id(token)

  def save(self, directory: str) -> list[str]:
    storage.makedirs(directory)
    path = os.path.join(directory, _JSON)
    with storage.open(path, 'w', encoding='utf-8') as f:
      f.write(self.text)
    return [path]


def load_tokenizer(path: str, lower_case: bool | None = None) -> Tokenizer:
  """Loads a directory (tokenizer.model, vocab.txt or tokenizer.json, in that order), a .model
  file, a tokenizer.json or a vocab.txt.

  For WordPiece, a tokenizer_config.json next to the vocab (written by `save`) decides the casing;
  without one, `lower_case` does (None: True, uncased BERT).
  """
  path = os.path.expanduser(storage.check(path))
  if storage.isdir(path):
    for name in (_SP_MODEL, _VOCAB, _JSON):
      if storage.exists(os.path.join(path, name)):
        return load_tokenizer(os.path.join(path, name), lower_case)
    raise DataError(f'{path} holds none of {_SP_MODEL}, {_VOCAB}, {_JSON}: point data.tokenizer '
                    'at one')
  if not storage.isfile(path):
    raise DataError(f'tokenizer {path} does not exist: set data.tokenizer to a .model, vocab.txt, '
                    "tokenizer.json or directory, or to '' to train one")
  if path.endswith('.model'):
    with storage.open(path, 'rb') as f:
      proto = f.read()
    try:
      return SentencePieceTokenizer(proto)
    except RuntimeError:
      raise DataError(f'{path} is not a SentencePiece model: give a valid .model file') from None
  if path.endswith('.json'):
    try:
      return JsonTokenizer(storage.read_text(path))
    except DataError as e:
      raise DataError(f'{path}: {e}') from None
  try:
    with storage.open(path, encoding='utf-8') as f:
      vocab = [line.rstrip('\r\n') for line in f]
  except UnicodeDecodeError:
    raise DataError(f'{path} is not a UTF-8 vocab.txt: give one token per line') from None
  while vocab and not vocab[-1]:
    vocab.pop()
  config = os.path.join(os.path.dirname(path), _CONFIG)
  if storage.exists(config):
    with storage.open(config, encoding='utf-8') as f:
      lower_case = bool(json.load(f).get('lower_case', True))
  return WordPieceTokenizer(vocab, True if lower_case is None else lower_case)


def sentence_iterator(documents: list[list[str]]) -> Iterator[str]:
  for doc in documents:
    yield from doc


def train_sentencepiece(documents: list[list[str]], vocab_size: int,
                        character_coverage: float = 0.9999) -> SentencePieceTokenizer:
  """Trains a unigram SentencePiece model in memory, deterministically (fixed seed, no shuffle).

  `hard_vocab_limit=False` lets a small corpus produce fewer pieces than asked rather than fail;
  the model's vocabulary size comes from the tokenizer, not from data.vocab_size.
  """
  return _train(sentence_iterator(documents), vocab_size, character_coverage, 10_000_000, False)


def train_sentencepiece_sample(sentences: list[str], vocab_size: int,
                               character_coverage: float = 0.9999) -> SentencePieceTokenizer:
  """Trains on a bounded sample (preparation draws it): SentencePiece keeps all of it
  (input_sentence_size = its length) and shuffles it with its seeded generator."""
  size = len(sentences) if len(sentences) > 100 else 0  # sentencepiece: 0 = all, else > 100
  return _train(iter(sentences), vocab_size, character_coverage, size, True)


def _train(sentences: Iterator[str], vocab_size: int, character_coverage: float,
           input_sentence_size: int, shuffle: bool) -> SentencePieceTokenizer:
  import sentencepiece as spm
  if vocab_size < len(SPECIALS) + 2:
    raise DataError(f'data.vocab_size={vocab_size} is too small: use at least 100')
  start = time.time()
  logging.info('Training a SentencePiece tokenizer (vocab_size=%d)...', vocab_size)
  model = io.BytesIO()
  spm.set_random_generator_seed(0)
  try:
    spm.SentencePieceTrainer.train(
      sentence_iterator=sentences, model_writer=model, vocab_size=vocab_size,
      model_type='unigram', pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, pad_piece='[PAD]',
      unk_piece='[UNK]', control_symbols=['[CLS]', '[SEP]', '[MASK]'], hard_vocab_limit=False,
      character_coverage=character_coverage, shuffle_input_sentence=shuffle,
      input_sentence_size=input_sentence_size, num_threads=2, minloglevel=2)
  except RuntimeError as e:
    raise DataError(_training_hint(str(e).splitlines()[0], vocab_size,
                                   character_coverage)) from None
  tok = SentencePieceTokenizer(model.getvalue())
  logging.info('Trained SentencePiece: %d pieces in %.1fs', tok.vocab_size, time.time() - start)
  return tok


def _training_hint(message: str, vocab_size: int, character_coverage: float) -> str:
  """SentencePiece's failure as one line that says which way to move."""
  m = re.search(r'required_chars\. (\d+) vs (\d+)', message)
  if m:
    need = int(m.group(2))  # the corpus's kept characters plus the special pieces
    return (f'SentencePiece training failed: data.vocab_size={vocab_size} is smaller than the '
            f"{need} pieces the corpus's characters need: raise data.vocab_size to at least "
            f'{need} or lower data.character_coverage (now {character_coverage:g}, e.g. 0.995)')
  return (f'SentencePiece training failed ({message}): use a larger corpus or a smaller '
          'data.vocab_size')


def get_tokenizer(config, workdir: str, documents: list[list[str]],
                  cache_dir: str | None = None) -> Tokenizer:
  """The run's tokenizer: `workdir/tokenizer/` when resuming, else loaded or trained, then saved.

  A trained model is also kept in `cache_dir` keyed by the corpus and vocab size, so a new workdir
  on the same corpus does not train again.
  """
  directory = os.path.join(workdir, 'tokenizer')
  if storage.isdir(directory) and storage.listdir(directory):
    logging.info('Reusing the tokenizer in %s (data.tokenizer is ignored on resume)', directory)
    return load_tokenizer(directory)
  d = config.data
  if d.tokenizer:
    tok = load_tokenizer(d.tokenizer, bool(d.lower_case))
  else:
    cached = None
    if cache_dir:
      # Fine-tuning configs have no data.corpus: their texts are all in `documents`.
      key = cache.digest({'corpus': d.get('corpus'), 'vocab_size': d.vocab_size, 'version': 1,
                          'documents': cache.digest(documents)})
      cached = os.path.join(cache_dir, f'spm-{key}.model')
    if cached and storage.exists(cached):
      tok = load_tokenizer(cached)
    else:
      tok = train_sentencepiece(documents, int(d.vocab_size),
                                float(d.character_coverage))
      if cached:
        cache.write_bytes(cached, tok.proto)
  if storage.is_remote(directory):  # a bucket cannot rename: each file is one whole object
    tok.save(directory)
    return tok
  tmp = directory + '.tmp'  # saved whole, then renamed: a crash never leaves half a tokenizer
  shutil.rmtree(tmp, ignore_errors=True)
  tok.save(tmp)
  if os.path.isdir(directory):
    os.rmdir(directory)  # empty (checked above)
  os.replace(tmp, directory)
  return tok
