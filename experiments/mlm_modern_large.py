"""ModernBERT-large pretraining: `mlm_modern_base`'s recipe at the large shape (395M).

  python launch.py --exp mlm_modern_large
  python launch.py --exp mlm_modern_large:context --workdir runs/mlm_modern_large-context \
      --config.train.decay_from=runs/mlm_modern_large:STEP

28 layers, hidden 1024, GeGLU MLP 2624 (x2); the paper's batch of 4,928 rows, lr 5e-4 after a
2B-token warmup (Warner et al., 2024). The paper's large run plateaued at 5e-4 after 900B
tokens and was rolled back and restarted at 5e-5 for the remaining 800B: with a stable phase,
that is a branch (train.decay_from=DIR:STEP with --config.train.learning_rate=5e-5).
Variants as mlm_modern_base: `smoke`, `context`.
"""

from encoder import config_schema
from experiments import _variants, mlm_modern_base

DESCRIPTION = 'ModernBERT-large (395M) MLM pretraining, its recipe: packed, 30% mask, WSD'


def get_config(arg=None):
  c = config_schema.pretraining_config('mlm_modern_large')
  c.model.size = 'modern_large'
  mlm_modern_base.recipe(c, peak_lr=5e-4, warmup_tokens=2e9, rows=4928)
  return _variants.apply_variants(c, arg, mlm_modern_base.VARIANTS)
