"""SQuAD v2.0 extractive question answering, unanswerable questions included (EM / F1).

  tfds build squad/v2.0 --file_format=array_record   # once
  python launch.py --exp qa_squad_v2 --config.init_from=runs/mlm_nsp_base

qa_squad's recipe with `data.version_2_with_negative`: a question is answered when its null
score (the lowest [CLS] start + end logit over its windows) minus the best span's score is at
most `data.null_score_diff_threshold`. Eval adds `has_ans_*`/`no_ans_*` EM and F1 and
`best_exact_match`/`best_f1` with the thresholds reaching them (set the threshold to
`best_f1_threshold` for the final predictions). Expected: dev F1 ~0.76-0.77 from BERT-base.
"""

from experiments import _variants, qa_squad

DESCRIPTION = 'SQuAD v2.0 extractive QA with unanswerable questions (EM / F1)'


def get_config(arg=None):
  return _variants.apply_variants(qa_squad.squad_config('qa_squad_v2', version_2=True), arg,
                                  qa_squad.variants(version_2=True))
