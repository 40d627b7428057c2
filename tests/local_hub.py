"""A Hugging Face Hub on this machine, for the `hf://ORG/NAME` tests: a cache laid out as
huggingface_hub lays it out (for offline mode), and an HTTP server answering the endpoints
huggingface_hub 2.x downloads through (for HF_ENDPOINT), both built from a model directory
the tests already have (tests/golden/tiny_bert, the packaged all-MiniLM-L6-v2).

The endpoints, as huggingface_hub 2.4 calls them (hf_api.HfApi.repo_info / list_repo_tree,
file_download.get_hf_file_metadata / http_get):
  GET  /api/models/ORG/NAME/revision/REV             {"id", "sha", "siblings"}
  GET  /api/models/ORG/NAME/tree/REV?recursive=True  [{"type": "file", "path", "size", "oid"}]
  HEAD /ORG/NAME/resolve/REV/PATH                    X-Repo-Commit, ETag, Content-Length
  GET  /ORG/NAME/resolve/REV/PATH                    the file
An unknown repository or revision is a 404 with the X-Error-Code the Hub sends (RepoNotFound,
RevisionNotFound), from which huggingface_hub raises its RepositoryNotFoundError and
RevisionNotFoundError.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shutil
import threading
from urllib import parse


def commit_of(files: dict[str, bytes]) -> str:
  """A stand-in commit hash (40 hex digits): the sha1 of the files' names and contents."""
  digest = hashlib.sha1()
  for path in sorted(files):
    digest.update(path.encode() + b'\0' + files[path])
  return digest.hexdigest()


def read_files(directory: str, skip: tuple[str, ...] = ('README.md', '.gitattributes')
               ) -> dict[str, bytes]:
  """Every file under `directory` by its relative path (as a repository holds them)."""
  files = {}
  for base, _, names in os.walk(directory):
    for name in names:
      if name in skip or '__pycache__' in base:
        continue
      path = os.path.join(base, name)
      with open(path, 'rb') as f:
        files[os.path.relpath(path, directory).replace(os.sep, '/')] = f.read()
  return files


def write_cache(cache_dir: str, repo_id: str, files: dict[str, bytes],
                revision: str = 'main') -> str:
  """`files` as huggingface_hub's cache holds a downloaded repository: blobs/<sha256>,
  snapshots/<commit>/<path> linking to its blob, refs/<revision> naming the commit. Returns
  the commit."""
  commit = commit_of(files)
  repo = os.path.join(cache_dir, 'models--' + repo_id.replace('/', '--'))
  os.makedirs(os.path.join(repo, 'blobs'), exist_ok=True)
  for path, data in files.items():
    blob = os.path.join(repo, 'blobs', hashlib.sha256(data).hexdigest())
    if not os.path.exists(blob):
      with open(blob, 'wb') as f:
        f.write(data)
    link = os.path.join(repo, 'snapshots', commit, path)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(os.path.relpath(blob, os.path.dirname(link)), link)
  os.makedirs(os.path.join(repo, 'refs'), exist_ok=True)
  with open(os.path.join(repo, 'refs', revision), 'w') as f:
    f.write(commit)
  return commit


def remove_cache(cache_dir: str) -> None:
  shutil.rmtree(cache_dir, ignore_errors=True)


class LocalHub:
  """The Hub's download endpoints over repositories `{repo_id: files}` (each at one commit,
  `commit_of(files)`, its branch `main`), on 127.0.0.1. `requests` lists (method, path) of
  what was asked."""

  def __init__(self, repos: dict[str, dict[str, bytes]]):
    self.repos = {repo_id: (commit_of(files), files) for repo_id, files in repos.items()}
    self.requests: list[tuple[str, str]] = []
    hub = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def log_message(self, *args):
        pass

      def do_HEAD(self):
        hub.answer(self, head=True)

      def do_GET(self):
        hub.answer(self, head=False)

    self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    self.url = f'http://127.0.0.1:{self.server.server_address[1]}'
    self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

  def __enter__(self):
    self.thread.start()
    return self

  def __exit__(self, *exc):
    self.server.shutdown()
    self.server.server_close()

  def commit(self, repo_id: str) -> str:
    return self.repos[repo_id][0]

  def answer(self, request, head: bool) -> None:
    path = parse.unquote(parse.urlsplit(request.path).path)
    self.requests.append(('HEAD' if head else 'GET', path))
    api = path.startswith('/api/models/')
    parts = path[len('/api/models/'):].split('/') if api else path.lstrip('/').split('/')
    repo_id = '/'.join(parts[:2])
    if repo_id not in self.repos:
      return self.error(request, 'RepoNotFound')
    commit, files = self.repos[repo_id]
    kind, rest = (parts[2], parts[3:]) if len(parts) > 3 else ('', [])
    # A revision may hold slashes (refs/pr/1); the path after it is a file's.
    revision, file_path = self.split_revision(rest, files, kind == 'resolve')
    if revision not in (commit, 'main'):
      return self.error(request, 'RevisionNotFound')
    if api and kind == 'revision':
      return self.send(request, json.dumps(
          {'id': repo_id, 'sha': commit, 'siblings': [{'rfilename': p} for p in files]}
      ).encode(), head, {'Content-Type': 'application/json'})
    if api and kind == 'tree':
      listing = [{'type': 'file', 'path': p, 'size': len(data),
                  'oid': hashlib.sha1(data).hexdigest()} for p, data in sorted(files.items())]
      return self.send(request, json.dumps(listing).encode(), head,
                       {'Content-Type': 'application/json'})
    if not api and kind == 'resolve' and file_path in files:
      data = files[file_path]
      return self.send(request, data, head, {
          'X-Repo-Commit': commit, 'ETag': f'"{hashlib.sha256(data).hexdigest()}"',
          'Content-Type': 'application/octet-stream'})
    return self.error(request, 'EntryNotFound', commit)

  @staticmethod
  def split_revision(rest: list[str], files: dict, resolve: bool) -> tuple[str, str]:
    if rest[:2] == ['refs', 'pr'] and len(rest) > 2:
      return '/'.join(rest[:3]), '/'.join(rest[3:])
    return (rest[0] if rest else ''), '/'.join(rest[1:])

  @staticmethod
  def send(request, data: bytes, head: bool, headers: dict) -> None:
    request.send_response(200)
    for key, value in {**headers, 'Content-Length': str(len(data))}.items():
      request.send_header(key, value)
    request.end_headers()
    if not head:
      request.wfile.write(data)

  @staticmethod
  def error(request, code: str, commit: str | None = None) -> None:
    request.send_response(404)
    request.send_header('X-Error-Code', code)
    request.send_header('X-Error-Message', code)
    if commit:
      request.send_header('X-Repo-Commit', commit)
    request.send_header('Content-Length', '0')
    request.end_headers()
