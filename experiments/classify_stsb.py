"""STS-B (GLUE) sentence-pair similarity in [0, 5]: regression (one output, mean squared error).

  tfds build glue/stsb --file_format=array_record   # once
  python launch.py --exp classify_stsb --config.init_from=runs/mlm_nsp_base

Metrics: `pearson`, `spearman` (and `mse`); best by pearson. Expected: Spearman ~0.86 from
BERT-base (Devlin et al., 2019).

The targets are standardised (`data.standardize_targets`): the head starts at the training
mean and fits unit-scale residuals, where BERT's plain head spends its first hundred steps
learning the bias (loss 8.6 at step 50; docs/finetuning.md measures the recipe).
"""

from experiments import _finetune, _variants

DESCRIPTION = 'GLUE STS-B similarity regression (Pearson, Spearman) on a pretrained encoder'


def get_config(arg=None):
  c = _finetune.glue_config('classify_stsb', 'stsb', num_labels=1, best_metric='pearson')
  c.data.standardize_targets = True
  return _variants.apply_variants(c, arg, _finetune.variants('regression'))
