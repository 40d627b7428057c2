"""A tiny converted workdir (the golden 2-layer BERT, 64 positions, its 79-token vocabulary)
and texts of many lengths over that vocabulary, shared by the packed-embedding tests."""

import os
import warnings

import numpy as np
import pytest

import encoder
from encoder.convert import from_hf
from tests.golden.smoke import GOLDEN

WORDS = ('the a an of to and is was in on it he she they bank river loan money approved '
         'denied quickly slowly man woman dog cat food bread horse eating riding water sat ran '
         'walked city house tree big small red green blue good bad day night one two three '
         'said this that with for at by from paris france capital london england').split()


def make_texts(n: int, seed: int = 0) -> list[str]:
  """`n` texts of 0 to 90 words (some past the model's 64 positions), an empty one, one of
  spaces, and one with a literal [MASK]."""
  rng = np.random.default_rng(seed)
  texts = [' '.join(rng.choice(WORDS, int(k))) for k in rng.integers(0, 90, n - 3)]
  return [*texts, '', '   ', 'the cat [MASK] on the mat']


@pytest.fixture(scope='session')
def tiny_workdir(tmp_path_factory) -> str:
  workdir = str(tmp_path_factory.mktemp('embed') / 'tiny')
  from_hf(os.path.join(GOLDEN, 'tiny_bert'), workdir)
  return workdir


@pytest.fixture(scope='session')
def tiny_model(tiny_workdir):
  return encoder.load(tiny_workdir)


def embed_one_at_a_time(model, texts, **kwargs) -> np.ndarray:
  """`Model.embed` of each text alone: no padding, no neighbours."""
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')  # truncation
    return np.concatenate([model.embed([t], **kwargs) for t in texts])
