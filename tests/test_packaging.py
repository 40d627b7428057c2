"""pyproject.toml against the requirements files and the source tree: what `pip install .`
declares and ships. Reads files only (no build, no install, no network)."""

import fnmatch
import importlib
import os

import pytest

try:
  import tomllib
except ModuleNotFoundError:  # Python 3.10
  tomllib = pytest.importorskip('tomli')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pyproject() -> dict:
  with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as f:
    return tomllib.load(f)


def _requirements(name: str, skip: frozenset = frozenset()) -> list[str]:
  """The requirement lines of requirements file `name`, comments stripped, `-r` includes
  expanded in place (except those in `skip`)."""
  lines = []
  with open(os.path.join(ROOT, name)) as f:
    for line in f:
      line = line.split('#', 1)[0].strip()
      if line.startswith('-r'):
        included = line[2:].strip()
        if included not in skip:
          lines += _requirements(included, skip)
      elif line:
        lines.append(line)
  return lines


def _normal(requirements: list[str]) -> list[str]:
  return [''.join(r.split()) for r in requirements]


def test_dependencies_are_requirements_txt():
  assert _normal(_pyproject()['project']['dependencies']) == _normal(
      _requirements('requirements.txt'))


@pytest.mark.parametrize('extra, name', [('cloud', 'requirements-cloud.txt'),
                                         ('beam', 'requirements-beam.txt'),
                                         ('tpu', 'requirements-tpu.txt'),
                                         ('cuda', 'requirements-cuda.txt'),
                                         ('dev', 'requirements-dev.txt')])
def test_extras_are_the_requirements_files(extra, name):
  # dev: its own lines and those of the files it includes, less requirements.txt (the base).
  expected = _requirements(name, skip=frozenset({'requirements.txt'}))
  assert _normal(_pyproject()['project']['optional-dependencies'][extra]) == _normal(expected)


def test_readme_exists():
  assert os.path.isfile(os.path.join(ROOT, _pyproject()['project']['readme']))


def test_console_script_is_an_importable_callable():
  target = _pyproject()['project']['scripts']['encoder-train']
  module, _, attr = target.partition(':')
  assert callable(getattr(importlib.import_module(module), attr))


def _find() -> dict:
  return _pyproject()['tool']['setuptools']['packages']['find']


def _source_dirs(top: str):
  """(dotted name, path, file names) of every directory under `top`, caches left out."""
  for path, dirs, files in os.walk(os.path.join(ROOT, top)):
    dirs[:] = [d for d in dirs if d != '__pycache__']
    yield os.path.relpath(path, ROOT).replace(os.sep, '.'), path, files


def _included(name: str, find: dict) -> bool:
  return (any(fnmatch.fnmatchcase(name, p) for p in find.get('include', ['*']))
          and not any(fnmatch.fnmatchcase(name, p) for p in find.get('exclude', [])))


def test_packages_are_encoder_and_experiments_with_every_subpackage():
  find = _find()
  assert find.get('where', ['.']) == ['.'] and find.get('namespaces') is False
  for top in ('encoder', 'experiments'):
    for name, path, files in _source_dirs(top):
      if any(f.endswith('.py') for f in files):  # else it would be left out of the wheel
        assert '__init__.py' in files, f'{path} has modules but no __init__.py'
      if '__init__.py' in files:
        assert _included(name, find), name
  for other in ('tests', 'tests.data', 'benchmarks', 'notebooks', 'docs', 'launch'):
    assert not _included(other, find), other


def test_setuptools_finds_exactly_those_packages():
  setuptools = pytest.importorskip('setuptools')
  find = _find()
  found = setuptools.find_packages(where=ROOT, include=find['include'],
                                   exclude=find.get('exclude', ()))
  expected = [name for top in ('encoder', 'experiments')
              for name, _, files in _source_dirs(top) if '__init__.py' in files]
  assert sorted(found) == sorted(expected)


def test_no_data_files_left_out_of_the_wheel():
  """Only .py files ship (no package-data): a data file the code reads beside itself would be
  missing from an installed package, so adding one means declaring it in pyproject.toml."""
  declared = _pyproject()['tool']['setuptools'].get('package-data', {})
  for top in ('encoder', 'experiments'):
    for name, _, files in _source_dirs(top):
      data = [f for f in files if not f.endswith(('.py', '.pyc'))]
      patterns = declared.get(name, []) + declared.get('*', [])
      missing = [f for f in data if not any(fnmatch.fnmatchcase(f, p) for p in patterns)]
      assert not missing, f'{name}: {missing} would not be installed (add package-data)'
