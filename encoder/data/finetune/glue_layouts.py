"""The column layouts of GLUE's own TSV files, as its download unpacks them.

TFDS names GLUE's features alike across tasks (`sentence1`, `sentence2`, `label`); the files
of the GLUE download do not: MRPC's are `Quality  #1 ID  #2 ID  #1 String  #2 String`,
STS-B's score is `score` among ten columns, MNLI's label is `gold_label`, QQP's
`is_duplicate`, and CoLA's train and dev files have no header at all (`source  label
original-label  sentence`). A GLUE experiment reading such a file without column flags uses
the layout here, so `launch.py --exp classify_mrpc --config.data.train=MRPC/train.tsv` works
as the file comes.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class GlueFileLayout:
  """Where a GLUE task's file keeps its texts and label: header names, or (no header)
  0-based column numbers as strings."""
  text_columns: tuple[str, ...]
  label_column: str
  header: bool = True


# Only the tasks whose files differ from TFDS's names (sst2, qnli, rte, wnli match them).
GLUE_FILE_LAYOUTS = {
    'mrpc': GlueFileLayout(('#1 String', '#2 String'), 'Quality'),
    'stsb': GlueFileLayout(('sentence1', 'sentence2'), 'score'),
    'mnli': GlueFileLayout(('sentence1', 'sentence2'), 'gold_label'),
    'qqp': GlueFileLayout(('question1', 'question2'), 'is_duplicate'),
    'cola': GlueFileLayout(('3',), '1', header=False),
}


def header_layout(task: str, names: list[str]) -> GlueFileLayout | None:
  """GLUE's layout of `task` when the header `names` holds all its columns, else None."""
  layout = GLUE_FILE_LAYOUTS.get(task)
  if layout is None or not layout.header:
    return None
  if all(c in names for c in (*layout.text_columns, layout.label_column)):
    return layout
  return None


def headerless_layout(task: str, first_row: list[str]) -> GlueFileLayout | None:
  """GLUE's header-less layout of `task` when the first row looks like one of its data rows
  (CoLA: four fields, the second a 0/1 label), else None: a file with a header of its own
  keeps it."""
  layout = GLUE_FILE_LAYOUTS.get(task)
  if layout is None or layout.header:
    return None
  label = int(layout.label_column)
  width = max(int(c) for c in (*layout.text_columns, layout.label_column)) + 1
  if len(first_row) == width and first_row[label].strip() in ('0', '1'):
    return layout
  return None
