"""Every config field with its one default, by section: what an experiment starts from.

A run's config holds only the knobs its task reads: `pretraining_config` and `finetuning_config`
add their own data (and train) fields to the shared sections, and `span_qa` adds SQuAD's. An
experiment (experiments/NAME.py) starts from one of them and sets what differs.

Model fields marked `preset` are None until the run's config is resolved
(encoder/train/resolve.py): then `model.size`'s preset (SIZES below) fills every one the
experiment or the command line left unset, so a field set explicitly wins over the preset
and `--config.model.size=mini` changes the shape. Fields the data answers (the vocabulary,
the labels, the run length of an epoch-based run) stay None until the data is read; FROM_DATA
says where each comes from. encoder/saved_config.py reads a run's config.json against this
schema.

Jax-free: the command line prints and checks configs without starting JAX.
"""

from __future__ import annotations

from typing import Any

from ml_collections import config_dict

from encoder.errors import ConfigError

# (num_layers, hidden_size, num_heads) of the BERT family (Turc et al., 2019; Devlin et al., 2019).
BERT_SIZES = {
    'tiny': (2, 128, 2),
    'mini': (4, 256, 4),
    'small': (4, 512, 8),
    'medium': (8, 512, 8),
    'base': (12, 768, 12),
    'large': (24, 1024, 16),
}
# BERT's architecture: what every BERT size sets besides its shape (and a 4 x hidden MLP).
BERT_ARCHITECTURE = {
    'norm': 'post', 'first_attention_norm': True, 'embedding_norm': True, 'use_bias': True,
    'activation': 'gelu', 'position_embedding': 'learned', 'rope_theta': 10_000.0,
    'local_rope_theta': 10_000.0, 'local_window': 0, 'global_every': 1, 'type_vocab_size': 2,
    'max_position_embeddings': 512, 'layer_norm_eps': 1e-12, 'init': 'bert', 'init_cutoff': 2.0,
    'pooler': 'tanh', 'pooling': 'cls', 'classifier_head': 'linear'}
# ModernBERT's architecture (Warner et al., 2024; transformers' ModernBertConfig): pre-LN with a
# final norm and no norm before layer 0 (the embedding norm just ran), no biases, GeGLU, RoPE
# (theta 160k on global layers, 10k on local ones), a 128-token window (64 each side) on every
# layer but each third (0, 3, 6, ...), no segment embeddings, no pooler, and a dense + GELU +
# norm before each fine-tuning classifier.
MODERN_ARCHITECTURE = {
    **BERT_ARCHITECTURE,
    'norm': 'pre', 'first_attention_norm': False, 'embedding_norm': True, 'use_bias': False,
    'activation': 'geglu', 'position_embedding': 'rope', 'rope_theta': 160_000.0,
    'local_rope_theta': 10_000.0, 'local_window': 128, 'global_every': 3,
    'type_vocab_size': 0, 'max_position_embeddings': 8192, 'layer_norm_eps': 1e-5,
    'init': 'modern', 'pooler': 'none', 'pooling': 'cls', 'classifier_head': 'mlp'}
# ModernBERT-base and -large exactly; tiny and mini take BERT-tiny/mini's layers, width and
# heads with base's MLP ratio (1.5), their window scaled to the 64-128-token CPU sequences.
MODERN_SIZES = {
    'modern_tiny': dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=192,
                        local_window=32),
    'modern_mini': dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=384,
                        local_window=64),
    'modern_base': dict(num_layers=22, hidden_size=768, num_heads=12, intermediate_size=1152),
    'modern_large': dict(num_layers=28, hidden_size=1024, num_heads=16, intermediate_size=2624),
}
SIZES = (*BERT_SIZES, *MODERN_SIZES)
# The tasks that pretrain on a corpus (the pretraining sections, --prepare_data, --inspect_data).
PRETRAINING_TASKS = ('pretraining', 'electra')
SHAPE_FIELDS = ('num_layers', 'hidden_size', 'num_heads', 'intermediate_size')
# The model fields a size preset sets, with their types (for typed overrides while unset).
PRESET_FIELDS = {
    'num_layers': int, 'hidden_size': int, 'num_heads': int, 'intermediate_size': int,
    **{name: type(value) for name, value in BERT_ARCHITECTURE.items()}}
