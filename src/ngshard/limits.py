"""The budgets of ngshard, in one place: every bound on memory, request size, batch, time,
retry and hostile input that the package tunes, each with one value and one line on what it
bounds and why that value.

``DEFAULT_*`` names are the defaults of public parameters (``cache_bytes=``,
``staged_bytes=``, ``buffer_bytes=``, ``shard_bytes=``, ...) that a caller may change per call;
the other names are fixed bounds. Modules import them from here (their old homes re-export
them by import, so ``ngshard.staged.DEFAULT_STAGED_BYTES`` and the like still work).

Not here: format sizes and magic numbers (they are facts, kept with their format), crossover
points of one algorithm (when threads or a vectorized path pay off, measured for that code and
kept beside it), and the number of worker threads (``threads.WORKERS``, from the machine).
This module imports nothing: everything may import it.
"""

from __future__ import annotations

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# --- reads and the index cache -------------------------------------------------------------

#: Bytes of decoded shard indices one open store or array keeps (an index of ~1 MiB per
#: shard of a large volume: a few hundred shards stay warm without the process growing much).
DEFAULT_CACHE_BYTES = 256 * MiB
#: Bytes of decoded chunks one open zarr array keeps (``chunk_cache_bytes``); a read of more
#: than 1 / CACHED_READ of it streams past the cache rather than evict everything there.
DEFAULT_CHUNK_CACHE_BYTES = 64 * MiB
CACHED_READ = 8
#: Most bytes one stored value (or file twin) decodes to when nothing tighter is known: past
#: it a gzip value is taken for a bomb rather than exhausting memory.
DEFAULT_MAX_VALUE_BYTES = 256 * MiB
#: Most bytes one minishard index may inflate to (a million keys in one minishard); past it
#: the index is taken for a gzip bomb.
MAX_MINISHARD_INDEX_BYTES = 256 * MiB
#: Ranges of one object closer than this are read as one, on object stores and web servers,
#: and locally in batches of 8 MiB or more of a file (smaller ones are read range by range in
#: one compiled pass, where a pread costs less than slicing merged reads apart): unused bytes
#: cost less than another request. Remotely a request costs a round
#: trip of 20-100 ms, a slot of the bounded concurrency and the server's work, while a
#: connection moves several MiB per round trip (measured: tools/bench_http.py and
#: bench_cloud.py, 1,000 random 1 KiB keys of 100 MiB in 16 shards; gaps of 64, 128, 256
#: KiB and 1 MiB: 128 KiB took the least time on both layouts, 0.5-0.65x the time of 64
#: KiB with half the requests and 2.5-3x the bytes; past it the bytes cost more than the
#: requests saved). Rust's object_store coalesces within 1 MiB.
MAX_GAP, REMOTE_MAX_GAP = 4 * KiB, 128 * KiB
#: Ranges up to this size out of a merged read of bytes come back as bytes, not views: the
#: copy costs less than a view a caller copies later (10,000 1 KiB values, bench_kv.py).
SLICED_BYTES = 4 * KiB
#: Whether large new arrays (read results, staged slabs, staging blocks: ``_arrays.fresh``)
#: ask the system for huge pages. No: their first writes then cost 2-4x the system time
#: of small pages where freed memory goes back to a hypervisor (1 GiB written by 2 threads:
#: 1.1-2.8 s in huge pages, 0.5-0.6 s in small ones, on the 2-core VM of the benchmarks),
#: and save little elsewhere (one fault per 2 MiB, but the same zeroing). Where transparent
#: huge pages are "always", the system's choice stands either way.
HUGE_PAGES = False
#: Memory of large read results dropped lately kept for the next ones (``recycle.Recycler``):
#: at most this many bytes (a 512^3 uint64 volume) and a RECYCLE_SHARE-th of the memory the
#: process may use, none for longer than this many seconds (jemalloc's default decay is 10 s).
#: Kept pages are marked free: the system takes them back first when it runs short.
RECYCLE_BYTES, RECYCLE_SHARE, RECYCLE_SECONDS = GiB, 16, 10.0
#: Except staged slabs, which are written in many small scattered pieces (slices, boxes), a
#: few pages each: there one fault per 2 MiB beats one per 4 KiB (bench_staged, 128 z-slices
#: of 512x512 uint8: 0.120 s in huge pages against 0.165 s in small ones).
SLAB_HUGE_PAGES = True
#: ``threads.pstart`` hands each leaf thread runs of 1 / (PSTART_SHARE * threads) of the items
#: left (a whole zarr read of 256 chunks, tools/bench_zarr.py: about 4% faster than 4 fixed
#: runs a thread; single items taken in turn were no faster than fixed runs, two threads then
#: faulting in the same pages).
PSTART_SHARE = 2
#: Large local reads go in pieces of this size over threads (page faults on every core).
READ_PIECE_BYTES = 4 * MiB
#: A local batch of reads holding this many ranges, or this many bytes in several files,
#: reads its files on threads (one pread costs a few microseconds, much of it without the
#: GIL; a MiB copied from the page cache, a few hundred).
THREADED_RANGES, THREADED_READ_BYTES = 256, MiB
#: A listing of a local store reads shards ahead on threads where its first shard took this
#: long or more to load (sharded/listing.py).
THREADED_SHARD_SECONDS = 0.005
#: zstd's largest block of content (a frame decodes block by block): a read of a chunk's
#: first planes decodes only its prefix where this much or more lies past them.
ZSTD_BLOCK_BYTES = 128 * KiB
#: A read decodes its chunks on threads from this many decoded bytes (at least 2 chunks):
#: handing work to a thread and back costs about what decoding this much does (zarr boxes
#: read one by one, 64^3 uint8 chunks: 1.70-1.83x tensorstore's time from 2 chunks,
#: 1.58-1.62x from 4 or never).
THREADED_DECODE_BYTES = MiB
#: A read's result this large has its chunks' rows that are whole cache lines (CACHE_LINE
#: bytes, aligned) written past the cache: far larger than a core's cache, it would only be
#: evicted again, and an ordinary store first loads each line it writes (a 64 MiB zarr read
#: of 64^3 uint8 chunks: its copies 21 -> 10 ms of one core; the read 0.85 -> 0.76x
#: tensorstore's time in alternating turns). compressed_segmentation chunks decoded into
#: such a result stream their block rows alike (a 512^3 uint64 read: 0.55 -> 0.32 s).
STREAM_BYTES, CACHE_LINE = 16 * MiB, 64
#: Most shard names probed (one stat each, in one batch) on storage that cannot list:
#: shard_bits up to 12.
MAX_PROBED_SHARDS = 4096
#: Seconds within which a file on a filesystem with coarse timestamps may change again
#: without a new generation (whole seconds on some, plus clock skew): read it again.
COARSE_TIMES = 2.0

