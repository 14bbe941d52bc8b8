"""The compressed_segmentation chunk encoding: uint32/uint64 labels <-> bytes.

Layout (neuroglancer's spec): per channel a uint32 offset (in words, from the start) of that
channel's data; per channel and block (x fastest) a 2-word header: table offset (24 bits), bits
per value (8 bits), value offset (24 bits, as tensorstore reads it); offsets are in words from
the channel start, and a channel's data runs to the end of the buffer. Values are packed LSB
first over the whole block (x fastest), also past the volume's edge.

Both directions run in a compiled kernel (``ngshard/_cseg.c``, built with the package) without
the GIL, so they run on every thread at once; per core about as fast as the C++
``compressed_segmentation`` package (``tools/bench_cseg.py``). That package (the tests'
reference) is not used: it holds the GIL, checks nothing (out-of-range offsets, bit widths or
table indices make it read outside the buffer: segfaults or silently wrong labels) and
mis-decodes valid 32-bit blocks. The encoder writes as many bytes as the reference encoder
(identical tables are stored once); the decoder first validates every header with
tensorstore's rules (numpy, all blocks at once), and the kernel checks every index it reads.
"""

from .decoder import decode
from .encoder import encode

__all__ = ["decode", "encode"]
