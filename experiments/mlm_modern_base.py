"""ModernBERT-base pretraining: its shape and recipe (Warner et al., 2024) in the same modules.

  python launch.py --exp mlm_modern_base                                # 1024 tokens, stable
  python launch.py --exp mlm_modern_base:context --workdir runs/mlm_modern_base-context \
      --config.train.decay_from=runs/mlm_modern_base:360000             # 8192 tokens, decay

The model: 22 layers, hidden 768, GeGLU MLP 1152 (x2), pre-LN, no biases, RoPE, a 128-token
window on each layer but every third (model.size=modern_base; encoder/config_schema.py). The
recipe: MLM only (no NSP), documents packed into rows, 30% of tokens masked (held-out masks
stay at 15%), no dropout, StableAdamW (b2 0.98), a warmup-stable-decay schedule. The paper's
phases, in tokens, become steps here at its batch of 4,608 rows x 1,024 tokens (4.7M):
  1. 1.7T tokens at sequence length 1,024, global RoPE theta 10,000, lr 8e-4 after a 3B-token
     warmup, constant to the end (train.decay_steps=0): `mlm_modern_base`, 360k steps;
  2. context extension: 300B tokens at 8,192 (576 rows, the same tokens per step), global
     theta 160,000, lr 3e-4, its last 50B tokens decaying as 1-sqrt: `:context`, branched off
     phase 1's last (or any) checkpoint with train.decay_from, 63.6k steps (10.6k decaying).
ModernBERT's weight decay (1e-5) is "fully decoupled": multiplied by lr / peak lr, not lr;
AdamW's form of the same decay is 1e-5 / 8e-4 = 0.0125, which train.weight_decay holds.
Not modelled: the paper's batch-size warmup (768 -> 4,608 rows over 50B tokens) and its
tokenizer (OLMo's BPE, 50,368 entries; give its tokenizer.json as data.tokenizer, or a
SentencePiece of that size is trained on the corpus).

On the embedded corpus this runs as written; on a real corpus set
--config.data.corpus=tfds:... or text:GLOB (docs/scaling.md). Variants: `smoke` (seconds on
one CPU, the same recipe on a tiny modern model), `context` (phase 2).
"""

from ml_collections import config_dict

from encoder import config_schema
from experiments import _common, _variants

DESCRIPTION = 'ModernBERT-base (149M) MLM pretraining, its recipe: packed, 30% mask, WSD'
ROWS, LENGTH, LONG = 4608, 1024, 8192  # the paper's batch and its two sequence lengths


def steps(tokens: float, rows: int, length: int) -> int:
  """A token budget of the paper in steps of `rows` x `length` tokens."""
  return round(tokens / (rows * length))


def recipe(c: config_dict.ConfigDict, peak_lr: float, warmup_tokens: float,
           rows: int) -> config_dict.ConfigDict:
  """ModernBERT's phase 1 at a peak learning rate, warmup and batch (mlm_modern_large's too)."""
  m = c.model
  m.rope_theta = 10_000.0  # phase 1; the context phase raises it to 160k
  m.dropout_rate = m.attention_dropout_rate = 0.0
  d = c.data
  d.vocab_size = 50_368
  d.nsp = False
  d.packing = 'documents'
  d.mask_rate = 0.3
  d.max_seq_length = LENGTH
  t = c.train
  t.optimizer = 'stable_adamw'
  t.learning_rate = peak_lr
  t.b2 = 0.98
  t.weight_decay = 1e-5 / peak_lr  # the paper's fully decoupled 1e-5, in AdamW's form
  t.clip_norm = 0.0  # StableAdamW clips each tensor's update instead
  t.schedule = 'wsd'  # decay_steps 0: phase 1 stays at the peak; the context phase decays
  t.batch_size = rows
  t.warmup_steps = steps(warmup_tokens, rows, LENGTH)
  t.num_steps = steps(1.7e12, rows, LENGTH)
  return c


def context(c: config_dict.ConfigDict) -> None:
  """Phase 2: 8,192 tokens, theta 160k, lr 3e-4 for 300B tokens, the last 50B decaying. Branch
  it off a phase-1 checkpoint (train.decay_from=DIR:STEP); its steps continue that count."""
  rows = c.train.batch_size * LENGTH // LONG
  c.model.rope_theta = 160_000.0
  c.data.max_seq_length = LONG
  c.train.batch_size = rows
  c.train.learning_rate = 3e-4
  c.train.num_steps += steps(300e9, rows, LONG)
  c.train.decay_steps = steps(50e9, rows, LONG)


VARIANTS: _variants.Variants = {'smoke': _common.modern_smoke, 'context': context}


def get_config(arg=None):
  c = config_schema.pretraining_config('mlm_modern_base')
  c.model.size = 'modern_base'
  recipe(c, peak_lr=8e-4, warmup_tokens=3e9, rows=ROWS)
  return _variants.apply_variants(c, arg, VARIANTS)