# --- retries (storage/retry.py) ------------------------------------------------------------

#: Times one object may be found changed under one read (a writer committing to it without
#: pause), or one request may fail transiently, before the read or request gives up; with the
#: backoff below that is about a second of changes, or half a minute of a failing server.
DEFAULT_READ_RETRIES = 10
#: First and longest pause between tries, seconds (doubling, jittered): the first retry is
#: almost immediate, a busy writer is not hammered.
BACKOFF_FIRST, BACKOFF_MAX = 0.001, 0.2
#: Seconds all the tries of one operation (or of one request) may take: a read that cannot
#: finish within a minute of retries is reported rather than hanging a viewer or a task.
RETRY_SECONDS = 60.0
#: First and longest pause before a request that failed transiently (HTTP 408/429/5xx, a
#: reset, a timeout) is sent again, seconds: a server that sheds load gets time to recover
#: (the cloud SDKs start near 0.1 s and cap at tens of seconds), yet one dropped request
#: among thousands costs a read little.
REQUEST_BACKOFF_FIRST, REQUEST_BACKOFF_MAX = 0.05, 10.0
#: Seconds one remote request may take before it counts as failed (and is tried again), and
#: seconds to open its connection.
REQUEST_TIMEOUT, CONNECT_TIMEOUT = 120.0, 10.0
#: Requests one remote store keeps in flight at once: enough to hide 20-100 ms of latency
#: behind a large batch, few enough not to be throttled or exhaust sockets.
REQUEST_CONCURRENCY = 128

