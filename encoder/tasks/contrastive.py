"""Contrastive fine-tuning of a bi-encoder: sentence embeddings for similarity and retrieval.

Each text is embedded alone (`BertForEmbedding`: the encoder, then `embed.pooling` over its
tokens, the pooling `encoder.load(run).embed` applies to the trained run), and the loss
compares the vectors by cosine similarity times `contrastive.scale`:
  mnrl    (anchor, positive[, hard negatives]): InfoNCE, "multiple negatives ranking" in
          sentence-transformers: each anchor's positive against every other positive and every
          hard negative of the *global* batch (gathered from all devices, so 1 device and 8
          train alike), cross-entropy; `symmetric` adds positives -> anchors (CLIP's loss).
  cosent  scored pairs (STS): log(1 + sum exp(s(k,l) - s(i,j)) over pairs scored higher than
          others (Su, 2022), over the global batch.
`contrastive.matryoshka_dims` adds the loss at each leading-dimension prefix (Kusupati et al.,
2022; summed, as sentence-transformers' MatryoshkaLoss), so truncated vectors work too.

The loss couples the examples of a batch (`couples_examples`): the step hands it the pmap axis
to gather over, and splits a batch into microbatches (`train.grad_accum_steps`) by caching the
vectors (GradCache, Gao et al., 2021), so the negative pool is the whole global batch however
it is split. Eval scores whole eval sets (`predict` + `evaluate`): each anchor ranks every eval
positive (`accuracy`: the top one is its own, `mrr@10`), or for scored pairs the Spearman and
Pearson correlation of the cosine with the scores.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from encoder.data.finetune import contrastive_data, file_readers, finetuning_data, text_pairs
from encoder.errors import ConfigError, DataError
from encoder.modules.config import model_config
from encoder.modules.task_models import BertForEmbedding
from encoder.tasks import metrics, task_inputs, with_loss_settings

LOSSES = ('mnrl', 'cosent')
POOLINGS = ('mean', 'cls', 'last')
MASKED = -1e9  # the similarity of a candidate that is no negative (padding, the same anchor)
couples_examples = True


def build_model(config) -> BertForEmbedding:
  pooling = config.embed.pooling
  if pooling not in POOLINGS:
    raise ConfigError(f"embed.pooling='{pooling}' is not one of {', '.join(POOLINGS)}")
  return BertForEmbedding(model_config(config.model, config.data.vocab_size), pooling)


def dummy_batch(config, batch_size: int = 1) -> dict:
  length, k = config.data.max_seq_length, int(config.contrastive.num_negatives)
  ids = jnp.ones((batch_size, length), jnp.int32)
  return {'anchor_ids': ids, 'anchor_mask': ids, 'positive_ids': ids, 'positive_mask': ids,
          'negative_ids': jnp.ones((batch_size, k, length), jnp.int32),
          'negative_mask': jnp.ones((batch_size, k, length), jnp.int32),
          'group': jnp.arange(batch_size, dtype=jnp.int32),
          'score': jnp.zeros((batch_size,), jnp.float32),
          'weight': jnp.ones((batch_size,), jnp.float32)}


def loss_denominators(batch: dict) -> dict:
  return {'examples': batch['weight'].astype(jnp.float32).sum()}


def _unit(x: jax.Array) -> jax.Array:
  return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _gather(x: jax.Array, axis_name: str | None) -> jax.Array:
  """The global batch's rows, in device order (this device's rows as they are under jit)."""
  return x if axis_name is None else jax.lax.all_gather(x, axis_name, tiled=True)


def _first_row(batch: dict, axis_name: str | None) -> jax.Array:
  """Where this device's rows start in the gathered global batch."""
  rows = batch['weight'].shape[0]
  return 0 if axis_name is None else jax.lax.axis_index(axis_name) * rows


def ranking_loss(anchor, positive, negative, batch, scale: float, symmetric: bool,
                 axis_name: str | None) -> tuple[jax.Array, jax.Array]:
  """Per-example InfoNCE over the global batch's candidates, and whether the positive ranked
  first. Vectors are unit length; `negative` is [rows, k, dim] or None."""
  weight, group = batch['weight'], batch['group']
  rows = weight.shape[0]
  target = _first_row(batch, axis_name) + jnp.arange(rows)
  all_weight, all_group = _gather(weight, axis_name), _gather(group, axis_name)
  columns = jnp.arange(all_weight.shape[0])
  # Another example of the same anchor is a second positive, not a negative: masked out.
  keep = (all_weight[None, :] > 0) & ((all_group[None, :] != group[:, None])
                                      | (columns[None, :] == target[:, None]))

  def one_way(queries, keys, extra=None, extra_keep=None):
    logits = jnp.where(keep, scale * queries @ _gather(keys, axis_name).T, MASKED)
    if extra is not None:
      logits = jnp.concatenate([logits, jnp.where(extra_keep[None, :],
                                                  scale * queries @ extra.T, MASKED)], -1)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, target)
    return losses, (logits.argmax(-1) == target).astype(jnp.float32)

  extra = extra_keep = None
  if negative is not None:
    real = (batch['negative_mask'].sum(-1) > 0) & (weight[:, None] > 0)  # [rows, k]
    extra = _gather(negative, axis_name).reshape(-1, negative.shape[-1])
    extra_keep = _gather(real, axis_name).reshape(-1)
  losses, correct = one_way(anchor, positive, extra, extra_keep)
  if symmetric:  # positives -> anchors: every other anchor of the batch is a negative
    losses = (losses + one_way(positive, anchor)[0]) / 2
  return losses, correct


