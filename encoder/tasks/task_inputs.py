"""What the tasks share: resolved vocabulary and label fields, eval-set names, dummy inputs."""

from __future__ import annotations

from encoder.data.finetune.file_readers import split_list
from encoder.errors import ConfigError, DataError


def batch_examples(batch: dict) -> int:
  """The examples in a host batch: its rows, or a packed batch's examples (the distinct
  `input_segmentation` ids of each row, numbered 1, 2, ...)."""
  segmentation = batch.get('input_segmentation')
  if segmentation is None:
    return int(batch['weight' if 'input_ids' not in batch else 'input_ids'].shape[0])
  return int(segmentation.max(axis=-1).sum())


def vocab_fields(config, tokenizer) -> dict:
  """model.vocab_size from the tokenizer, refusing a smaller explicit one."""
  vocab, given = tokenizer.vocab_size, config.model.vocab_size
  if given is not None and given < vocab:
    raise ConfigError(f'model.vocab_size={given} is smaller than the tokenizer\'s vocabulary '
                      f'({vocab})')
  return {'model.vocab_size': vocab if given is None else given}


def label_fields(config, names: list[str], what: str = 'labels') -> dict:
  """data.num_labels and data.labels from the label set the data has (saved in config.json,
  so `classify` and `tag` can name them), refusing a different explicit count."""
  if config.data.num_labels not in (None, len(names)):
    raise ConfigError(f'data.num_labels={config.data.num_labels} but the data has '
                      f'{len(names)} {what} ({", ".join(names)})')
  return {'data.num_labels': len(names), 'data.labels': ','.join(names)}


def label_ids(values: list, wheres: list[str], names: list[str]) -> list[int]:
  """Raw labels (names, or ids as int or digit strings) -> ids into `names`; DataError naming
  the first label outside the set and where it was read."""
  index = {n: i for i, n in enumerate(names)}
  ids = []
  for value, where in zip(values, wheres, strict=True):
    key = str(value)
    if key in index:
      ids.append(index[key])
    elif _is_id(key) and int(key) < len(names):
      ids.append(int(key))
    else:
      shown = ', '.join(names[:20]) + (', ...' if len(names) > 20 else '')
      raise DataError(f'{where}: label {value!r} is not in the label set ({shown}); set '
                      'data.labels to every label, comma-separated')
  return ids


def infer_names(values: list) -> list[str]:
  """A label set from the training labels: ids 0..max if all are integers, else sorted names."""
  keys = [str(v) for v in values]
  if keys and all(_is_id(k) for k in keys):
    return [str(i) for i in range(max(int(k) for k in keys) + 1)]
  return sorted(set(keys))


def _is_id(key: str) -> bool:
  """ASCII digits only: '²' and '٣' pass str.isdigit but are no label ids."""
  return key.isascii() and key.isdigit()


def given_names(config) -> list[str] | None:
  return split_list(config.data.labels) if config.data.labels else None


def eval_set_name(index: int, source: str) -> str:
  """'eval' for the first eval set; later ones are named after their split or file, e.g.
  'mismatched' for MNLI's validation_mismatched, and suffix their metrics (accuracy_mismatched)."""
  if index == 0:
    return 'eval'
  base = source.rsplit('/', 1)[-1].rsplit('.', 1)[0]
  return base.removeprefix('validation_') or f'eval{index}'


def eval_sources(config) -> tuple[bool, str, list[str]]:
  """(local?, train source, eval sources): data.train/data.eval files, else data.tfds splits."""
  d = config.data
  if d.train:
    evals = split_list(d.eval)
    if not evals:
      raise ConfigError('data.train is a local file, so data.eval must name the eval file(s)')
    return True, d.train, evals
  if d.tfds:
    return False, d.train_split, split_list(d.eval_splits)
  raise ConfigError('set data.train and data.eval (local files) or data.tfds (e.g. glue/sst2)')


def metric_suffix(name: str) -> str:
  return '' if name == 'eval' else f'_{name}'


def eval_slices(data, num_predictions: int):
  """(eval set, its first row in the predictions, rows) of each eval set the predictions cover;
  with train.eval_batches > 0 they cover only a prefix, and later sets may be left out. Rows,
  not examples: a SQuAD question may span several windows."""
  offset = 0
  for s in data.eval_sets:
    n = min(len(s.arrays['input_ids']), num_predictions - offset)
    if n <= 0:
      return
    yield s, offset, n
    offset += n


def dummy_inputs(config, batch_size: int) -> dict:
  """The encoder's three input fields at the configured length: the shapes `init` traces."""
  import jax.numpy as jnp
  shape = (batch_size, config.data.max_seq_length)
  return {'input_ids': jnp.zeros(shape, jnp.int32), 'segment_ids': jnp.zeros(shape, jnp.int32),
          'input_mask': jnp.ones(shape, jnp.int32)}
