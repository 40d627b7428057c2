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

from experiments import _smoke_squad, finetune_base, mlm_nsp_base

DESCRIPTION = 'SQuAD v1.1 extractive QA (exact match / F1) on a pretrained encoder'


def squad_config(name: str, version_2: bool) -> config_dict.ConfigDict:
  c = finetune_base.finetune_config(name, 'span_qa')
  d = c.data
  d.tfds = 'squad/v2.0' if version_2 else 'squad/v1.1'
  d.train = ''  # a local SQuAD JSON file (read instead of data.tfds)
  d.max_seq_length = 384
  d.doc_stride = 128  # tokens between the starts of consecutive windows over a long context
  d.max_query_length = 64  # longer questions are cut (and counted in the log)
  d.version_2_with_negative = version_2  # questions may have no answer (SQuAD 2.0)
  d.answer_start_mismatch = 'error'  # answer text not at answer_start: error | nearest | skip
  d.n_best_size = 20  # start and end candidates per window, and answers kept per question
  d.max_answer_length = 30  # tokens
  d.null_score_diff_threshold = 0.0  # v2: answer when null score - best span score <= this
  t = c.train
  t.learning_rate = 3e-5
  t.num_epochs = 2.0
  t.best_metric = 'f1'
  return c


def smoke(c: config_dict.ConfigDict, version_2: bool) -> config_dict.ConfigDict:
  """A tiny model trained from scratch on tiny embedded-data files, in seconds on one CPU."""
  mlm_nsp_base.smoke(c)
  c.init_from = ''
  c.data.train, c.data.eval = _smoke_squad.smoke_files(version_2)
  d = c.data
  d.vocab_size, d.max_seq_length, d.doc_stride, d.max_query_length = 256, 64, 24, 12
  d.max_answer_length = 8
  t = c.train
  t.num_steps, t.num_epochs, t.batch_size, t.learning_rate = 0, 1.0, 8, 1e-3
  t.warmup_steps = None
  t.log_every, t.eval_every, t.checkpoint_every, t.eval_batches = 4, 8, 8, 0
  return c


def apply_variants(c: config_dict.ConfigDict, arg: str | None, version_2: bool
                   ) -> config_dict.ConfigDict:
  for option in filter(None, (arg or '').split(',')):
    if option == 'smoke':
      smoke(c, version_2)
    else:
      from encoder.errors import ConfigError
      raise ConfigError(f"unknown variant '{option}' for experiment {c.experiment} (known: smoke)")
  return c


def get_config(arg=None):
  return apply_variants(squad_config('qa_squad', version_2=False), arg, version_2=False)
