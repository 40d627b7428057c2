"""STS-B (GLUE) sentence-pair similarity in [0, 5]: regression (one output, mean squared error).

  tfds build glue/stsb --file_format=array_record   # once
  python launch.py --exp classify_stsb --config.init_from=runs/mlm_nsp_base

Metrics: `pearson`, `spearman` (and `mse`); best by pearson. Expected: Spearman ~0.86 from
BERT-base (Devlin et al., 2019).
"""

from experiments import _finetune, _variants

DESCRIPTION = 'GLUE STS-B similarity regression (Pearson, Spearman) on a pretrained encoder'


def get_config(arg=None):
  c = _finetune.glue_config('classify_stsb', 'stsb', num_labels=1, best_metric='pearson')
  return _variants.apply_variants(c, arg, _finetune.variants('regression'))
