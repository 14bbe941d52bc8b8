"""The zarr tests reuse the staged-array tests' numpy model and index strategies, and the
volume tests' tensorstore specs."""

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / d) for d in ("staged", "volume")]
