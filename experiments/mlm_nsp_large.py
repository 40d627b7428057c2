"""BERT-large (340M) pretraining with MLM + NSP: the paper's recipe at the large size.

  python launch.py --exp mlm_nsp_large
  python launch.py --exp mlm_nsp_large --config.data.corpus=tfds:wikipedia/20230601.en:train

Same optimiser, schedule and batch as `mlm_nsp_base` (24 layers, hidden 1024, 16 heads).
Expected on Wikipedia + BooksCorpus after 1M steps: MLM accuracy ~0.70, NSP ~0.98.
"""

from experiments import _variants, mlm_nsp_base

DESCRIPTION = 'BERT-large (336M) MLM + NSP pretraining, the paper recipe'


def get_config(arg=None):
  c = mlm_nsp_base.base_config()
  c.experiment = 'mlm_nsp_large'
  c.model.size = 'large'
  return _variants.apply_variants(c, arg, mlm_nsp_base.VARIANTS)
