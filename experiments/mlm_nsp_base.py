"""BERT-base pretraining with MLM + NSP: the recipe of Devlin et al. (2019).

Sequence length 128, global batch 256, AdamW (lr 1e-4, beta2 0.999, eps 1e-6, weight decay 0.01
except LayerNorm and biases), 10k warmup steps then linear decay to 0, global-norm clipping 1.0,
1M steps. (The paper spends the last 10% of steps at sequence length 512: in one run,
`--config.data.max_seq_length=512 --config.data.first_phase_seq_length=128
--config.data.first_phase_steps=900000`; or as a second experiment with
`--config.data.max_seq_length=512 --config.init_from=runs/mlm_nsp_base`.)

On the embedded corpus (the Python documentation, no download):
  python launch.py --exp mlm_nsp_base
On English Wikipedia through TFDS (prepare it once with `tfds build wikipedia/20230601.en`):
  python launch.py --exp mlm_nsp_base --config.data.corpus=tfds:wikipedia/20230601.en:train

Expected: BERT-base reaches MLM accuracy ~0.65-0.70 and NSP accuracy ~0.97-0.98 on Wikipedia +
BooksCorpus after 1M steps (Devlin et al., 2019). Variants: `smoke` (seconds, on one CPU).
"""

from encoder import config_schema
from experiments import _common, _variants

DESCRIPTION = 'BERT-base (110M) MLM + NSP pretraining, the paper recipe'


def get_config(arg=None):
  # BERT-base and the paper's recipe are the schema's defaults: nothing differs.
  c = config_schema.pretraining_config('mlm_nsp_base')
  return _variants.apply_variants(c, arg, {'smoke': _common.pretraining_smoke})
