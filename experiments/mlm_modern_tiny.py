"""ModernBERT's recipe at BERT-tiny's size, on the embedded corpus: minutes on a laptop CPU.

  python launch.py --exp mlm_modern_tiny
  python launch.py --exp mlm_modern_tiny --sweep ladder     # BERT -> this, one change per run

`mlm_modern_base`'s recipe (no NSP, packed documents, 30% masking, RoPE, local/global
attention, GeGLU, pre-LN without biases, StableAdamW, warmup-stable-decay with a 1-sqrt decay
over the last 20% of steps) at `mlm_nsp_tiny`'s size and budget: 2 layers, hidden 128, 2 heads,
the same 1k SentencePiece vocabulary, 4,500 steps of 32 rows x 64 tokens, peak lr 1.5e-3 after
200 warmup steps, no dropout. The MLP is GeGLU at BERT-tiny's parameter count (2 x 344 in,
344 out: 132k weights per layer against GELU's 2 x 128 x 512 = 131k), so the ladder's GeGLU
step changes the activation, not the size; layer 1 is local with a 32-token window (keys at
most 16 positions away, against rows of 64). Held-out masks stay at 15%, so its accuracy
compares with mlm_nsp_tiny's (docs/ablations.md, "BERT and the modern recipe").
"""

from encoder import config_schema
from encoder.sweep.grid import Arm
from experiments import _common, _variants

DESCRIPTION = 'ModernBERT recipe at BERT-tiny size on the embedded Python docs; minutes on a CPU'

# The ladder: BERT's recipe without NSP, then one modern change per run, cumulatively, each
# run a complete config at this experiment's budget (same steps, rows and tokens per row).
# Each step lists the settings that undo it, BERT's values; run k undoes steps k+1.. only, so
# the last run is mlm_modern_tiny itself. The order: what a step reads first (packed rows;
# NSP's leftovers, the segment table and the pooler, go with pairs), then the block from its
# skeleton out (norm placement and the residual-scaled init that goes with pre-LN, biases, the
# MLP, positions, the attention span), then the objective (mask rate), then the optimisation
# (schedule, optimizer), which act on whatever model is there: the order of ModernBERT's own
# account of its changes (Warner et al., 2024, section 2.1), data before model before training.
LADDER_STEPS = (
    ('packing', ('data.packing=none', 'model.type_vocab_size=2', 'model.pooler=tanh')),
    ('pre_ln', ('model.norm=post', 'model.first_attention_norm=true', 'model.init=bert',
                'model.layer_norm_eps=1e-12')),
    ('no_bias', ('model.use_bias=true',)),
    ('geglu', ('model.activation=gelu', 'model.intermediate_size=512')),
    ('rope', ('model.position_embedding=learned',)),
    ('local_global', ('model.local_window=0',)),
    ('mask_30', ('data.mask_rate=0.15',)),
    ('wsd', ('train.schedule=linear',)),
    ('stable_adamw', ('train.optimizer=adamw', 'train.b2=0.999', 'train.clip_norm=1.0')),
)


def ladder() -> list:
  """The ladder as one axis of Arms: `0-bert` (every step undone), then `k-STEP`."""
  arms = [Arm('0-bert', tuple(o for _, undo in LADDER_STEPS for o in undo))]
  for k, (name, _) in enumerate(LADDER_STEPS, start=1):
    arms.append(Arm(f'{k}-{name}', tuple(o for _, undo in LADDER_STEPS[k:] for o in undo)))
  return [('ladder', arms)]


SWEEPS = {'ladder': ladder}


def get_config(arg=None):
  c = config_schema.pretraining_config('mlm_modern_tiny')
  m = c.model
  m.size = 'modern_tiny'
  m.intermediate_size = 344  # GeGLU at BERT-tiny's MLP parameter count (see above)
  m.max_position_embeddings = 512
  m.rope_theta = 10_000.0  # mlm_modern_base's phase 1
  m.dropout_rate = m.attention_dropout_rate = 0.0
  d = c.data
  d.vocab_size = 1024  # mlm_nsp_tiny's
  d.nsp = False
  d.packing = 'documents'
  d.mask_rate = 0.3
  d.max_seq_length = 64
  d.eval_fraction = 0.05  # mlm_nsp_tiny's held-out documents
  t = c.train
  t.optimizer = 'stable_adamw'
  t.learning_rate = 1.5e-3
  t.b2 = 0.98
  t.weight_decay = 0.01  # mlm_nsp_tiny's (and BERT's)
  t.clip_norm = 0.0  # StableAdamW clips each tensor's update instead
  t.schedule = 'wsd'
  t.batch_size = 32
  t.num_steps = 4500  # mlm_nsp_tiny's budget
  t.warmup_steps = 200
  t.decay_steps = 900  # the last 20% (Hagele et al., 2024), 1-sqrt
  t.log_every = 50
  t.eval_every = 500
  t.checkpoint_every = 500
  return _variants.apply_variants(c, arg, {'smoke': _common.modern_smoke})
