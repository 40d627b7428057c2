"""QQP (GLUE) duplicate-question pairs: accuracy and F1 of the duplicate class.

  tfds build glue/qqp --file_format=array_record   # once
  python launch.py --exp classify_qqp --config.init_from=runs/mlm_nsp_base

Expected: accuracy ~0.91, F1 ~0.88 from BERT-base on dev (Devlin et al., 2019).
"""

from experiments import finetune_base

DESCRIPTION = 'GLUE QQP duplicate questions (accuracy, F1) on a pretrained encoder'


def get_config(arg=None):
  c = finetune_base.glue_config('classify_qqp', 'qqp', num_labels=2)
  return finetune_base.apply_variants(c, arg, 'pair')