def cosent_loss(anchor, positive, batch, scale: float, axis_name: str | None) -> jax.Array:
  """CoSENT over the global batch (one logsumexp over every ordered pair), the same on every
  device; each device's share is 1/devices of it, so the shares' gradients sum to its own."""
  cosine = _gather((anchor * positive).sum(-1) * scale, axis_name)
  score, weight = _gather(batch['score'], axis_name), _gather(batch['weight'], axis_name)
  ordered = (score[:, None] < score[None, :]) & (weight[:, None] > 0) & (weight[None, :] > 0)
  differences = jnp.where(ordered, cosine[:, None] - cosine[None, :], MASKED).reshape(-1)
  loss = jax.nn.logsumexp(jnp.concatenate([jnp.zeros(1), differences]))
  devices = 1 if axis_name is None else jax.lax.psum(1, axis_name)
  return loss / devices


def loss_and_metrics(outputs: dict, batch: dict, denominators: dict | None = None,
                     axis_name: str | None = None, *, settings=None) -> tuple[jax.Array, dict]:
  """This device's share of the batch loss, and sums of loss and in-batch accuracy.
  `settings` is the config's `contrastive` section (bound by `bind`)."""
  if denominators is None:
    denominators = loss_denominators(batch)
  s = settings
  weight = batch['weight'].astype(jnp.float32)
  examples = jnp.maximum(denominators['examples'], 1.0)
  dims = _dims(s.matryoshka_dims, outputs['anchor'].shape[-1])
  total, correct = 0.0, jnp.zeros_like(weight)
  for dim in dims:
    vectors = {role: _unit(v[..., :dim]) for role, v in outputs.items()}
    if _loss(s) == 'cosent':
      total = total + cosent_loss(vectors['anchor'], vectors['positive'], batch, s.scale,
                                  axis_name)
    else:
      losses, hits = ranking_loss(vectors['anchor'], vectors['positive'],
                                  vectors.get('negative'), batch, s.scale, s.symmetric,
                                  axis_name)
      total = total + (losses * weight).sum() / examples
      if dim == dims[0]:
        correct = hits
  # The loss sum is the share times the global count, so reduce_metrics gives the loss back.
  sums = {'loss': total * examples, 'correct': (correct * weight).sum(), 'count': weight.sum()}
  return total, sums


def bind(config):
  """The task with the run's `contrastive` settings bound into its loss (a module-level task
  has no config; the step calls `loss_and_metrics(outputs, batch, denominators, axis_name)`)."""
  check(config)
  return with_loss_settings(globals(), loss_and_metrics, settings=config.contrastive)


def _loss(s) -> str:
  return 'cosent' if s.loss == 'cosent' else 'mnrl'


def _dims(spec, hidden: int) -> list[int]:
  """The full width first, then each Matryoshka prefix width below it."""
  dims = sorted({int(d) for d in file_readers.split_list(spec)} - {hidden}, reverse=True)
  if any(d < 1 or d > hidden for d in dims):
    raise ConfigError(f"contrastive.matryoshka_dims='{spec}': widths must lie in 1..{hidden}")
  return [hidden, *dims]


def check(config) -> None:
  s = config.contrastive
  if s.loss is not None and s.loss not in LOSSES:
    raise ConfigError(f"contrastive.loss='{s.loss}' is not one of {', '.join(LOSSES)}")
  if not float(s.scale) > 0:
    raise ConfigError(f'contrastive.scale={s.scale}: use a positive number (20 = temperature '
                      '0.05)')
  if int(s.num_negatives) < 0:
    raise ConfigError(f'contrastive.num_negatives={s.num_negatives}: use 0 or more')
  if str(config.data.packing).strip().lower() != 'none':
    raise ConfigError(f"data.packing='{config.data.packing}': contrastive runs embed each "
                      'text alone (cut to its length bucket); use data.packing=none')


def reduce_metrics(sums: dict) -> dict:
  count = max(float(sums['count']), 1.0)
  return {'loss': float(sums['loss']) / count, 'accuracy': float(sums['correct']) / count}


def predict(outputs: dict, batch: dict) -> dict:
  return {'anchor': _unit(outputs['anchor']), 'positive': _unit(outputs['positive'])}