# Fields only the data answers, and where their value comes from (`--print_config` says so).
FROM_DATA = {
    'model.vocab_size': "the tokenizer's vocabulary",
    'data.labels': 'the training labels (or the TFDS dataset)',
    'data.num_labels': 'the label set',
    'train.num_steps': 'train.num_epochs over the training examples',
    'train.warmup_steps': 'train.warmup_fraction of the run',
    'contrastive.loss': 'the data: cosent for scored pairs, else mnrl',
    'data.target_mean': 'the training targets, with data.standardize_targets (else unused)',
    'data.target_std': 'the training targets, with data.standardize_targets (else unused)',
}


def preset(size: str) -> dict[str, Any]:
  """Every PRESET_FIELDS value of `model.size=size`; ConfigError for an unknown size."""
  if size in BERT_SIZES:
    layers, hidden, heads = BERT_SIZES[size]
    return {**BERT_ARCHITECTURE, 'num_layers': layers, 'hidden_size': hidden,
            'num_heads': heads, 'intermediate_size': 4 * hidden}
  if size in MODERN_SIZES:
    return {**MODERN_ARCHITECTURE, **MODERN_SIZES[size]}
  raise ConfigError(f"model.size='{size}' is not one of {', '.join(SIZES)}")


def fill_model(model) -> dict[str, Any]:
  """`model` (a section or a partial dict of it) with every field: the preset fields left unset
  (None) take `model.size`'s value (a BERT size's MLP is 4 x the hidden size, as set), the
  others their default. What `model_config` builds from, and what a resolved config holds."""
  values = {k: v for k, v in dict(model).items() if v is not None}
  values = {**{k: v for k, v in model_section().to_dict().items() if v is not None}, **values}
  size = values['size']
  if size not in SIZES:
    raise ConfigError(f"model.size='{size}' is not one of {', '.join(SIZES)}")
  filled = preset(size)
  if size in BERT_SIZES and 'intermediate_size' not in values:
    filled['intermediate_size'] = 4 * values.get('hidden_size', filled['hidden_size'])
  return {**filled, **values}


def model_section() -> config_dict.ConfigDict:
  """The encoder's shape and architecture (encoder/modules/config.py reads it)."""
  m = config_dict.ConfigDict()
  # A preset of every field marked `preset` below: tiny | mini | small | medium | base | large
  # (BERT's shapes and architecture) or modern_tiny | modern_mini | modern_base | modern_large
  # (ModernBERT's). A field set explicitly (in the experiment or with --config.) wins.
  m.size = 'base'
  for name, kind in PRESET_FIELDS.items():
    m[name] = config_dict.placeholder(kind)  # preset: see the comments below
  # The preset fields: num_layers, hidden_size, num_heads, intermediate_size (the MLP width;
  # BERT 4 x hidden); max_position_embeddings (the learned position table: BERT 512);
  # type_vocab_size (segment ids: BERT 2, 0 no table); norm (post: BERT | pre: pre-LN with a
  # final LayerNorm); first_attention_norm (pre-LN: norm before layer 0); embedding_norm
  # (LayerNorm after the embeddings); use_bias (biases of dense layers and norms);
  # activation (gelu: exact erf | gelu_tanh: original TF code | geglu: ModernBERT | swiglu:
  # NeoBERT); position_embedding (learned: BERT | rope | none); rope_theta and
  # local_rope_theta (RoPE bases of global and local layers); local_window and global_every
  # (local layers see keys within local_window // 2 positions; layer i is global when
  # i % global_every == 0; local_window 0: every layer global); layer_norm_eps; init (bert |
  # modern: depth-scaled output layers) and init_cutoff (modern: truncation in deviations);
  # pooler (tanh: BERT's dense + tanh, NSP reads it | none); pooling (cls | mean of the real
  # tokens); classifier_head (linear: BERT | mlp: ModernBERT's dense + act + norm first).
  m.vocab_size = config_dict.placeholder(int)  # from the data: the tokenizer's vocabulary
  # The width of the token (and position, segment) embeddings when it differs from the
  # hidden size: a dense layer projects them up (ELECTRA-Small embeds in 128 for a hidden
  # size of 256; its generator projects the shared embeddings down). 0: the hidden size (BERT).
  m.embedding_size = 0
  m.attention = 'bidirectional'  # bidirectional | causal
  # How scores are computed (the mathematics is the same): auto | explicit | xla | cudnn |
  # blockwise | splash. auto: blockwise on CPU (and any backend without a fused kernel),
  # splash on TPU, cuDNN on NVIDIA GPUs, each falling back to blockwise per layer where its
  # kernel cannot take the mask or the dropout (encoder/modules/attention.py says which).
  m.attention_impl = 'auto'
  # The blockwise form's block of queries and of keys: a train step's row of at most one
  # block, and a forward pass's (evaluation, inference) of at most two, takes the explicit
  # form (the same values); longer rows visit only the blocks their mask reaches.
  m.attention_block_size = 256
  # Recompute each layer's activations in the backward pass instead of keeping them
  # (activation checkpointing): less memory for long rows, each block's forward pass run
  # twice. XLA counts 24% more FLOPs in BERT-base's train step (19% in mini's; 128 tokens,
  # batch 32: `python -m benchmarks.remat_cost`; embeddings, MLM head and update are not
  # recomputed).
  m.remat = False
  m.dtype = 'float32'  # compute dtype: float32 | bfloat16; params stay float32
  m.dropout_rate = 0.1
  m.attention_dropout_rate = 0.1
  m.initializer_range = 0.02
  return m


