"""Collects the raw text of the python_docs corpus; run as
`python -m encoder.data.corpus.python_docs_collector`.

Prints a JSON list of documents, each a list of texts: one document per pydoc help topic, then one
per standard-library module (its docstring and those of its public classes, methods and functions).
It runs in a subprocess because importing hundreds of modules has side effects we keep out of the
trainer. Order is sorted, so the output depends only on the Python version.
"""

import contextlib
import inspect
import io
import json
import pkgutil
import sys
import warnings

# Modules that open windows or browsers, print on import, need a display, or are test suites.
_SKIP = {
  'antigravity', 'this', 'idlelib', 'tkinter', 'turtle', 'turtledemo', 'test', 'tests',
  'idle_test', 'ensurepip', 'venv', 'lib2to3', 'pydoc_data', 'msilib', 'winreg', 'winsound',
  'msvcrt', 'nturl2path', 'sre_compile', 'sre_constants', 'sre_parse', 'encodings', 'curses',
}


def _module_names() -> list[str]:
  """Top-level stdlib modules and the public submodules of stdlib packages, sorted."""
  names = set()
  for name in sorted(sys.stdlib_module_names):
    if name.startswith('_') or name in _SKIP:
      continue
    names.add(name)
    module = _import(name)
    for info in pkgutil.iter_modules(getattr(module, '__path__', None) or []):
      if not info.name.startswith('_') and info.name not in _SKIP:
        names.add(f'{name}.{info.name}')
  return sorted(names)


def _import(name: str):
  """Imports quietly; returns None for modules missing on this platform or failing to import."""
  try:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
      return __import__(name, fromlist=['_'])
  except BaseException:  # noqa: BLE001 - any failure (even SystemExit) just skips the module
    return None


def _doc(obj) -> str:
  """The object's own docstring (not inherited), dedented."""
  doc = obj.__dict__.get('__doc__') if isinstance(obj, type) else getattr(obj, '__doc__', None)
  return inspect.cleandoc(doc) if isinstance(doc, str) else ''


def _module_texts(name: str) -> list[str]:
  module = _import(name)
  if module is None:
    return []
  texts = [_doc(module)]
  for attr in sorted(vars(module)):
    obj = vars(module)[attr]
    if attr.startswith('_') or getattr(obj, '__module__', None) != name:
      continue
    if inspect.isclass(obj):
      texts.append(_doc(obj))
      for method in sorted(vars(obj)):
        member = vars(obj)[method]
        if not method.startswith('_') and inspect.isfunction(member):
          texts.append(_doc(member))
    elif inspect.isfunction(obj):
      texts.append(_doc(obj))
  return [t for t in texts if t]


def collect() -> list[list[str]]:
  warnings.simplefilter('ignore')
  from pydoc_data.topics import topics
  docs = [[topics[key]] for key in sorted(topics)]
  for name in _module_names():
    texts = _module_texts(name)
    if texts:
      docs.append(texts)
  return docs


if __name__ == '__main__':
  docs = collect()
  sys.stdout.flush()
  sys.stdout.write(json.dumps(docs))
