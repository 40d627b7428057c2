"""SQuAD v1.1 extractive question answering (EM / F1): BERT's run_squad recipe.

  tfds build squad/v1.1 --file_format=array_record   # once
  python launch.py --exp qa_squad --config.init_from=runs/mlm_nsp_base
Local SQuAD-format JSON files instead:
  python launch.py --exp qa_squad --config.data.train=train-v1.1.json \
      --config.data.eval=dev-v1.1.json

Windows of 384 tokens ([CLS] question [SEP] context [SEP]), 128 apart, questions cut to 64
tokens; lr 3e-5, batch 32, 2 epochs (over windows), 10% warmup, linear decay. Decoding: the
20 best starts and ends per window, answers of at most 30 tokens. Metrics `exact_match`, `f1`
(fractions; the official script prints them x100). Expected: dev EM ~0.81 / F1 ~0.88 from
BERT-base (Devlin et al., 2019). Then `encoder.load(WORKDIR).answer(question, context)`.
"""

from ml_collections import config_dict

from encoder import config_schema
from experiments import _finetune, _smoke_squad, _variants

DESCRIPTION = 'SQuAD v1.1 extractive QA (exact match / F1) on a pretrained encoder'


def squad_config(name: str, version_2: bool) -> config_dict.ConfigDict:
  """SQuAD v1.1 (or v2.0) from TFDS with BERT's run_squad recipe (the schema's span_qa)."""
  c = config_schema.span_qa(config_schema.finetuning_config(name, 'span_qa'))
  c.data.tfds = 'squad/v2.0' if version_2 else 'squad/v1.1'
  c.data.version_2_with_negative = version_2
  return c


def smoke(c: config_dict.ConfigDict, version_2: bool) -> config_dict.ConfigDict:
  """A tiny model trained from scratch on tiny embedded-data files, in seconds on one CPU."""
  _finetune.from_scratch(c)
  c.data.train, c.data.eval = _smoke_squad.smoke_files(version_2)
  d = c.data
  d.max_seq_length, d.doc_stride, d.max_query_length, d.max_answer_length = 64, 24, 12, 8
  t = c.train
  t.log_every, t.eval_every, t.checkpoint_every = 4, 8, 8
  return c


def variants(version_2: bool) -> _variants.Variants:
  """The `--exp qa_squad[_v2]:OPTION` variants; both experiments share them."""
  return {'smoke': lambda c: smoke(c, version_2)}


def get_config(arg=None):
  return _variants.apply_variants(squad_config('qa_squad', version_2=False), arg,
                                  variants(version_2=False))