def data_section() -> config_dict.ConfigDict:
  """The data fields both paths read: the tokenizer, the sequence length, TFDS, the cache."""
  d = config_dict.ConfigDict()
  d.tokenizer = ''  # '' trains SentencePiece on the training text; or a .model / vocab.txt / dir
  d.vocab_size = 30522  # size of the SentencePiece vocabulary trained when tokenizer is ''
  d.character_coverage = 0.9999  # SentencePiece: share of the text's characters kept whole
  d.lower_case = True  # for WordPiece vocab.txt files (uncased BERT)
  d.max_seq_length = 128
  d.tfds_data_dir = ''  # '' is TFDS's default (~/tensorflow_datasets)
  d.cache_dir = ''  # '' caches tokenized data in WORKDIR/cache
  d.prefetch = 4  # batches prepared ahead in a background thread
  # Several examples (fine-tuning: none | examples) or documents (pretraining: none |
  # documents | full_sentences) per row; each path's fields below say more.
  d.packing = 'none'
  return d


def train_section() -> config_dict.ConfigDict:
  """The optimiser, schedule, logging and checkpoint fields (BERT's pretraining recipe)."""
  t = config_dict.ConfigDict()
  t.seed = 0
  t.num_steps = 1_000_000
  # > 0: a wall-clock budget in minutes (docs/training.md#a-wall-clock-budget). The run trains
  # until its training clock nearly reaches it, then evaluates and saves, ending within it; the
  # schedule's decay is fitted into it (warmup stays in steps) and train.num_steps stays an
  # upper bound. The clock starts with the training loop (compiles, evaluations and saves
  # count; data preparation before it does not) and resumes from the checkpoint. Not bit for
  # bit reproducible: the learning rate follows the clock. 0: off.
  t.max_minutes = 0.0
  t.batch_size = 256  # global: per-device batch x devices across all hosts
  t.grad_accum_steps = 1
  # adamw | lamb | stable_adamw (AdamW with per-tensor update clipping: ModernBERT's)
  t.optimizer = 'adamw'
  t.learning_rate = 1e-4
  # linear (warmup then linear decay to 0) | cosine | constant | wsd (warmup, constant, then
  # the last decay_steps steps decay to 0 in decay_shape: linear | cosine | 1-sqrt)
  t.schedule = 'linear'
  t.warmup_steps = 10_000
  t.decay_steps = 0  # wsd: 0 keeps the rate constant to the end (a stable run to branch from)
  t.decay_shape = '1-sqrt'
  # DIR:STEP (or DIR, its newest step): start from that run's checkpoint with its optimizer
  # state, step and data position, in this workdir: one stable wsd run feeds several decays.
  t.decay_from = ''
  t.weight_decay = 0.01
  t.b1 = 0.9
  t.b2 = 0.999
  t.eps = 1e-6
  t.clip_norm = 1.0  # global-norm gradient clipping; 0 disables
  t.log_every = 100
  t.eval_every = 10_000
  t.eval_batches = 20
  t.checkpoint_every = 10_000
  t.keep_checkpoints = 3
  t.stop_at_step = 0  # >0: save and stop after this step, as if preempted (time-sliced jobs)
  # A NaN/inf loss or gradient norm stops the run (exit 2, the last good checkpoint kept);
  # true skips such steps instead (no update) and counts them in train metrics `skipped_steps`.
  t.skip_nonfinite = False
  # JAX's persistent compilation cache (train/xla_cache.py): auto (~/.cache/encoder/jax, or
  # $XDG_CACHE_HOME/encoder/jax), none, or a local folder; JAX_COMPILATION_CACHE_DIR wins.
  t.compile_cache = 'auto'
  # The PRNG behind dropout (train/prng.py): threefry (JAX's default) | rbg | unsafe_rbg (XLA's
  # RngBitGenerator draws the masks; t5x trains with unsafe_rbg). It changes which masks are
  # drawn, not what the model computes; a run resumes with the masks it would have drawn.
  t.rng_impl = 'threefry'
  return t


