"""cloud-volume as a wrong-value oracle of the fuzzer: one long-lived child process in the
peers' venv (``tests/peers.py``; cloud-volume is too heavy and too pinned for ours), fed one
case at a time on its stdin, so that one import serves thousands of cases.

The child reads skeletons (sharded and unsharded), legacy meshes (sharded and not),
multi-resolution Draco meshes (sharded and not) and annotations (``get_by_id``,
``get_by_relationship``) through cloud-volume's own readers, under ``RLIMIT_AS``; the parent
gives each case ``timeout`` seconds and kills and restarts a child that overruns or dies. Both
sides put what they read into the same :func:`canonical` form (meshes as sorted triangles of
coordinates: cloud-volume merges fragments and duplicate vertices in its own order).

The child side imports only numpy and cloud-volume: run as a script it is the child.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import numpy as np

#: Address space of the child (cloud-volume with its threads reserves a lot of it).
CHILD_MEMORY = 4 << 30
#: The surfaces cloud-volume reads, and the info ``@type`` it needs for each.
SURFACES = ("skeletons", "meshes", "legacy meshes", "annotations")


def points(vertices) -> np.ndarray:
    """Vertices (n, 3) float64, a vertex with any NaN coordinate all NaN: a transform applied
    as a matrix product spreads a NaN to the whole vertex (cloud-volume's does, for skeletons
    and multi-resolution meshes; ngshard's for every layer), one skipped leaves it alone."""
    v = np.array(vertices, np.float64).reshape(-1, 3)
    v[np.isnan(v).any(axis=1)] = np.nan
    return v


def triangles(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """A mesh as its triangles' corner coordinates, (m, 9) float64, corners and triangles in
    sorted order: the same for any vertex order, fragment split or duplicate vertices."""
    v = points(vertices)
    f = np.asarray(faces, np.int64).reshape(-1, 3)
    if len(f) == 0 or len(v) == 0:
        return np.zeros((0, 9))
    tri = v[f]  # (m, 3, 3)
    order = np.lexsort(tri.transpose(2, 0, 1)[::-1], axis=-1) if tri.size else None
    tri = np.take_along_axis(tri, order[..., None], axis=1).reshape(-1, 9)
    return tri[np.lexsort(tri.T[::-1])]


def canonical_skeleton(key: int, vertices, edges, radius) -> dict:
    """A skeleton's vertices, edges and radii (None: the layer has no ``radius`` attribute;
    cloud-volume then invents -1 for each vertex, which is not compared)."""
    out = {f"skeleton {key} vertices": points(vertices),
           f"skeleton {key} edges": np.asarray(edges, np.int64).reshape(-1, 2)}
    if radius is not None:
        out[f"skeleton {key} radius"] = np.asarray(radius, np.float32).reshape(-1)
    return out


def canonical_annotations(prefix: str, ids, geometry) -> dict:
    """Annotations as their sorted ids, and geometry in that order."""
    ids = np.asarray(ids, np.uint64).reshape(-1)
    order = np.argsort(ids, kind="stable")
    geometry = np.asarray(geometry, np.float32).reshape(len(ids), -1) if len(ids) else \
        np.zeros((0, 0), np.float32)
    return {f"{prefix} ids": ids[order], f"{prefix} geometry": geometry[order]}


class CloudVolumePeer:
    """The parent's handle on the child: :meth:`read` one case, started (again) on demand."""

    def __init__(self, python: str) -> None:
        self.python, self.proc = python, None

    def _start(self) -> None:
        env = {**os.environ, "PYTHONPATH": ""}  # not our modules: the peers' venv only
        self.proc = subprocess.Popen([self.python, __file__], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env=env)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None

    def read(self, surface: str, root: Path, keys: list[int], timeout: float) -> dict:
        """cloud-volume's canonical reads of ``root``; raises RuntimeError with its error,
        TimeoutError where it overran ``timeout`` (the child is then restarted), ChildProcessError
        where it died (out of memory, a crash)."""
        if self.proc is None:
            self._start()
        self.proc.stdin.write(json.dumps({"surface": surface, "root": str(root),
                                          "keys": [int(k) for k in keys]}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else None
        if not line:
            self.close()
            if ready:
                raise ChildProcessError("cloud-volume's child died")
            raise TimeoutError("cloud-volume took too long")
        got = json.loads(line)
        if "error" in got:
            raise RuntimeError(got["error"])
        return {k: np.asarray(v, got["dtypes"][k]).reshape(got["shapes"][k])
                for k, v in got["value"].items()}


# --- the child ---------------------------------------------------------------------------------

def _read(surface: str, root: str, keys: list[int]) -> dict:
    from cloudvolume import CloudVolume
    from cloudvolume.datasource.precomputed import PrecomputedAnnotationSource

    url = f"file://{root}"  # not as_uri(): cloud-volume does not unquote
    out: dict = {}
    if surface == "annotations":
        # cloud-volume 12.15 takes only upper-case annotation types; the spec's examples
        # and neuroglancer's writer use lower case, which neuroglancer reads
        info = json.loads(Path(root, "info").read_text())
        if isinstance(info, dict) and isinstance(info.get("annotation_type"), str):
            info["annotation_type"] = info["annotation_type"].upper()
        src = PrecomputedAnnotationSource(url, info=info)
        if info.get("annotation_type") != "POINT":
            return {}  # it decodes two-point types with np.hstack(a, b), which raises
        got = src.get_by_id(keys[:8])
        got = got if isinstance(got, dict) else {keys[0]: got}
        for k in sorted(got):
            out.update(canonical_annotations(f"annotation {k}", [k], got[k].geometry))
        try:
            rel = src.get_by_relationship("seg", 2)
        except ValueError as e:  # it raises where a segment has no entry; we return none
            if "was not found" not in str(e):
                raise
        else:
            out.update(canonical_annotations("related", rel.ids, rel.geometry))
        return out
    vol = CloudVolume(f"file://{Path(root).parent / 'cv'}", progress=False)
    if surface == "skeletons":
        info = json.loads(Path(root, "info").read_text())
        radius = any(isinstance(a, dict) and a.get("id") == "radius"
                     for a in info.get("vertex_attributes") or [])
        for s in vol.skeleton.get(keys[:8]):
            out.update(canonical_skeleton(int(s.id), s.vertices, s.edges,
                                          s.radius if radius else None))
        return out
    if surface == "legacy meshes":
        info = json.loads(Path(root, "info").read_text())
        if isinstance(info, dict) and info.get("sharding") is not None:
            return {}  # cloud-volume 12.15 reads sharded legacy meshes as unsharded ones
        meshes = vol.mesh.get(keys[:8], fuse=False)
    else:
        meshes = vol.mesh.get(keys[:8], lod=0)
    for k, m in sorted(meshes.items()):
        out[f"mesh {k}"] = triangles(m.vertices, m.faces)
    return out


def wrapper_info(surface: str) -> dict:
    """The segmentation info of the ``cv`` directory beside a dataset, through which
    cloud-volume finds the dataset (``data``) as its mesh or skeleton layer."""
    info = {"@type": "neuroglancer_multiscale_volume", "type": "segmentation",
            "data_type": "uint64", "num_channels": 1,
            "scales": [{"key": "s0", "size": [1, 1, 1], "resolution": [1, 1, 1],
                        "voxel_offset": [0, 0, 0], "chunk_sizes": [[1, 1, 1]],
                        "encoding": "raw"}]}
    info["skeletons" if surface == "skeletons" else "mesh"] = "data"
    return info


def answer(case: dict) -> dict:
    """One case's answer: cloud-volume's canonical reads, or its error."""
    try:
        wrap = Path(case["root"]).parent / "cv"
        if case["surface"] != "annotations" and not wrap.exists():
            wrap.mkdir()
            (wrap / "info").write_text(json.dumps(wrapper_info(case["surface"])))
            (wrap / "data").symlink_to(case["root"])
        value = _read(case["surface"], case["root"], case["keys"])
        return {"value": {k: v.tolist() for k, v in value.items()},
                "dtypes": {k: v.dtype.str for k, v in value.items()},
                "shapes": {k: v.shape for k, v in value.items()}}
    except MemoryError:
        return {"error": "MemoryError"}
    except Exception as e:  # any error of cloud-volume's is its outcome "error"
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}


def child() -> None:
    """Import cloud-volume once, then answer each case on stdin with one line on stdout."""
    import resource

    import cloudfiles.cloudfiles

    # cloudfiles runs each local read in a thread it polls every 0.1 s (most of a case's
    # time; and with those threads a long-lived child once answered a case with the previous
    # case's transform, not seen since): run its jobs in the calling thread, as it does for
    # in-memory storage
    jobs = cloudfiles.cloudfiles.schedule_jobs
    cloudfiles.cloudfiles.schedule_jobs = lambda fns, concurrency, *a, **k: jobs(fns, 0, *a,
                                                                                 **k)
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))
    for line in sys.stdin:
        print(json.dumps(answer(json.loads(line))), flush=True)


if __name__ == "__main__":
    child()