def evaluate(data, predictions: dict) -> tuple[dict, dict]:
  """Each eval set scored whole: retrieval among its positives, or correlations of scores."""
  results, records = {}, {}
  offset = 0
  for s in data.eval_sets:
    n = min(len(s.examples), len(predictions['anchor']) - offset)
    if n <= 0:
      break
    anchor = np.asarray(predictions['anchor'][offset:offset + n], np.float64)
    positive = np.asarray(predictions['positive'][offset:offset + n], np.float64)
    offset += n
    suffix = task_inputs.metric_suffix(s.name)
    cosine = (anchor * positive).sum(-1)
    if s.extra['scored']:
      scores = metrics.regression_scores(s.arrays['score'][:n], cosine)
      rows = [{'gold': float(g), 'cosine': float(c)} for g, c in
              zip(s.arrays['score'][:n], cosine, strict=True)]
    else:
      scores, ranks = retrieval_scores(anchor, positive, s.arrays['group'][:n])
      rows = [{'rank': int(r), 'cosine': float(c)} for r, c in zip(ranks, cosine, strict=True)]
    results.update({f'{k}{suffix}': v for k, v in scores.items()})
    records[s.name] = [{'anchor': e.anchor, 'positive': e.positive, **row}
                       for e, row in zip(s.examples, rows, strict=False)]
  return results, records


def retrieval_scores(anchor: np.ndarray, positive: np.ndarray, group: np.ndarray,
                     block: int = 1024) -> tuple[dict, np.ndarray]:
  """Each distinct anchor ranks every positive of the set (its own group's are relevant):
  accuracy (a relevant one first) and MRR@10; and each example's rank of its own positive
  among the other groups' positives (1 = first)."""
  first = np.unique(group, return_index=True)[1]
  hits, reciprocal, ranks = [], [], np.empty(len(group), np.int64)
  for start in range(0, len(group), block):
    rows = np.arange(start, min(start + block, len(group)))
    sims = anchor[rows] @ positive.T  # [block, n]
    relevant = group[rows][:, None] == group[None, :]
    own = sims[np.arange(len(rows)), rows]
    ranks[rows] = 1 + ((sims > own[:, None]) & ~relevant).sum(1)
    best_other = np.where(relevant, -np.inf, sims).max(1)
    best_relevant = np.where(relevant, sims, -np.inf).max(1)
    # The first relevant document's rank: 1 + the irrelevant ones scored above it.
    rank = 1 + ((sims > best_relevant[:, None]) & ~relevant).sum(1)
    keep = np.isin(rows, first)
    hits.extend((best_relevant >= best_other)[keep])
    reciprocal.extend(np.where(rank <= 10, 1.0 / rank, 0.0)[keep])
  return {'accuracy': float(np.mean(hits)), 'mrr@10': float(np.mean(reciprocal))}, ranks


def datasets(config, workdir: str, process_index: int = 0, process_count: int = 1):
  """Reads and encodes the train and eval sets (`data.train`, `data.eval`: files or BEIR
  folders)."""
  check(config)
  d = config.data
  if not d.train or not d.eval:
    raise ConfigError('set data.train and data.eval: JSONL/TSV pairs or triplets, or BEIR '
                      'folders (see encoder/data/finetune/text_pairs.py)')
  read = lambda source, split: text_pairs.read(  # noqa: E731
      source, d.text_columns, d.label_column, d.format, d.header, split)
  train = read(d.train, d.train_split)
  evals = [(task_inputs.eval_set_name(i, s), read(s, _eval_split(d, i)))
           for i, s in enumerate(file_readers.split_list(d.eval))]
  scored = train[0].score is not None
  if config.contrastive.loss is not None and (config.contrastive.loss == 'cosent') != scored:
    raise DataError(f"contrastive.loss={config.contrastive.loss} but '{d.train}' holds "
                    f"{'scored pairs' if scored else 'unscored pairs or triplets'}")
  tokenizer = finetuning_data.finetuning_tokenizer(
      config, workdir, [t for e in train for t in (e.anchor, e.positive, *e.negatives)])
  # Hard negatives per example: as many as asked and the data has (none: no negative pass).
  k = min(int(config.contrastive.num_negatives), max(len(e.negatives) for e in train))
  length = int(d.max_seq_length)

  def encode(examples):
    return contrastive_data.encode(tokenizer, examples, length, k)

  eval_sets = [finetuning_data.EvalSet(name, ex, encode(ex),
                                       {'scored': ex[0].score is not None})
               for name, ex in evals]
  return contrastive_data.ContrastiveData(config, tokenizer, encode(train), eval_sets,
                                          process_index, process_count,
                                          {'scored': scored})


def _eval_split(d, index: int) -> str:
  """A BEIR eval folder's qrels split: the first of data.eval_splits, one per eval folder."""
  splits = file_readers.split_list(d.eval_splits) or ['test']
  return splits[min(index, len(splits) - 1)]


def resolved_fields(config, data) -> dict:
  """The vocabulary size, and the loss the data calls for when none is set."""
  fields = task_inputs.vocab_fields(config, data.tokenizer)
  if config.contrastive.loss is None:
    fields['contrastive.loss'] = 'cosent' if data.info['scored'] else 'mnrl'
  return fields


write_predictions = None
prepare_data = None