def parallel_section() -> config_dict.ConfigDict:
  """Devices and hosts: see docs/scaling.md."""
  p = config_dict.ConfigDict()
  p.strategy = 'pmap'  # pmap (replicated data parallel) | mesh (jit over data x fsdp x tensor)
  p.coordinator_address = ''  # multi-host: host:port of process 0 ('' = JAX_* env or auto)
  p.num_processes = 0  # 0: from JAX_NUM_PROCESSES or the cluster (TPU pod, SLURM, Open MPI)
  p.process_id = -1  # -1: from JAX_PROCESS_ID or the cluster
  p.initialize = 'auto'  # auto: join when a cluster is detected | always | never
  p.mesh_shape = config_dict.ConfigDict({'data': -1, 'fsdp': 1, 'tensor': 1})  # -1: the rest
  # Logical parameter axes -> mesh axes ('' keeps a dimension whole; 'a,b' splits over both).
  p.logical_axis_rules = config_dict.ConfigDict({
      'vocab': 'tensor', 'embed': 'fsdp', 'embed_out': '', 'heads': 'tensor', 'kv': '',
      'mlp': 'tensor'})
  return p


def embed_section() -> config_dict.ConfigDict:
  """How `encoder.load(run).embed(texts)` makes one vector per text by default: a
  sentence-transformers import (`python -m encoder.convert --from-hf`) sets the model's own."""
  e = config_dict.ConfigDict()
  e.pooling = 'mean'  # mean (over real tokens) | cls | last (the last real token)
  e.normalize = False  # unit-length vectors (cosine similarity = dot product)
  e.max_seq_length = 0  # tokens per text; 0: the model's position table
  # --to-hf also writes the sentence-transformers modules (modules.json, 1_Pooling, ...)
  e.sentence_transformers = False
  return e


def shared_config(experiment: str, task: str) -> config_dict.ConfigDict:
  """The sections every task reads."""
  c = config_dict.ConfigDict()
  c.experiment = experiment
  c.task = task  # pretraining | electra | classification | tagging | span_qa | contrastive
  # A run (or converted Hugging Face model) whose encoder weights this run starts from; its
  # architecture (model.*) and tokenizer come with them. Or a model on the Hub,
  # hf://ORG/NAME[@REVISION]: launch.py converts it once and records hf://ORG/NAME@COMMIT.
  c.init_from = ''
  c.model = model_section()
  c.data = data_section()
  c.train = train_section()
  c.parallel = parallel_section()
  c.embed = embed_section()
  return c


def pretraining_config(experiment: str) -> config_dict.ConfigDict:
  """BERT's pretraining (MLM + NSP): the shared sections plus the corpus, masking and NSP."""
  c = shared_config(experiment, 'pretraining')
  d = c.data
  d.corpus = 'python_docs'  # python_docs (embedded) | text:GLOB | tfds:NAME[/CONFIG][:SPLIT]
  d.short_seq_prob = 0.1
  d.nsp = True  # False: MLM-only instances (contiguous full-length segments, RoBERTa style)
  # data.packing: none keeps BERT's rows (sentence pairs, or with nsp=False one document's
  # sentences), padded when short; documents (needs nsp=False) fills rows with consecutive
  # documents, each piece [CLS] ... [SEP] attending only to itself; full_sentences is
  # RoBERTa's, one [CLS], attention across documents.
  d.mask_rate = 0.15
  d.eval_mask_rate = 0.15  # held-out masks; fixed so runs at other training rates compare
  # The training rate over steps (encoder/data/pretrain/mask_schedule.py): constant | linear
  # (to mask_rate_final at the last step) | steps ('STEP:RATE,...': the rate from each STEP on)
  d.mask_rate_schedule = 'constant'
  d.mask_rate_final = config_dict.placeholder(float)  # needed by mask_rate_schedule=linear
  d.mask_rate_steps = ''
  d.max_predictions_per_seq = config_dict.placeholder(int)  # None: round(seq x peak mask rate)
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
  t = c.train
  # Scales the NSP term's gradient (a loss weight; the reported loss stays MLM + NSP).
  t.nsp_loss_weight = 1.0
  # Set to move the weight linearly to this value from step nsp_ramp_start to nsp_ramp_end.
  t.nsp_loss_weight_final = config_dict.placeholder(float)
  t.nsp_ramp_start = 0
  t.nsp_ramp_end = 0
  # Replaced-token detection (ELECTRA), read when task=electra (encoder/tasks/electra.py): a
  # generator MLM fills the masked positions with samples, the discriminator (the encoder
  # kept) tells replaced tokens from originals. Set data.mask_token_prob=0.85 and
  # data.random_token_prob=0 for ELECTRA's masking (85% [MASK], 15% left as they are).
  e = c.electra = config_dict.ConfigDict()
  e.generator_size = 0.25  # the generator's hidden size, heads and MLP: this fraction of the
  #                          discriminator's (ELECTRA: 1/4 for Small, 1/3 for Base), same depth
  e.discriminator_weight = 50.0  # loss = generator MLM + this x discriminator (ELECTRA's 50)
  # shared (ELECTRA: one embedding block both read and both losses train) | disentangled
  # (DeBERTa-v3: the discriminator reads the shared word table through a stop-gradient plus a
  # learned difference) | none (the generator's own embeddings)
  e.embedding_sharing = 'shared'
  return c


