"""A volume root for cloud-volume to read ngshard's layers from, in the tests that compare."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest


def cloudvolume_root(tmp_path: Path, **layer: str) -> tuple[ModuleType, Path]:
    """cloud-volume (the test is skipped where it is not installed: it is not in the test extra)
    and ``tmp_path / "vol"``, holding the info of a 64^3 uint64 segmentation that names
    ``layer`` (``mesh="mesh"`` or ``skeletons="skel"``)."""
    cloudvolume = pytest.importorskip("cloudvolume")
    root = tmp_path / "vol"
    root.mkdir()
    info = cloudvolume.CloudVolume.create_new_info(
        num_channels=1, layer_type="segmentation", data_type="uint64", encoding="raw",
        resolution=[8, 8, 40], voxel_offset=[0, 0, 0], chunk_size=[64, 64, 64],
        volume_size=[64, 64, 64], **layer)
    (root / "info").write_text(json.dumps(info))
    return cloudvolume, root
