"""How long a test waits on a peer (tensorstore, zarr-python, a child process) before it calls
the peer hung: every tensorstore future is waited on with ``.result(timeout=PEER_TIMEOUT)``,
every child process with ``timeout=PEER_TIMEOUT`` (tests/test_style.py checks both), and
zarr-python's synchronous calls with its ``async.timeout`` set to it (tests/conftest.py). A
peer that never answers then fails its own test with TimeoutError and the run goes on;
pytest-timeout's per-test limit (pyproject.toml) is the last resort.

A peer call of the tests takes well under a second; 120 s is a hang even on a loaded machine.
"""

PEER_TIMEOUT = 120
