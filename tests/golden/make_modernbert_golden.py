"""Makes the ModernBERT golden files the conversion tests compare against, with Hugging Face
transformers' PyTorch ModernBERT (eager attention, float32): an implementation independent of
ours. No download: the model is random and the tokenizer is trained here.

  pip install torch==2.13.0 transformers==5.24.0
  python -m tests.golden.make_modernbert_golden

Writes, next to this file:
  tiny_modernbert/      a tiny random ModernBertForMaskedLM (hidden 32, 4 layers: 0 and 3
                        global, 1 and 2 local with an 8-token window) saved by save_pretrained
                        (config.json, model.safetensors) and a byte-level BPE tokenizer.json
  tiny_modernbert.npz   on a padded batch whose rows are longer than the window: input_ids,
                        attention_mask, last_hidden_state (ModernBertModel) and MLM logits
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
DIRECTORY = os.path.join(HERE, 'tiny_modernbert')
SPECIALS = ['[UNK]', '[CLS]', '[SEP]', '[PAD]', '[MASK]']
CORPUS = ['The bank approved the loan quickly, and the river ran past the old house.',
          'Paris is the capital of France; London is the capital of England.',
          'A dog ran through the city at night while the cat sat on the red roof.',
          'She walked to the market, bought bread and water, and walked home slowly.',
          'Colorless green ideas sleep furiously, said the linguist in 1957.']
BATCH = ['The bank approved the [MASK] quickly, and the river ran past the house.',
         'Paris is the [MASK] of France.',
         'A dog ran through the city at night while the cat sat on the red [MASK].']


def train_tokenizer() -> Tokenizer:
  """Byte-level BPE as ModernBERT's (its 50k vocabulary cut to ~300 merges of CORPUS)."""
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(CORPUS * 4, trainer)
  return tok


def tiny_config(tok: Tokenizer, **changes) -> transformers.ModernBertConfig:
  fields = dict(
      vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=48,
      num_hidden_layers=4, num_attention_heads=4, max_position_embeddings=64,
      local_attention=8, global_attn_every_n_layers=3, global_rope_theta=160_000.0,
      local_rope_theta=10_000.0, norm_eps=1e-5, pad_token_id=tok.token_to_id('[PAD]'),
      bos_token_id=tok.token_to_id('[CLS]'), cls_token_id=tok.token_to_id('[CLS]'),
      eos_token_id=tok.token_to_id('[SEP]'), sep_token_id=tok.token_to_id('[SEP]'),
      attn_implementation='eager')
  fields.update(changes)
  return transformers.ModernBertConfig(**fields)


def random_model(config, seed: int = 0) -> transformers.ModernBertForMaskedLM:
  """HF's initialisation plus noise on every parameter (norm scales and biases too), so a
  wrong mapping cannot hide behind ones and zeros."""
  torch.manual_seed(seed)
  model = transformers.ModernBertForMaskedLM(config).eval()
  with torch.no_grad():
    for _, p in model.named_parameters():
      p.add_(0.1 * torch.randn_like(p))
  return model


def encode(tok: Tokenizer, texts: list[str]) -> dict[str, np.ndarray]:
  """[CLS] text [SEP], right-padded with [PAD]: ids and the attention mask."""
  rows = [[tok.token_to_id('[CLS]'), *tok.encode(t, add_special_tokens=False).ids,
           tok.token_to_id('[SEP]')] for t in texts]
  length = max(map(len, rows))
  ids = np.full((len(rows), length), tok.token_to_id('[PAD]'), np.int32)
  mask = np.zeros((len(rows), length), np.int32)
  for i, row in enumerate(rows):
    ids[i, :len(row)], mask[i, :len(row)] = row, 1
  return {'input_ids': ids, 'attention_mask': mask}


def outputs(model, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  inputs = {k: torch.from_numpy(v.astype(np.int64)) for k, v in batch.items()}
  with torch.no_grad():
    hidden = model.model(**inputs).last_hidden_state
    logits = model(**inputs).logits
  return {'last_hidden_state': hidden.numpy(), 'logits': logits.numpy()}


def main() -> None:
  tok = train_tokenizer()
  model = random_model(tiny_config(tok))
  shutil.rmtree(DIRECTORY, ignore_errors=True)
  model.save_pretrained(DIRECTORY, safe_serialization=True)
  tok.save(os.path.join(DIRECTORY, 'tokenizer.json'))
  for name in os.listdir(DIRECTORY):  # keep it small: config, weights, tokenizer
    if name not in ('config.json', 'model.safetensors', 'tokenizer.json'):
      os.remove(os.path.join(DIRECTORY, name))
  batch = encode(tok, BATCH)
  np.savez_compressed(os.path.join(HERE, 'tiny_modernbert.npz'), **batch,
                      **outputs(model, batch))


if __name__ == '__main__':
  main()
  print('wrote', DIRECTORY, 'and tiny_modernbert.npz')
