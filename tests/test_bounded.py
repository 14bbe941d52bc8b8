"""ngshard.bounded.take: the one helper decoders turn a count read from data into an array
with, checked against the bytes present (a view, never an allocation sized by the claim)."""

from __future__ import annotations

import numpy as np
import pytest

import ngshard
from ngshard.bounded import take
from ngshard.layers.mesh_codec import decode_legacy


def test_take_views_what_is_there():
    buf = np.arange(4, dtype="<u4").tobytes()
    got = take(buf, "<u4", 2, 8, where="f", what="ids")
    assert got.tolist() == [2, 3] and not got.flags.owndata


@pytest.mark.parametrize("count, offset", [(5, 0), (1, 16), (2**62, 0), (-1, 0), (1, -4)])
def test_take_refuses_claims_past_the_bytes(count, offset):
    with pytest.raises(ngshard.CorruptDataError, match=r"^f: ids: .* past the 16 bytes"):
        take(bytes(16), "<u4", count, offset, where="f", what="ids")


def test_a_decoder_names_the_file_and_the_claim():
    with pytest.raises(ngshard.CorruptDataError, match="frag: .*vertex count"):
        decode_legacy(b"\x01\x00", "frag")
