"""Fine-tuning examples from prepared TFDS datasets (`glue/*`, `conll2003`), without TensorFlow.

Opened through `data.tfds_splits` (array_record files): nothing is downloaded or built here;
an unprepared dataset is a one-line DataError saying which `tfds build` to run.
"""

from __future__ import annotations

from encoder.data import tfds_splits
from encoder.data.finetune.file_readers import TaggedSentence, TextExample
from encoder.errors import DataError

# The text features of each GLUE config, in [CLS] A [SEP] B [SEP] order.
GLUE_TEXT = {'sst2': ('sentence',), 'cola': ('sentence',), 'mrpc': ('sentence1', 'sentence2'),
             'rte': ('sentence1', 'sentence2'), 'wnli': ('sentence1', 'sentence2'),
             'stsb': ('sentence1', 'sentence2'), 'qqp': ('question1', 'question2'),
             'qnli': ('question', 'sentence'), 'mnli': ('premise', 'hypothesis'),
             'ax': ('premise', 'hypothesis')}


def read_glue(name: str, split: str, data_dir: str = '', text_columns=None
              ) -> tuple[list[TextExample], list[str] | None]:
  """GLUE examples and the label names (None for STS-B's regression scores)."""
  config = name.partition('/')[2]
  columns = tuple(text_columns or GLUE_TEXT.get(config, ()))
  if not columns:
    raise DataError(f"unknown GLUE config in '{name}': set data.text_columns to its text "
                    f"features (known configs: {', '.join(GLUE_TEXT)})")
  source, info = tfds_splits.open_split(name, split, data_dir)
  feature = info.features['label']
  names = list(feature.names) if hasattr(feature, 'names') else None
  examples = []
  for i in range(len(source)):
    row = source[i]
    label = row['label']
    label = int(label) if names is not None else float(label)
    examples.append(TextExample(tuple(tfds_splits.text(row[c]) for c in columns), label,
                                f'tfds:{name}:{split}[{i}]'))
  return examples, names


def read_tagging(name: str, split: str, data_dir: str = '', token_feature: str = 'tokens',
                 tag_feature: str = 'ner') -> list[TaggedSentence]:
  """Sentences of a TFDS token-tagging dataset (conll2003: features `tokens` and `ner`)."""
  source, info = tfds_splits.open_split(name, split, data_dir)
  names = list(info.features[tag_feature].feature.names)
  sentences = []
  for i in range(len(source)):
    row = source[i]
    words = [tfds_splits.text(w) for w in row[token_feature]]
    tags = [names[int(t)] for t in row[tag_feature]]
    if len(words) != len(tags):
      raise DataError(f'tfds:{name}:{split}[{i}] has {len(words)} tokens but {len(tags)} tags')
    if words:
      sentences.append(TaggedSentence(words, tags, f'tfds:{name}:{split}[{i}]'))
  return sentences