# --- staging and writing -------------------------------------------------------------------

#: Memory of the changes an open store or staged array holds before spilling or writing
#: back: large enough that whole shards commit at once, small beside a worker's RAM.
DEFAULT_STAGED_BYTES = 1 * GiB
#: Memory of the values a bulk writer (write_kv, meshes, skeletons, annotations) holds
#: before it spills them by shard: spilling is cheap (a local spill file becomes the shard).
DEFAULT_BUFFER_BYTES = 192 * MiB
#: Keys hashed, located or checked per vectorized step: bounds the temporaries to a few
#: tens of MiB whatever the number of keys.
KEY_BLOCK = 1 << 20
#: Pairs taken from an iterable per batch: at most this many, about this many bytes of
#: values, and a first batch this small until the values' size is known.
PAIR_BATCH, PAIR_BATCH_BYTES, PAIR_BATCH_FIRST = 1 << 16, 16 * MiB, 64
#: Shards (or keys) whose indices a commit plan reads at once: remote stores ask for them
#: together, memory holds only that many shards' changes.
PLAN_GROUP_SHARDS, PLAN_GROUP_KEYS = 64, 1 << 16
#: Values read per batch when iterating over a store's items.
ITEMS_BATCH = 1 << 14
#: Raw chunks (sizes known before encoding) are encoded straight into staging blocks of
#: about this many bytes, in commit order: a shard within one block is written as it lies,
#: with no copy between encoding and the file; past it, the next block (so memory beyond the
#: staging budget stays bounded).
STAGE_BLOCK_BYTES = 256 * MiB
#: Chunks whose sizes are known only once encoded (compressed_segmentation, images, zarr
#: codecs) are encoded a batch at a time in commit order and copied into staging blocks of
#: up to this much address space (at most the raw size of the chunks being written; only
#: what is written becomes memory, handed to the staging when the block is full, so memory
#: beyond the staging budget stays bounded by it): a shard within one block is written as
#: it lies. Large enough for a 512^3 uint64 segmentation shard (about 260 MiB).
ENCODED_BLOCK_BYTES = 512 * MiB
#: A write of encoded chunks (sizes known only once encoded) of at least this many raw bytes
#: spills each batch to the files that become its shards while the next batch is encoded, so
#: that writing the files overlaps the encoding rather than following it (at the commit, on
#: one thread, with the other cores idle): 512^3 uint64 labels, 195 MB encoded, took 0.3-0.45
#: s of one core to write into the page cache after 0.9 s of encoding on two.
WRITE_BEHIND_BYTES = 256 * MiB
#: A spilled run of at least this many bytes beside durable shards (a batch written behind)
#: is flushed to the disk as it is spilled; smaller runs (updates of many small keys, which
#: are merged into their shards rather than becoming them) wait for the commit.
FLUSH_RUN_BYTES = 1 * MiB
#: Bytes of values copied at a time when a spilled shard's data is put in order.
SPILL_COPY_BYTES = 8 * MiB
#: Bytes moved per step of a vectorized gather of many small values (a cache-sized window).
GATHER_BYTES = 4 * MiB
#: Bytes a local write call takes at most: Linux 6.x puts a larger buffered write
#: into large page-cache folios, and on this VM such writes turned 10x slower after a few
#: hundred MiB (13 MiB writes: 55 → 550 ms for 208 MiB; 2 MiB writes stayed at 55 ms).
WRITE_CALL_BYTES = MiB
#: Bytes of a local file copied at a time where copy_file_range is missing.
COPY_PIECE_BYTES = 64 * MiB
#: Output bytes inflated per step of a decompression (its limit checked in between).
INFLATE_PIECE_BYTES = 8 * MiB
#: Compressed input read per step of a streamed decompression.
STREAM_STEP_BYTES = 64 * KiB

# --- chunks, layers, conversion ------------------------------------------------------------

