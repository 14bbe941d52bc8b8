"""The zarr tests reuse the staged-array tests' numpy model and index strategies."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "staged"))
