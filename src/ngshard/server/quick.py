"""The requests a viewer sends most, answered in compiled code (``_kernels.serve_quick``, in
``_serve.c``): GET of a byte range, or the whole, of a local file the server has answered
for before.

Why: a range answered by the Python path (parse the head, find the file, check it, format
the head, send it, ``sendfile``) costs about 28 µs of CPU where nginx spends 8, so that at 32
connections one core served about 0.4x what nginx does (BENCHMARKS.md, serve rows).

What it keeps: the first request for a target goes the Python path, which checks the name
(``paths.parse_target``), finds and opens the file (``files.LocalFiles``) and answers it; a
plain GET of a file, not a twin, then records the target with the file's descriptor and
identity (``LocalFiles.remember``). From then on, a head is answered here only while it is
an HTTP/1.1 GET of such a target, with well-formed fields and CRLF line ends, none that
changes the answer of a file (``If-*``, ``Content-Length``, ``Transfer-Encoding``), a
Connection field of ``keep-alive`` if any, and a ``Range`` of one of the forms
``bytes=a-b``, ``bytes=a-``, ``bytes=-n`` that selects bytes of the file; and while one
``stat`` of its path still finds the inode, size and modification time it was opened with.
The answer is the one the Python path gives, byte for byte (``tests/server/test_quick.py``
sends the same requests to both). Anything else - HEAD, HTTP/1.0, a 416, a condition, a
file changed or no longer kept open - goes the Python path, and so does every request after
it in the same read.

Used for a local folder served without a request log, on Linux (``answer`` is None
elsewhere).
"""

from __future__ import annotations

from .. import _kernels

#: ``answer(fd, data, table)``: see ``_kernels.serve_quick``; None where it is not built.
answer = getattr(_kernels, "serve_quick", None)

#: The request fields whose presence sends a request the Python path, because that path
#: reads them when it answers a plain file: ``if-`` stands for every field starting so.
FIELDS_READ = frozenset({"if-", "content-length", "transfer-encoding"})
#: The fields it reads and ``answer`` handles itself.
FIELDS_HANDLED = frozenset({"range", "connection"})
