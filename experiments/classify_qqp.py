"""QQP (GLUE) duplicate-question pairs: accuracy and F1 of the duplicate class.

  tfds build glue/qqp --file_format=array_record   # once
  python launch.py --exp classify_qqp --config.init_from=runs/mlm_nsp_base

Expected: accuracy ~0.91, F1 ~0.88 from BERT-base on dev (Devlin et al., 2019).
"""

from experiments import _finetune, _variants

DESCRIPTION = 'GLUE QQP duplicate questions (accuracy, F1) on a pretrained encoder'


def get_config(arg=None):
  c = _finetune.glue_config('classify_qqp', 'qqp', num_labels=2)
  return _variants.apply_variants(c, arg, _finetune.variants('pair'))