def electra_config(experiment: str) -> config_dict.ConfigDict:
  """Replaced-token detection (ELECTRA; Clark et al., 2020) on the pretraining sections: its
  masking (85% [MASK], none random, the rest left), no NSP, and no pooler (ELECTRA has none;
  its classifiers read the [CLS] token)."""
  c = pretraining_config(experiment)
  c.task = 'electra'
  c.data.nsp = False
  c.data.mask_token_prob = 0.85
  c.data.random_token_prob = 0.0
  c.model.pooler = 'none'
  return c


def finetuning_config(experiment: str, task: str) -> config_dict.ConfigDict:
  """BERT's fine-tuning recipe (Devlin et al., 2019): AdamW, batch 32, 3 epochs, 10% linear
  warmup then linear decay, lr 2e-5, on an `init_from` encoder; classification and tagging
  data fields. SQuAD adds `span_qa`'s."""
  c = shared_config(experiment, task)
  c.init_from = 'runs/mlm_nsp_base'
  d = c.data
  d.tfds = ''  # a TFDS dataset (glue/sst2, conll2003); read only when data.train is ''
  d.train_split = 'train'
  d.eval_splits = 'validation'  # comma-separated; the first is the main eval set
  d.train = ''  # a local file: .tsv/.csv/.jsonl (classification), CoNLL (tagging), SQuAD JSON
  d.eval = ''  # local eval file(s), comma-separated; the first is the main eval set
  d.format = ''  # tsv | csv | jsonl; '' from the file extension
  d.header = True  # TSV/CSV: the first row names the columns (else columns are 0-based numbers)
  d.text_columns = ''  # one or two columns (A, B), comma-separated; '' = the GLUE config's
  d.label_column = 'label'
  d.labels = config_dict.placeholder(str)  # label names, comma-separated; None: from the data
  d.num_labels = config_dict.placeholder(int)  # None: len(labels); 1 = regression
  # Regression: fit the targets in standard deviations about their training mean (the head
  # outputs target_mean + target_std x its unit-scale value, so predictions stay in the
  # targets' units). Off in BERT's recipe; the mean and std are recorded from the data.
  d.standardize_targets = False
  # Pair tasks whose label does not depend on the order (paraphrase, similarity: MRPC, QQP,
  # STS-B) also train on every pair reversed, B then A: twice the examples per epoch. Off, as
  # BERT; eval sets are never swapped.
  d.swap_pairs = False
  d.target_mean = config_dict.placeholder(float)
  d.target_std = config_dict.placeholder(float)
  d.token_column = 0  # CoNLL: column of the word ...
  d.tag_column = config_dict.placeholder(int)  # ... and of its IOB tags; None: the last
  # Each batch is padded to the shortest of these lengths holding its longest example: auto
  # (16, 32, 64, ... up to max_seq_length), none (max_seq_length, as BERT), or e.g. 32,64,128;
  # one compile per length used.
  d.length_buckets = 'auto'
  d.bucket_window = 50  # train batches grouped by length: this many global batches at a time
  # data.packing=examples: several examples per max_seq_length row, each attending only to
  # itself (classification and tagging; SQuAD refuses it). Every step is then pack_rows rows,
  # so the examples per step vary around train.batch_size (logged at the start) and
  # length_buckets is ignored.
  # Rows per packed step; 0 (auto): as many as hold train.batch_size examples on average,
  # rounded up to a multiple of devices x train.grad_accum_steps (so it depends on the device
  # count: set it to compare or resume runs across device counts).
  d.pack_rows = 0
  t = c.train
  t.num_steps = 0  # > 0 overrides num_epochs
  t.num_epochs = 3.0
  t.batch_size = 32
  t.learning_rate = 2e-5
  t.warmup_steps = config_dict.placeholder(int)  # None: warmup_fraction of the run
  t.warmup_fraction = 0.1
  # Layer-wise learning-rate decay (ELECTRA; DeBERTa-v3): the head at learning_rate, encoder
  # layer i at learning_rate x layer_decay ** (num_layers - i), the embeddings lowest. 1: off,
  # as BERT; ELECTRA used 0.8 (base) and 0.9 (large).
  t.layer_decay = 1.0
  # Re-initialise the encoder's top N layers and its pooler instead of taking them from
  # init_from (Zhang et al., 2021: helps small fine-tuning sets). 0: off, as BERT.
  t.reinit_layers = 0
  t.log_every = 50
  t.eval_every = 1000
  t.eval_batches = 0  # 0: the whole eval set (metrics need every prediction)
  t.checkpoint_every = 1000
  t.keep_checkpoints = 1  # plus the best step, which is always kept
  t.best_metric = 'accuracy'  # the eval metric whose best step is kept (best.json)
  return c