#: Chunks (zarr granules) fetched and decoded, or encoded and staged, per batch: at most
#: this many (Python work per chunk) and about this many decoded bytes (256 chunks of 64^3
#: uint8: enough to fill the threads and coalesce reads; few large chunks fit in memory).
CHUNK_BATCH, CHUNK_BATCH_BYTES = 1024, 64 * MiB
#: An encoded chunk (or a codec's output of unknown size) may take this multiple of the
#: chunk's raw size plus these bytes (tables and headers of tiny chunks); past it: a bomb.
CHUNK_SLACK, CHUNK_SLACK_BYTES = 4, 1 * MiB
#: Segment ids written per batch as files of their own (unsharded layers).
UNSHARDED_BATCH = 4096
#: Skeletons encoded per batch, and encoded before "auto" sharding is chosen from their size.
SKELETON_BATCH = 1024
#: Segments meshed and Draco-encoded per batch (their fragments spread over every core).
MESH_BATCH = 64
#: Rows per step of the mesh batch's in-place passes.
MESH_ROWS = 1 << 16
#: Encoded values gzipped per run on a worker while the next run is encoded.
GZIP_RUN_BYTES = 8 * MiB
#: Bytes of annotations encoded per batch before they are streamed into the store.
ANNOTATION_BATCH_BYTES = 8 * MiB
#: Most annotations per spatial cell by default (a chunk of ~100 KiB of points).
DEFAULT_ANNOTATIONS_PER_CELL = 5000
#: Annotation spatial index: an annotation meeting more cells of the next level than this
#: stays in the current one (a large box among small cells); levels at most.
MAX_CELLS, MAX_LEVELS = 64, 24
#: A query touching more cells of one level lists the level's stored cells instead.
MAX_QUERY_CELLS = 1 << 16
#: Bytes of one compressed_segmentation scratch buffer a thread reuses; larger ones are fresh.
CSEG_SCRATCH_BYTES = 16 * MiB
#: Draco guard: declared faces (or vertices) per byte of a fragment decoded in this process,
#: plus a little for tiny fragments; the address space a child may add for the outliers.
DRACO_RATIO, DRACO_SLACK, DRACO_ISOLATED_BYTES = 16, 4096, 1 * GiB
#: Uncompressed bytes of one volume shard under "auto" sharding (igneous aims at 3.5 GB;
#: a conversion task holds one shard's chunks at a time).
DEFAULT_VOLUME_SHARD_BYTES = 2 * GiB
#: Encoded bytes of one segment-layer shard under "auto" sharding (meshes, skeletons).
DEFAULT_SEGMENT_SHARD_BYTES = 1 * GiB
#: Minishards per shard at most: the shard index readers fetch whole stays at most 32 KiB.
MAX_MINISHARD_BITS = 11
#: Segment layers' "auto" sharding: ids per minishard (a ~1.5 KiB minishard index), ids per
#: shard at most (several shards to build in parallel), the count assumed for an iterator.
IDS_PER_MINISHARD, MAX_IDS_PER_SHARD, UNKNOWN_COUNT = 64, 1 << 14, 1 << 20
#: Values smaller than this on average (single annotations) are stored raw by "auto".
SMALL_VALUE = 128
#: Uncompressed bytes of one conversion task's output (a shard, a box of chunk files).
DEFAULT_TASK_BYTES = 128 * MiB
#: Voxel bytes a conversion task reads from its source at a time.
SLAB_BYTES = 64 * MiB
#: Chunks hashed at a time when a plan groups the chunks of a scattered (murmurhash) scale by
#: shard (the hash's temporaries: about 20 MiB).
PLAN_BLOCK_CHUNKS = 1 << 18
#: Chunk IDs in one of the plan's spill files (a range of shards, read whole when its tasks
#: are made: 16 MiB).
PLAN_RANGE_CHUNKS = 1 << 21
#: Finished tasks recorded in one resume record (one PUT, later one of few deletes): 800,000
#: tasks make 800 records. A killed client redoes at most these (or ``RECORD_SECONDS``).
RECORD_TASKS = 1000
#: Seconds after which finished tasks are recorded even if fewer than ``RECORD_TASKS``.
RECORD_SECONDS = 2.0
#: Most partitions (tasks) ``ngshard.dask.write_kv`` makes by default: one per shard up to
#: this, runs of consecutive shards past it (a task per shard of 2**20 small shards would
#: cost more in scheduling than in writing).
MAX_SHARD_TASKS = 4096

