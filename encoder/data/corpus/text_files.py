"""Text files as a corpus: a sentence per line, a blank line between documents (or .gz).

A shard is {'kind': 'text', 'pieces': [[path, start, end], ...]}: byte ranges of files. Big files
are cut right after a blank line, so every piece starts a new document and the documents of the
shards, in order, are exactly those of reading the files whole; a .gz file is one piece (it
cannot be entered in the middle). Files are streamed in 1 MB blocks, so no reader holds a whole
shard.
"""

from __future__ import annotations

import contextlib
import gzip
import re
from collections.abc import Iterator

from encoder import storage
from encoder.errors import DataError

_BLANK_LINE = re.compile(rb'\n[ \t\r\f\v]*\n')  # ASCII-blank, so str.strip() finds it blank too
_SCAN = 1 << 20  # bytes read at a time while looking for a cut


def read(shard: dict) -> Iterator[list[str]]:
  """The shard's non-empty documents, in file order."""
  for path, start, end in shard['pieces']:
    yield from documents(_lines(path, start, end))


def _text_files(pattern: str) -> list[str]:
  if not pattern:
    raise DataError("corpus 'text:' needs a path or glob: e.g. data.corpus=text:data/*.txt")
  paths = sorted(p for p in storage.glob(pattern) if storage.isfile(p))
  if not paths:
    raise DataError(f"no files match '{pattern}': check the path in data.corpus=text:GLOB")
  return paths


def plan(pattern: str, shard_bytes: int) -> list[dict]:
  """Shards of about `shard_bytes`: byte ranges of the files matching `pattern`; big files are
  cut right after blank lines (document boundaries), small ones grouped."""
  pieces: list[list] = []
  for path in _text_files(pattern):
    size = storage.getsize(path)
    if path.endswith('.gz') or size <= shard_bytes:
      pieces.append([path, 0, -1])
    else:
      cuts = _cuts(path, size, shard_bytes)
      pieces.extend([path, a, b] for a, b in zip(cuts[:-1], cuts[1:], strict=True))
  shards, group, group_bytes = [], [], 0
  for piece in pieces:  # small files share a shard until it holds about shard_bytes
    n = (storage.getsize(piece[0]) if piece[2] < 0 else piece[2]) - piece[1]
    if group and group_bytes + n > shard_bytes:
      shards.append({'kind': 'text', 'pieces': group})
      group, group_bytes = [], 0
    group.append(piece)
    group_bytes += n
  if group:
    shards.append({'kind': 'text', 'pieces': group})
  return shards


def _cuts(path: str, size: int, shard_bytes: int) -> list[int]:
  """Offsets [0, ..., size] cutting the file right after a blank line near every shard_bytes.

  A remainder under half a shard joins the previous piece, so no shard is a sliver with too few
  documents to draw NotNext partners from.
  """
  cuts = [0]
  with storage.open(path, 'rb') as f:
    while size - cuts[-1] > shard_bytes * 3 // 2:
      cut = _next_blank_line(f, cuts[-1] + shard_bytes, size)
      if cut is None or size - cut < shard_bytes // 2:
        break
      cuts.append(cut)
  return cuts + [size]


def _next_blank_line(f, offset: int, size: int) -> int | None:
  """The offset just after the first blank line ending at or after `offset` (None: no more)."""
  pos = max(offset - 1, 0)  # the blank line's leading newline may sit just before `offset`
  while pos < size:
    f.seek(pos)
    chunk = f.read(_SCAN + 256)
    m = _BLANK_LINE.search(chunk)
    if m and m.start() < _SCAN + 1:
      return pos + m.end()
    pos += _SCAN
  return None


def _lines(path: str, start: int, end: int) -> Iterator[str]:
  """The lines of bytes [start, end) of a file (end -1: to its end), read in 1 MB blocks, so a
  reader that stops early (the tokenizer sample) reads little and none holds a whole shard."""
  try:
    raw = storage.open(path, 'rb')
  except OSError as e:
    raise DataError(f'cannot read {path}: {e.strerror or e}') from None
  with raw, (gzip.open(raw, 'rb') if path.endswith('.gz') else contextlib.nullcontext(raw)) as f:
    if start:
      f.seek(start)
    left = -1 if end < 0 else end - start
    rest, first, line_no = b'', start == 0, 1
    while left:
      try:
        block = f.read(_SCAN if left < 0 else min(_SCAN, left))
      except (OSError, EOFError) as e:
        raise DataError(f'cannot read {path}: {e}') from None
      if not block:
        break
      left = left - len(block) if left > 0 else left
      data = rest + block
      cut = data.rfind(b'\n') + 1  # a newline byte never sits inside a UTF-8 character
      rest, data = data[cut:], data[:cut]
      yield from _decode(path, data, first, line_no)
      line_no += data.count(b'\n')
      first = first and not data
    if rest:
      yield from _decode(path, rest, first, line_no)


def _decode(path: str, data: bytes, first: bool, line_no: int) -> list[str]:
  try:
    text = data.decode('utf-8-sig' if first else 'utf-8')  # a BOM only ever starts a file
  except UnicodeDecodeError as e:
    line = line_no + data.count(b'\n', 0, e.start)
    raise DataError(f'{path}:{line}: not UTF-8 text (byte {data[e.start]:#04x}): re-encode '
                    'the file as UTF-8') from None
  lines = text.split('\n')  # not splitlines: U+2028 and friends are text, not breaks
  return lines[:-1] if text.endswith('\n') else lines


def documents(lines) -> Iterator[list[str]]:
  """One sentence per line, a blank line between documents (the text format)."""
  doc: list[str] = []
  for line in lines:
    line = line.strip()
    if line:
      doc.append(line)
    elif doc:
      yield doc
      doc = []
  if doc:
    yield doc
