"""BERT-large (340M) pretraining with MLM + NSP: the paper's recipe at the large size.

  python launch.py --exp mlm_nsp_large
  python launch.py --exp mlm_nsp_large --config.data.corpus=tfds:wikipedia/20230601.en:train

Same optimiser, schedule and batch as `mlm_nsp_base` (24 layers, hidden 1024, 16 heads).
Expected on Wikipedia + BooksCorpus after 1M steps: MLM accuracy ~0.70, NSP ~0.98.
"""

from encoder import config_schema
from experiments import _common, _variants

DESCRIPTION = 'BERT-large (336M) MLM + NSP pretraining, the paper recipe'


def get_config(arg=None):
  c = config_schema.pretraining_config('mlm_nsp_large')
  c.model.size = 'large'
  return _variants.apply_variants(c, arg, {'smoke': _common.pretraining_smoke})
