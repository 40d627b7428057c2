"""ELECTRA-Small (Clark et al., 2020): replaced-token detection with the paper's Small recipe.

  python launch.py --exp electra_small
  python launch.py --exp electra_small:smoke     # seconds on one CPU, the same code path

The discriminator is 12 layers of 256 (4 heads, MLP 1,024) over embeddings 128 wide projected
up to 256 (`model.embedding_size`); the generator a quarter of its width (64, 1 head, MLP 256),
the same depth, sharing the embeddings (`electra.*`, encoder/tasks/electra.py). 15% of tokens
are chosen, 85% of those shown as [MASK] and the rest as they are (no random tokens: the
generator's samples are the replacements); the loss is the generator's MLM loss plus 50 times
the discriminator's. AdamW at 5e-4 (weight decay 0.01), 10,000 warmup steps then a linear
decay over 1 M steps of 128 sequences of 128 tokens, dropout 0.1, gradients clipped at 1.0:
google-research/electra's configure_pretraining.py for model_size=small. ELECTRA has no pooler
(its classifiers read the [CLS] token) and no NSP.

The corpus is the schema's default (the embedded Python documentation) unless
`data.corpus` names another; the paper's was Wikipedia and BooksCorpus with BERT's uncased
WordPiece vocabulary (`--config.data.tokenizer=VOCAB.txt`).
"""

from encoder import config_schema
from experiments import _common, _variants

DESCRIPTION = 'ELECTRA-Small: replaced-token detection, 12 x 256 over 128-wide embeddings'

RECIPE = {
    'model.size': 'mini',  # BERT's architecture (post-LN, learned positions, GELU) ...
    'model.num_layers': 12,  # ... in ELECTRA-Small's shape
    'model.hidden_size': 256,
    'model.num_heads': 4,
    'model.intermediate_size': 1024,
    'model.embedding_size': 128,
    'model.dropout_rate': 0.1,
    'model.attention_dropout_rate': 0.1,
    'electra.generator_size': 0.25,
    'electra.discriminator_weight': 50.0,
    'electra.embedding_sharing': 'shared',
    'data.max_seq_length': 128,
    'data.mask_rate': 0.15,
    'train.num_steps': 1_000_000,
    'train.batch_size': 128,
    'train.learning_rate': 5e-4,
    'train.schedule': 'linear',
    'train.warmup_steps': 10_000,
    'train.weight_decay': 0.01,
    'train.b1': 0.9,
    'train.b2': 0.999,
    'train.eps': 1e-6,
    'train.clip_norm': 1.0,
}


def smoke(c):
  """Seconds on one CPU: a 2-layer discriminator of 128 over 64-wide embeddings."""
  _common.pretraining_smoke(c)
  c.model.num_layers, c.model.hidden_size, c.model.num_heads = 2, 128, 2
  c.model.intermediate_size, c.model.embedding_size = 512, 64
  return c


def get_config(arg=None):
  c = config_schema.electra_config('electra_small')
  for key, value in RECIPE.items():
    section, field = key.split('.')
    c[section][field] = value
  return _variants.apply_variants(c, arg, {'smoke': smoke})