def span_qa(c: config_dict.ConfigDict) -> config_dict.ConfigDict:
  """SQuAD's windows and decoding, on a fine-tuning config (BERT's run_squad defaults)."""
  d = c.data
  d.max_seq_length = 384
  d.doc_stride = 128  # tokens between the starts of consecutive windows over a long context
  d.max_query_length = 64  # longer questions are cut (and counted in the log)
  d.version_2_with_negative = False  # questions may have no answer (SQuAD 2.0)
  d.answer_start_mismatch = 'error'  # answer text not at answer_start: error | nearest | skip
  d.n_best_size = 20  # start and end candidates per window, and answers kept per question
  d.max_answer_length = 30  # tokens
  d.null_score_diff_threshold = 0.0  # v2: answer when null score - best span score <= this
  c.train.learning_rate = 3e-5
  c.train.num_epochs = 2.0
  c.train.best_metric = 'f1'
  return c


def contrastive(c: config_dict.ConfigDict) -> config_dict.ConfigDict:
  """Contrastive fine-tuning of a bi-encoder (encoder.tasks.contrastive), on a fine-tuning
  config: sentence-transformers' defaults (scale 20, batch 32 pairs, lr 2e-5, 10% warmup),
  one epoch, mean pooling (`embed.pooling`, inherited from an imported sentence-transformers
  model), texts cut at 128 tokens."""
  s = c.contrastive = config_dict.ConfigDict()
  # mnrl (in-batch negatives, InfoNCE) | cosent (scored pairs); None: cosent when the data
  # has a score column, else mnrl
  s.loss = config_dict.placeholder(str)
  s.scale = 20.0  # cosine similarity x scale: the inverse softmax temperature (20 = 0.05)
  s.symmetric = False  # mnrl: also rank anchors for each positive (CLIP's two-way loss)
  s.num_negatives = 1  # hard negatives kept per example (the data's negative columns)
  s.matryoshka_dims = ''  # e.g. 256,128,64: the loss also at these leading dimensions
  d = c.data
  d.text_columns = ''  # '' = anchor,positive[,negative] or sentence1,sentence2 (+ score)
  d.label_column = 'score'  # scored pairs' similarity column (cosent)
  d.eval_splits = 'test'  # a BEIR eval folder's qrels split
  c.train.num_epochs = 1.0
  c.train.best_metric = 'mrr@10'  # scored pairs: spearman
  return c


def task_config(task: str) -> config_dict.ConfigDict:
  """The schema of a run of `task`: every field its config holds, at its default."""
  if task in PRETRAINING_TASKS:
    c = pretraining_config('')
    c.task = task
    return c
  c = finetuning_config('', task)
  if task == 'contrastive':
    return contrastive(c)
  return span_qa(c) if task == 'span_qa' else c
