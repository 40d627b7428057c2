"""The `gcp-storage-emulator` package with one fix: `python tests/gcs_emulator.py start ...`.

Real GCS answers a media download with the object's generation in an `x-goog-generation`
header; the emulator (2026.7.19) leaves it out. tensorstore, which writes Orbax's arrays, then
records generation 0 for what it read and refuses its own next conditional read of that object
("Malformed StorageGeneration"), so saving a checkpoint fails now and then. The fix adds the
header. And its handler writes a response's headers and body as two packets, so with Nagle's
algorithm each response waits ~40 ms for the client's delayed ACK: the fix sets TCP_NODELAY, as
a real server does (without it the emulator serves ~23 requests/s one at a time and a latency
benchmark measures that stall). Its listen backlog is http.server's 5, so 64 concurrent
clients overflow it and wait for the kernel's 1 s SYN retransmit (7 requests/s): raised to 256.
Everything else is the package as released.
"""

import sys

from gcp_storage_emulator import server
from gcp_storage_emulator.handlers import objects

_download = objects.download


def download(request, response, storage, *args, **kwargs):
  _download(request, response, storage, *args, **kwargs)
  try:
    obj = storage.get_file_obj(request.params['bucket_name'], request.params['object_id'])
  except Exception:  # noqa: BLE001 - not found: the handler answered already
    return
  response['x-goog-generation'] = str(obj.get('generation') or '')
  response['x-goog-metageneration'] = str(obj.get('metageneration') or '1')


objects.download = download  # before the server module builds its routing table
server.RequestHandler.disable_nagle_algorithm = True
server.server.HTTPServer.request_queue_size = 256  # http.server's, in this process alone

if __name__ == '__main__':
  from gcp_storage_emulator.__main__ import main
  main(sys.argv[1:])