# --- hostile input -------------------------------------------------------------------------

#: JSON nesting deeper than any real metadata holds: a subtree deeper is kept unparsed
#: (:class:`ngshard.jsondoc.DeepJSON`), so Python's recursive parser never exhausts the stack.
MAX_JSON_DEPTH = 100
#: The longest name from data (fragment, dataset path, scale key) taken as a storage name.
MAX_NAME_CHARS = 4096
#: Most axes a zarr array may have (tensorstore's limit).
MAX_RANK = 32
#: An info file past this size is not a layer's (the server does not read it whole).
MAX_INFO_BYTES = 16 * MiB

# --- the server ----------------------------------------------------------------------------

#: Most connections open at once (fewer if the descriptor limit says so). Past it, the
#: connection idle the longest is closed for a new one; if none is idle, the new one is
#: answered 503 and closed.
MAX_CONNECTIONS = 4096
#: Seconds a connection may stay idle between requests.
IDLE_TIMEOUT = 60.0
#: A response must be taken by the client at SEND_TIMEOUT seconds plus one second per
#: MIN_SEND_RATE bytes sent, or the connection is closed (a trickling reader holds no slot).
SEND_TIMEOUT, MIN_SEND_RATE = 60.0, 64 * KiB
#: Event loops (threads) of the server. One: two loops fight over the GIL (a waiting loop
#: gets it after the 5 ms switch interval), 0.35x the requests/s of one at 256 connections
#: (tools/bench_serve.py --servers loops1,loops2).
SERVE_LOOPS = 1
#: Processes serving a local folder by default (``ngshard serve``): one per core, at most
#: this many (each is an interpreter of about 50 MiB).
SERVE_PROCESSES = 8
#: Threads for the server's blocking work: remote stores, decoding twins, listings.
SERVE_THREADS = 8
#: Seconds a process pool about to fork waits for threads on their way out.
THREAD_EXIT_SECONDS = 0.25
#: Viewers ask for the same few hundred names over and over: the parses of this many
#: request targets are kept, of targets up to this long (so a hostile client cannot make
#: the kept ones large).
CACHED_TARGETS, CACHED_TARGET = 4096, 512
#: Local files the server keeps open between requests.
OPEN_FILES = 256
#: Decoded bytes of a compressed twin made per step while serving it (bounds the memory a
#: connection holds, whatever the twin inflates to).
TWIN_PIECE_BYTES = 64 * KiB
#: A twin sent decoded is decoded whole and sent with its length where it decodes to at most
#: this many bytes (a chunk file, mostly): clients such as obstore's (ngshard's own) take no
#: answer without a Content-Length. Larger ones stream, chunked. Bounds the memory of such a
#: response, held until the client has read it.
TWIN_WHOLE_BYTES = 4 * MiB
#: Seconds a client has to deliver a whole request head once it has begun.
HEAD_TIMEOUT = 20.0
#: Largest request body read (and discarded); larger ones are refused with 413.
MAX_BODY = 64 * KiB
#: Longest request target (path and query) accepted; longer ones get 414.
MAX_TARGET = 8 * KiB
#: Longest request head (request line and header fields) accepted; longer ones get 431.
MAX_HEAD = 32 * KiB
#: Most header fields in one request; more get 431.
MAX_FIELDS = 100
#: Bodies of remote files up to this size go with the head in one call; larger ones stream
#: in pieces of SERVE_PIECE_BYTES (local files' bodies go by sendfile).
SMALL_BODY, SERVE_PIECE_BYTES = 256 * KiB, 1 * MiB
#: Seconds, and bytes of input, a closing connection drains before it closes.
LINGER_SECONDS, LINGER_BYTES = 2.0, 1 * MiB
#: Folder levels below the served root searched for layers, and folders looked at in all.
LAYER_SEARCH_DEPTH, MAX_FOLDERS = 3, 200
#: Layers put in the viewer's state at most (a tree of hundreds would be unreadable).
MAX_LAYERS = 16
