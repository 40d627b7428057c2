"""BERT-base pretraining with MLM + NSP: the recipe of Devlin et al. (2019).

Sequence length 128, global batch 256, AdamW (lr 1e-4, beta2 0.999, eps 1e-6, weight decay 0.01
except LayerNorm and biases), 10k warmup steps then linear decay to 0, global-norm clipping 1.0,
1M steps. (The paper spends the last 10% of steps at sequence length 512: in one run,
`--config.data.max_seq_length=512 --config.data.first_phase_seq_length=128
--config.data.first_phase_steps=900000`; or as a second experiment with
`--config.data.max_seq_length=512 --config.init_from=runs/mlm_nsp_base`.)

On the embedded corpus (the Python documentation, no download):
  python launch.py --exp mlm_nsp_base
On English Wikipedia through TFDS (prepare it once with `tfds build wikipedia/20230601.en`):
  python launch.py --exp mlm_nsp_base --config.data.corpus=tfds:wikipedia/20230601.en:train

Expected: BERT-base reaches MLM accuracy ~0.65-0.70 and NSP accuracy ~0.97-0.98 on Wikipedia +
BooksCorpus after 1M steps (Devlin et al., 2019). Variants: `smoke` (seconds, on one CPU).
"""

from ml_collections import config_dict

from experiments import _common, _variants

DESCRIPTION = 'BERT-base (110M) MLM + NSP pretraining, the paper recipe'


def base_config() -> config_dict.ConfigDict:
  """Every pretraining knob with BERT's defaults; the other pretraining experiments start here.

  The shared sections come from `_common`; the data fields below are read only by the
  pretraining data (encoder/data/pretrain/), so fine-tuning configs do not carry them.
  """
  c = _common.shared_config('mlm_nsp_base', 'pretraining')
  d = c.data
  d.corpus = 'python_docs'  # python_docs (embedded) | text:GLOB | tfds:NAME[/CONFIG][:SPLIT]
  d.short_seq_prob = 0.1
  d.nsp = True  # False: MLM-only instances (contiguous full-length segments, RoBERTa style)
  # data.packing (in _common): none keeps BERT's rows (sentence pairs, or with nsp=False one
  # document's sentences), padded when short; documents (needs nsp=False) fills rows with
  # consecutive documents, each piece [CLS] ... [SEP] attending only to itself; full_sentences
  # is RoBERTa's, one [CLS], attention across documents.
  d.mask_rate = 0.15
  d.eval_mask_rate = 0.15  # held-out masks; fixed so runs at other training rates compare
  # The training rate over steps (encoder/data/pretrain/mask_schedule.py): constant | linear
  # (to mask_rate_final at the last step) | steps ('STEP:RATE,...': the rate from each STEP on)
  d.mask_rate_schedule = 'constant'
  d.mask_rate_final = config_dict.placeholder(float)
  d.mask_rate_steps = ''
  d.max_predictions_per_seq = config_dict.placeholder(int)  # default round(seq * mask_rate)
  d.mask_token_prob = 0.8  # of selected tokens: 80% [MASK] ...
  d.random_token_prob = 0.1  # ... 10% a random token, the rest (10%) unchanged
  d.whole_word_masking = False
  d.dynamic_masking = True  # a fresh mask every epoch; False: dupe_factor static copies
  d.dupe_factor = 1  # instance passes over the corpus (the original used 10 with static masks)
  # Two sequence lengths, as BERT trained (128 for 90% of its steps, then 512): set these to
  # train the first data.first_phase_steps steps at this shorter length (0: one phase).
  d.first_phase_seq_length = 0
  d.first_phase_steps = 0
  d.eval_fraction = 0.02  # share of whole documents held out for eval
  d.max_eval_documents = 1000
  # Preparation (--prepare_data, or before the first training step): docs/scaling.md.
  d.prepared_dir = ''  # '' = CACHE_DIR/prepared-HASH of the corpus and data settings
  d.prepare_workers = 0  # processes preparing shards; 0 = the core count (same bits for any)
  d.prepare_shard_mb = 8.0  # text per input shard: the unit of parallel work and of resuming
  d.tokenizer_sample_sentences = 1_000_000  # the SentencePiece training sample (bounded)
  d.prepare_timeout_s = 86400  # multi-host: how long processes > 0 wait for process 0's data
  d.read_concurrency = 64  # bucket requests in flight per process reading the prepared corpus
  # Scales the NSP term's gradient (a loss weight; the reported loss stays MLM + NSP).
  c.train.nsp_loss_weight = 1.0
  # Set to move the weight linearly to this value from step nsp_ramp_start to nsp_ramp_end.
  c.train.nsp_loss_weight_final = config_dict.placeholder(float)
  c.train.nsp_ramp_start = 0
  c.train.nsp_ramp_end = 0
  return c


def smoke(c: config_dict.ConfigDict) -> config_dict.ConfigDict:
  """Shrinks any pretraining config to run in seconds on one CPU."""
  _common.shrink(c)
  c.data.max_eval_documents = 20
  return c


VARIANTS: _variants.Variants = {'smoke': smoke}


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  return _variants.apply_variants(base_config(), arg, VARIANTS)
