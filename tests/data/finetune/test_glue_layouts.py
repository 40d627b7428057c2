"""GLUE's own TSV files (as its download unpacks them: headers, byte-order marks, CoLA without
a header) are read by the GLUE experiments without column flags."""

import pytest

from encoder import configs
from encoder.data.finetune import file_readers, tfds_examples
from encoder.errors import DataError

BOM = '\ufeff'
# (task, file text in GLUE's layout, expected (texts, label) of its first example)
GLUE_FILES = {
    'mrpc': (BOM + 'Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n'
             '1\t702876\t702977\tAmrozi accused his brother .\tReferring to him , Amrozi .\n'
             '0\t2108705\t2108831\tYucaipa owned Dominick \'s .\tYucaipa bought it .\n',
             (('Amrozi accused his brother .', 'Referring to him , Amrozi .'), '1')),
    'stsb': ('index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2'
             '\tscore\n0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking '
             'off.\tAn air plane is taking off.\t5.000\n',
             (('A plane is taking off.', 'An air plane is taking off.'), '5.000')),
    'cola': ("gj04\t1\t\tOur friends won't buy this analysis.\n"
             'gj04\t0\t*\tThey drank the pub.\n',
             (("Our friends won't buy this analysis.",), '1')),
    'mnli': ('index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t'
             'sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label\n'
             '0\t31193\t31193n\tgovernment\t( a )\t( b )\t(ROOT a)\t(ROOT b)\tConceptually '
             'cream skimming has two dimensions.\tProduct and geography are what make cream '
             'skimming work.\tneutral\tneutral\n',
             (('Conceptually cream skimming has two dimensions.',
               'Product and geography are what make cream skimming work.'), 'neutral')),
    'qqp': ('id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n'
            '133273\t213221\t213222\tHow is the life of a math student?\tWhich level of '
            'prepration is enough?\t0\n',
            (('How is the life of a math student?', 'Which level of prepration is enough?'),
             '0')),
    'rte': ('index\tsentence1\tsentence2\tlabel\n0\tNo weapons were found.\tWeapons were '
            'found.\tnot_entailment\n',
            (('No weapons were found.', 'Weapons were found.'), 'not_entailment')),
    'sst2': ('sentence\tlabel\nhide new secretions from the parental units \t0\n',
             (('hide new secretions from the parental units ',), '0')),
}


def _read_as_the_experiment(path: str, task: str):
  """What classification._read does for `classify_<task>` without data.text_columns."""
  config = configs.load_experiment(f'classify_{task}')
  glue = tfds_examples.GLUE_TEXT[task]
  return file_readers.read_classification(path, list(glue), config.data.label_column,
                                          config.data.header, defaulted=True, glue_task=task)


@pytest.mark.parametrize('task', sorted(GLUE_FILES))
def test_glue_files_read_without_column_flags(tmp_path, task):
  text, first = GLUE_FILES[task]
  path = tmp_path / 'train.tsv'
  path.write_text(text, encoding='utf-8')
  examples = _read_as_the_experiment(str(path), task)
  assert (examples[0].texts, examples[0].label) == first
  assert len(examples) == text.count('\n') - (task != 'cola')  # CoLA: every line a row


def test_the_layout_is_logged_and_explicit_columns_still_win(tmp_path, encoder_log):
  path = tmp_path / 'train.tsv'
  path.write_text(GLUE_FILES['mrpc'][0], encoding='utf-8')
  _read_as_the_experiment(str(path), 'mrpc')
  assert "GLUE's mrpc layout" in encoder_log.text
  chosen = file_readers.read_classification(str(path), '#2 String', 'Quality')
  assert chosen[0].texts == ('Referring to him , Amrozi .',)


def test_a_cola_file_with_its_own_header_keeps_it(tmp_path):
  path = tmp_path / 'train.tsv'
  path.write_text('sentence\tlabel\nThey drank the pub.\t0\n', encoding='utf-8')
  assert [(e.texts, e.label) for e in _read_as_the_experiment(str(path), 'cola')] == [
      (('They drank the pub.',), '0')]


def test_a_file_in_no_known_layout_still_lists_its_columns(tmp_path):
  path = tmp_path / 'train.tsv'
  path.write_text('a\tb\tc\tlabel\nx\ty\tz\t1\n', encoding='utf-8')
  with pytest.raises(DataError, match="no column 'sentence1' \\(the file's columns: a, b, c, "
                     'label\\)'):
    _read_as_the_experiment(str(path), 'mrpc')
