"""The import graph of `encoder/`: no cycles, the layers respected, no private names taken
across files, and every function-local import of our own modules explained by a comment.

Every import is read from the source with `ast`, those inside functions included (a cycle kept
alive by an import placed in a function is still a cycle). The layers, lowest first:

  foundation  errors, storage, configs, ... (the top-level modules everything may use)
  modules < data < tasks < train < inference, embedding, hf, sweep, suite < launch (and the
  package's `load`)

A module may import its own layer or a lower one, never a higher one. A function-local import
of an `encoder` module is allowed only with a comment on its line or the line above saying why
(an optional dependency kept optional, a command-line entry point kept fast).
"""

from __future__ import annotations

import ast
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = 'encoder'

# Top-level modules of `encoder/` by rank; subpackages by the name after `encoder.`.
LAYERS = {
    'foundation': 0, 'modules': 1, 'data': 2, 'tasks': 3, 'train': 4,
    'inference': 5, 'embedding': 5, 'hf': 5, 'sweep': 5, 'suite': 5, 'launch': 6, 'convert': 6,
    'embed': 6,
    '__init__': 6,
}
FOUNDATION = ('errors', 'storage', 'store_retry', 'configs', 'config_schema', 'orbax_s3',
              'checkpoint_files', 'describe', 'hub_cache', 'saved_config', 'jax_platforms')


def module_names(root: pathlib.Path, package: str) -> dict[str, pathlib.Path]:
  """Dotted module name -> file, for every .py file of the package (packages by __init__)."""
  names = {}
  for path in sorted((root / package).rglob('*.py')):
    parts = list(path.relative_to(root).with_suffix('').parts)
    if parts[-1] == '__init__':
      parts = parts[:-1]
    names['.'.join(parts)] = path
  return names


def layer(module: str, package: str = PACKAGE) -> int:
  parts = module.split('.')
  if len(parts) == 1:
    return LAYERS['__init__']
  top = parts[1]
  if len(parts) == 2 and top in FOUNDATION:
    return LAYERS['foundation']
  return LAYERS[top]


class Import:
  """One import statement's target module and names, where it is, and whether it is local."""

  def __init__(self, target: str, names: list[str], line: int, local: bool, commented: bool):
    self.target, self.names, self.line, self.local, self.commented = (
        target, names, line, local, commented)


def imports_of(path: pathlib.Path, module: str, known: set[str], package: str) -> list[Import]:
  """The imports of our own modules in one file; `from a import b` targets the module a.b when
  b is a module, else a."""
  source = path.read_text()
  lines = source.split('\n')
  tree = ast.parse(source)
  is_package = path.name == '__init__.py'
  local_nodes = {id(sub) for node in ast.walk(tree)
                 if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                 for sub in ast.walk(node)}

  def commented(node) -> bool:
    here = lines[node.lineno - 1]
    above = lines[node.lineno - 2].strip() if node.lineno > 1 else ''
    return '#' in here or above.startswith('#')

  out = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.split('.')[0] == package:
          out.append(Import(alias.name, [], node.lineno, id(node) in local_nodes,
                            commented(node)))
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ''
      if node.level:  # relative: resolved against this module's package
        anchor = module.split('.') if is_package else module.split('.')[:-1]
        anchor = anchor[:len(anchor) - node.level + 1]
        base = '.'.join(anchor + ([base] if base else []))
      if base.split('.')[0] != package:
        continue
      for alias in node.names:
        sub = f'{base}.{alias.name}'
        target = sub if sub in known else base
        names = [] if sub in known else [alias.name]
        out.append(Import(target, names, node.lineno, id(node) in local_nodes, commented(node)))
  return out


def graph(root: pathlib.Path = ROOT, package: str = PACKAGE) -> dict[str, list[Import]]:
  files = module_names(root, package)
  return {m: imports_of(p, m, set(files), package) for m, p in files.items()}


def cycles(edges: dict[str, list[Import]]) -> list[list[str]]:
  """The strongly connected components with more than one module (Tarjan's algorithm)."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []
  counter = [0]

  def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on_stack.add(v)
    for imp in edges.get(v, []):
      w = imp.target
      if w == v or w not in edges:
        continue
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for v in sorted(edges):
    if v not in index:
      visit(v)
  return found


def violations(edges: dict[str, list[Import]], package: str = PACKAGE) -> list[str]:
  """Every broken rule, one line each."""
  problems = [f'cycle: {" <-> ".join(c)}' for c in cycles(edges)]
  for module, imps in sorted(edges.items()):
    for imp in imps:
      if imp.target not in edges:
        continue  # a name that is no module of ours (a typo fails at import time anyway)
      if imp.target != module and layer(imp.target, package) > layer(module, package):
        problems.append(f'{module}:{imp.line} imports {imp.target}, a higher layer')
      if imp.target != module:
        for name in imp.names:
          if name.startswith('_'):
            problems.append(f'{module}:{imp.line} imports private {imp.target}.{name}')
      if imp.local and not imp.commented:
        problems.append(f'{module}:{imp.line} imports {imp.target} inside a function with no '
                        'comment saying why')
  return problems


def test_the_import_graph_of_encoder_follows_the_rules():
  edges = graph()
  assert len(edges) > 50  # the whole package was read
  problems = violations(edges)
  assert not problems, '\n'.join(problems)


def test_every_subpackage_has_a_layer():
  for module in graph():
    layer(module)  # KeyError for a subpackage missing from LAYERS


def test_no_two_data_files_share_a_name():
  names = [p.name for p in (ROOT / PACKAGE / 'data').rglob('*.py') if p.name != '__init__.py']
  assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def _tree(tmp_path, files: dict[str, str]) -> pathlib.Path:
  for name, text in files.items():
    path = tmp_path / 'encoder' / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
  for directory in [tmp_path / 'encoder', *(tmp_path / 'encoder').rglob('*')]:
    if directory.is_dir() and not (directory / '__init__.py').exists():
      (directory / '__init__.py').write_text('')
  return tmp_path


@pytest.mark.parametrize('files,expected', [
  # A cycle kept alive by a function-local (commented) import is still a cycle.
  ({'data/a.py': 'from encoder.data import b\n',
    'data/b.py': 'def f():\n  from encoder.data import a  # lazy\n'},
   'cycle: encoder.data.a <-> encoder.data.b'),
  ({'data/a.py': 'from encoder.train import loop\n', 'train/loop.py': ''},
   'encoder.data.a:1 imports encoder.train.loop, a higher layer'),
  ({'tasks/t.py': 'from encoder.data.a import _helper\n', 'data/a.py': '_helper = 1\n'},
   'encoder.tasks.t:1 imports private encoder.data.a._helper'),
  ({'tasks/t.py': 'def f():\n  from encoder.data import a\n', 'data/a.py': ''},
   'encoder.tasks.t:2 imports encoder.data.a inside a function with no comment saying why'),
  ({'data/a.py': 'from . import b\n', 'data/b.py': 'from .a import x\n'},
   'cycle: encoder.data.a <-> encoder.data.b'),
])
def test_each_rule_is_caught(tmp_path, files, expected):
  root = _tree(tmp_path, files)
  assert expected in violations(graph(root))


def test_a_clean_tree_passes(tmp_path):
  root = _tree(tmp_path, {
      'errors.py': '', 'data/a.py': 'from encoder import errors\n',
      'tasks/t.py': 'from encoder.data import a\ndef f():\n  # optional: tensorstore\n'
                    '  from encoder.data import a\n'})
  assert violations(graph(root)) == []
  assert os.path.exists(root / 'encoder' / 'tasks' / '__init__.py')
