"""A latency and fault proxy in front of a storage emulator: what a real bucket does to a run.

A real bucket answers each request in tens of milliseconds and fails a few with 429/503; the
emulators (tests/emulators.py) answer in about a millisecond and never fail. This proxy sits
between a client and an emulator on 127.0.0.1: every request waits `latency_s` (the waits of
concurrent requests overlap, as on a real network), and a `fault_rate` fraction is answered
503 without reaching the emulator (so a retried request has no side effect to repeat). Both
may be changed while it runs (`proxy.latency_s = 0.05`). It counts what it saw, so tests can
state the requests a batch took.

  with FaultProxy(emulator_url, latency_s=0.05, fault_rate=0.05) as proxy:
    env['STORAGE_EMULATOR_HOST'] = proxy.url   # or AWS_ENDPOINT_URL for S3

It listens on 127.0.0.1 only and stops by itself after `max_seconds`, so a forgotten proxy
cannot outlive a test session by long. Used by tests/data/pretrain/test_bucket_reads.py,
tests/test_storage.py, tests/train/test_store_faults.py and benchmarks/bucket_loader.py.
"""

from __future__ import annotations

import http.client
import http.server
import random
import sys
import threading
import time
from urllib import parse

_HOP_BY_HOP = {'connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade',
               'proxy-connection', 'content-length'}
_FAULT_BODY = b'{"error": {"code": 503, "message": "injected by tests/fault_proxy.py"}}'


class _Server(http.server.ThreadingHTTPServer):
  request_queue_size = 256  # http.server's 5 would drop the connections of a concurrent client
  daemon_threads = True

  def handle_error(self, request, client_address):
    """Quiet when the client hung up before its reply (a run that exits with reads still in
    flight does): a traceback per request would bury the test's output. Others as before."""
    if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
      super().handle_error(request, client_address)


class FaultProxy:
  """An HTTP proxy to `upstream` adding latency and 503s; a context manager."""

  def __init__(self, upstream: str, latency_s: float = 0.0, fault_rate: float = 0.0,
               seed: int = 0, max_seconds: float = 900.0, upstream_concurrency: int = 4):
    target = parse.urlparse(upstream)
    self.upstream_host, self.upstream_port = target.hostname, target.port
    self.latency_s, self.fault_rate = float(latency_s), float(fault_rate)
    self.requests = 0  # every request seen, faults included
    self.faults = 0
    self._rng = random.Random(seed)
    self._lock = threading.Lock()
    # The GCS emulator serves one request at a time and closes each connection: more requests
    # at once only queue in its backlog, so the proxy hands it a few at a time.
    self._upstream_slots = threading.BoundedSemaphore(upstream_concurrency)
    self._server = _Server(('127.0.0.1', 0), _handler_for(self))
    self.url = f'http://127.0.0.1:{self._server.server_address[1]}'
    self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                    name='fault-proxy')
    self._timer = threading.Timer(max_seconds, self.close)
    self._timer.daemon = True

  def __enter__(self) -> FaultProxy:
    self._thread.start()
    self._timer.start()
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def close(self) -> None:
    self._timer.cancel()
    self._server.shutdown()
    self._server.server_close()

  def reset_counts(self) -> None:
    with self._lock:
      self.requests = self.faults = 0

  def _admit(self) -> bool:
    """Counts a request; False when it is to be failed."""
    with self._lock:
      self.requests += 1
      fail = self.fault_rate > 0 and self._rng.random() < self.fault_rate
      self.faults += fail
      return not fail


def _handler_for(proxy: FaultProxy):

  class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'  # keep-alive: clients reuse connections, as with a bucket
    disable_nagle_algorithm = True  # headers and body leave at once (no 40 ms delayed ACK)

    def log_message(self, *args):
      """Quiet: the tests read the proxy's counters, not a log line per request."""

    def _body(self) -> bytes:
      if self.headers.get('Transfer-Encoding', '').lower() == 'chunked':
        chunks = []
        while True:
          size = int(self.rfile.readline().split(b';')[0], 16)
          if size == 0:
            self.rfile.readline()
            return b''.join(chunks)
          chunks.append(self.rfile.read(size))
          self.rfile.readline()
      return self.rfile.read(int(self.headers.get('Content-Length') or 0))

    def _forward(self) -> None:
      body = self._body()
      if proxy.latency_s > 0:
        time.sleep(proxy.latency_s)
      if not proxy._admit():
        self._reply(503, [('Content-Type', 'application/json')], _FAULT_BODY)
        return
      headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
      with proxy._upstream_slots:
        connection = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port,
                                                timeout=120)
        try:
          connection.request(self.command, self.path, body=body or None, headers=headers)
          response = connection.getresponse()
          data = response.read()
        finally:
          connection.close()
      kept = [(k, v) for k, v in response.getheaders()
              if k.lower() not in _HOP_BY_HOP or (k.lower() == 'content-length'
                                                 and self.command == 'HEAD')]
      self._reply(response.status, kept, data)

    def _reply(self, status: int, headers: list, data: bytes) -> None:
      self.send_response(status)
      for key, value in headers:
        self.send_header(key, value)
      if self.command != 'HEAD':  # a HEAD's length is the object's, kept from upstream
        self.send_header('Content-Length', str(len(data)))
      self.end_headers()
      if self.command != 'HEAD':
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = _forward

  return Handler
