"""SST-2's held-out slice: whole sentences, none of whose phrases is left in training."""

import os
import random

from encoder.suite import run_suite
from encoder.suite.sentence_split import outside, whole_sentences
from tests.suite.conftest import fake_run

# Two parse trees' phrases, as GLUE's SST-2 lists them (space-tokenised, every sub-phrase a row).
TREES = {
    'the film is a quiet triumph': ['the film', 'is a quiet triumph', 'a quiet triumph',
                                    'quiet triumph', 'triumph', 'the'],
    'a dull , lifeless plot': ['a dull', 'dull , lifeless plot', 'lifeless plot', 'plot'],
    'great acting': ['acting'],
}


def _texts():
  return [t for sentence, phrases in TREES.items() for t in (sentence, *phrases)]


def test_whole_sentences_are_the_phrases_inside_no_longer_phrase():
  texts = _texts()
  assert {texts[i] for i in whole_sentences(texts)} == set(TREES)
  # 'the' is inside two sentences' spans but is no sentence; a phrase equal to a sentence
  # with other spacing is the same words
  assert whole_sentences(['a  b', 'a b c', 'b']) == {1}


def test_the_dev_sentences_phrases_leave_training_and_the_rest_stay():
  texts = _texts()
  order = list(range(len(texts)))
  random.Random(3).shuffle(order)
  dev = [i for i in order if i in whole_sentences(texts)][:1]  # one of three sentences
  train = outside(texts, dev, order)
  assert len(dev) == 1 and texts[dev[0]] in TREES
  held = texts[dev[0]]
  assert not set(dev) & set(train)
  # every phrase inside the dev sentence is out of training ('the' too); every other stays
  assert {texts[i] for i in train} == {t for t in texts if f' {t} ' not in f' {held} '}
  assert [i for i in order if i in train] == train  # in the seeded order


def test_the_suites_sst2_slice_is_whole_sentences(tmp_path, fake_trainer):
  root = tmp_path / 'glue' / 'SST-2'
  os.makedirs(root)
  rows = [f'{t} \t{int("dull" not in t)}' for t in _texts()]
  (root / 'train.tsv').write_text('sentence\tlabel\n' + '\n'.join(rows) + '\n', encoding='utf-8')
  settings = [f"init_from={fake_run(tmp_path / 'run')}", f"suite.data_dir={tmp_path / 'glue'}",
              'suite.seeds=1', 'suite.scratch=false', 'suite.heldout_fraction=0.9',
              'suite.dev_size=1', 'train.num_steps=2']
  summary = run_suite('glue', settings, str(tmp_path / 'suite'))
  (folder,) = os.listdir(tmp_path / 'suite' / 'data')
  read = lambda name: [r.split('\t')[0].strip() for r in (  # noqa: E731
      tmp_path / 'suite' / 'data' / folder / name).read_text(encoding='utf-8').splitlines()[1:]]
  (held,) = read('dev.tsv')
  assert held in TREES
  assert set(read('train.tsv')) == {t for t in _texts() if f' {t} ' not in f' {held} '}
  assert 'sst2: that fraction of its sentences, whole' in summary['dev_sets']
