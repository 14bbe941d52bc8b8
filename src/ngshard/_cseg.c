/* compressed_segmentation, one channel at a time, in C (the layout is in the docstring of
 * ngshard/volume/cseg/__init__.py). The Python side validates every block header first
 * (tensorstore's rules) and formats the errors; here the decoder still checks each index it
 * reads against its table, and nothing reads or writes outside the buffers it was given.
 * Both directions release the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define CAN_STREAM 1
#else
#define CAN_STREAM 0
#endif

#include "_kernels.h"

static inline uint32_t word_at(const char *w, Py_ssize_t i) {
    uint32_t v;
    memcpy(&v, w + 4 * i, 4); /* little-endian hosts only (checked at import) */
    return v;
}

/* Index l of a block's indices of B bits (B divides 32: none straddles a word). */
#define INDEX(B, l)                                                                        \
    ((B) ? (word_at(cw, values + (((l) * (B)) >> 5)) >> (((l) * (B)) & 31)) &              \
               (uint32_t)((1ull << (B)) - 1)                                               \
         : 0u)

/* Store table entry idx at o (the table's words are little endian: an 8-byte entry is its
 * two words as they lie). */
#define STORE(o, idx)                                                                      \
    do {                                                                                   \
        if (entry == 1)                                                                    \
            memcpy((o), cw + 4 * (table + (Py_ssize_t)(idx)), 4);                          \
        else                                                                               \
            memcpy((o), cw + 4 * (table + 2 * (Py_ssize_t)(idx)), 8);                      \
    } while (0)

/* Store table entry idx at o past the cache (a non-temporal store: see _stream.c). */
#if CAN_STREAM
#define STREAM_STORE(o, idx)                                                               \
    do {                                                                                   \
        if (entry == 1) {                                                                  \
            int v_;                                                                        \
            memcpy(&v_, cw + 4 * (table + (Py_ssize_t)(idx)), 4);                          \
            _mm_stream_si32((int *)(o), v_);                                               \
        } else {                                                                           \
            long long v_;                                                                  \
            memcpy(&v_, cw + 4 * (table + 2 * (Py_ssize_t)(idx)), 8);                      \
            _mm_stream_si64((long long *)(o), v_);                                         \
        }                                                                                  \
    } while (0)
#else
#define STREAM_STORE STORE
#endif

/* One block's voxels inside the volume, indices of B bits, each written at its byte offset
 * in the output (any strides): bad = the block if one points past its table. A table that
 * reaches 2^B entries (to the end of the channel, as the tables an encoder writes last
 * mostly do) cannot be indexed past: no voxel needs its check then. */
#define DECODE_BLOCK(B)                                                                    \
    do {                                                                                   \
        const int check = (B) == 32 || tsize < ((Py_ssize_t)1 << ((B) & 31));              \
        for (Py_ssize_t lz = 0; lz < ez && bad < 0; lz++)                                  \
            for (Py_ssize_t ly = 0; ly < ey; ly++) {                                       \
                Py_ssize_t l = bx * (ly + by * lz);                                        \
                char *o = out + kx * bx * sx + (ky * by + ly) * sy + (kz * bz + lz) * sz;  \
                if (check) {                                                               \
                    for (Py_ssize_t lx = 0; lx < ex; lx++, l++, o += sx) {                 \
                        uint32_t idx = INDEX(B, l);                                        \
                        if (idx >= (uint64_t)tsize) {                                      \
                            bad = block;                                                   \
                            break;                                                         \
                        }                                                                  \
                        STORE(o, idx);                                                     \
                    }                                                                      \
                    if (bad >= 0)                                                          \
                        break;                                                             \
                } else if (sx == 4 * entry && stream && (ex * 4 * entry) % 64 == 0 &&        \
                           (uintptr_t)o % 64 == 0) { /* a row of whole cache lines */      \
                    for (Py_ssize_t lx = 0; lx < ex; lx++, l++)                            \
                        STREAM_STORE(o + 4 * entry * lx, INDEX(B, l));                     \
                } else if (sx == 4 * entry) { /* a row of the output: one pointer */       \
                    for (Py_ssize_t lx = 0; lx < ex; lx++, l++)                            \
                        STORE(o + 4 * entry * lx, INDEX(B, l));                            \
                } else {                                                                   \
                    for (Py_ssize_t lx = 0; lx < ex; lx++, l++, o += sx)                   \
                        STORE(o, INDEX(B, l));                                             \
                }                                                                          \
            }                                                                              \
    } while (0)

/* Decode one channel whose headers were validated: returns -1 on success, else the block
 * whose index points past its table inside the volume. */
#if defined(__GNUC__) || defined(__clang__)
#define INLINE static inline __attribute__((always_inline))
#else
#define INLINE static inline
#endif

/* (inlined where entry is a constant: a loop per width and entry size) */
INLINE Py_ssize_t decode_channel(const char *w, Py_ssize_t nwords, Py_ssize_t start,
                                 const Py_ssize_t *xyz, const Py_ssize_t *bs, const int entry,
                                 char *out, const Py_ssize_t *strides, const int stream) {
    Py_ssize_t n = nwords - start, X = xyz[0], Y = xyz[1], Z = xyz[2];
    Py_ssize_t sx = strides[0], sy = strides[1], sz = strides[2];
    Py_ssize_t bx = bs[0], by = bs[1], bz = bs[2];
    Py_ssize_t gx = (X + bx - 1) / bx, gy = (Y + by - 1) / by, gz = (Z + bz - 1) / bz;
    const char *cw = w + 4 * start;
    for (Py_ssize_t kz = 0; kz < gz; kz++)
        for (Py_ssize_t ky = 0; ky < gy; ky++)
            for (Py_ssize_t kx = 0; kx < gx; kx++) {
                Py_ssize_t block = kx + gx * (ky + gy * kz);
                uint32_t h0 = word_at(cw, 2 * block), h1 = word_at(cw, 2 * block + 1);
                Py_ssize_t table = h0 & 0xFFFFFF, values = h1 & 0xFFFFFF;
                int bits = h0 >> 24;
                Py_ssize_t tsize = (n - table) / entry;
                Py_ssize_t ex = X - kx * bx < bx ? X - kx * bx : bx;
                Py_ssize_t ey = Y - ky * by < by ? Y - ky * by : by;
                Py_ssize_t ez = Z - kz * bz < bz ? Z - kz * bz : bz;
                Py_ssize_t bad = -1;
                switch (bits) { /* a loop per width: shifts and masks of constants */
                case 0: DECODE_BLOCK(0); break;
                case 1: DECODE_BLOCK(1); break;
                case 2: DECODE_BLOCK(2); break;
                case 4: DECODE_BLOCK(4); break;
                case 8: DECODE_BLOCK(8); break;
                case 16: DECODE_BLOCK(16); break;
                default: DECODE_BLOCK(32); break;
                }
                if (bad >= 0)
                    return bad;
            }
    return -1;
}

/* cseg_decode(words, start, (bx, by, bz), entry, out, stream=False) -> -1 or a bad block;
 * out: the (x, y, z) array decoded into, of any strides (a slice of a larger array, say);
 * stream: rows of whole aligned cache lines are written past the cache. */
PyObject *cseg_decode(PyObject *self, PyObject *args) {
    Py_buffer words, out = {0};
    PyObject *array;
    Py_ssize_t start, bs[3];
    int entry, stream = 0;
    if (!PyArg_ParseTuple(args, "y*n(nnn)iO|p", &words, &start, &bs[0], &bs[1], &bs[2], &entry,
                          &array, &stream))
        return NULL;
    if (PyObject_GetBuffer(array, &out, PyBUF_RECORDS) < 0) {
        PyBuffer_Release(&words);
        return NULL;
    }
    Py_ssize_t nwords = words.len / 4, result = -2;
    if (out.ndim == 3 && out.itemsize == 4 * entry && (entry == 1 || entry == 2) &&
        bs[0] > 0 && bs[1] > 0 && bs[2] > 0 && start >= 0) {
        const Py_ssize_t *xyz = out.shape;
        Py_ssize_t gx = (xyz[0] + bs[0] - 1) / bs[0], gy = (xyz[1] + bs[1] - 1) / bs[1],
                   gz = (xyz[2] + bs[2] - 1) / bs[2];
        if (start + 2 * gx * gy * gz <= nwords) {
            Py_BEGIN_ALLOW_THREADS
            result = entry == 1 ? decode_channel(words.buf, nwords, start, xyz, bs, 1,
                                                 out.buf, out.strides, stream)
                                : decode_channel(words.buf, nwords, start, xyz, bs, 2,
                                                 out.buf, out.strides, stream);
#if CAN_STREAM
            if (stream)
                _mm_sfence(); /* the streamed stores are seen before whatever follows */
#endif
            Py_END_ALLOW_THREADS
        }
    }
    PyBuffer_Release(&words);
    PyBuffer_Release(&out);
    if (result == -2) {
        PyErr_SetString(PyExc_ValueError, "cseg_decode: arguments that do not fit");
        return NULL;
    }
    return PyLong_FromSsize_t(result);
}

/* --- encoding ------------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t z) { /* splitmix64's finalizer */
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Sort a table in place: quicksort (median of three) down to runs of 16, then insertion
 * sort; inline comparisons, unlike qsort's calls through a pointer (tables are small). */
static void sort_u64(uint64_t *a, Py_ssize_t n) {
    while (n > 16) {
        uint64_t x = a[0], y = a[n / 2], z = a[n - 1];
        uint64_t pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        Py_ssize_t i = 0, j = n - 1;
        for (;;) {
            while (a[i] < pivot)
                i++;
            while (a[j] > pivot)
                j--;
            if (i >= j)
                break;
            uint64_t t = a[i];
            a[i++] = a[j];
            a[j--] = t;
        }
        /* [0, j] <= pivot <= [j + 1, n): recurse into the smaller side, loop on the other */
        if (j + 1 < n - j - 1) {
            sort_u64(a, j + 1);
            a += j + 1;
            n -= j + 1;
        } else {
            sort_u64(a + j + 1, n - j - 1);
            n = j + 1;
        }
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        uint64_t v = a[i];
        Py_ssize_t j = i;
        for (; j > 0 && a[j - 1] > v; j--)
            a[j] = a[j - 1];
        a[j] = v;
    }
}

static const int BITS_BY_LENGTH[33] = {0, 1, 2, 4, 4, 8, 8, 8, 8, 16, 16, 16, 16, 16, 16, 16, 16,
                                       32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32,
                                       32, 32};

static int bits_for(Py_ssize_t count) {
    uint64_t v = (uint64_t)(count - 1);
    int length = 0;
    while (v) {
        length++;
        v >>= 1;
    }
    return BITS_BY_LENGTH[length];
}

typedef struct {
    Py_ssize_t nb, bv, entry;
    Py_ssize_t *count, *tstart, *rep; /* per block: distinct values, table start, table owner */
    uint64_t *tables;                  /* every block's sorted table, back to back */
    uint32_t *index;                   /* every voxel's index into its table, x fastest */
} Encoded;

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))
#endif

/* Ask for the cache lines of the block at lo (clipped to the volume) ahead of its turn: a
 * chunk cut out of a large array has its rows pages apart, which the hardware's prefetcher
 * does not follow. One address per line along the axis of the smallest stride. */
static void prefetch_block(const char *src, const Py_ssize_t *shape, const Py_ssize_t *strides,
                           const Py_ssize_t *lo, const Py_ssize_t *bs) {
    int f = 0;
    for (int a = 1; a < 3; a++)
        if (llabs((long long)strides[a]) < llabs((long long)strides[f]))
            f = a;
    int p = f == 0 ? 1 : 0, q = f == 2 ? 1 : 2; /* the other two axes */
    Py_ssize_t sf = llabs((long long)strides[f]), step = sf >= 64 || sf == 0 ? 1 : 64 / sf;
    Py_ssize_t hi[3];
    for (int a = 0; a < 3; a++)
        hi[a] = lo[a] + bs[a] < shape[a] ? lo[a] + bs[a] : shape[a];
    for (Py_ssize_t i = lo[p]; i < hi[p]; i++)
        for (Py_ssize_t j = lo[q]; j < hi[q]; j++) {
            const char *row = src + i * strides[p] + j * strides[q];
            for (Py_ssize_t k = lo[f]; k < hi[f]; k += step)
                PREFETCH(row + k * strides[f]);
            PREFETCH(row + (hi[f] - 1) * strides[f]);
        }
}

/* Tables and indices of every block; 0, or -1 when out of memory. */
static int tabulate(const char *src, const Py_ssize_t *shape, const Py_ssize_t *strides,
                    int itemsize, const Py_ssize_t *bs, Encoded *e) {
    Py_ssize_t bx = bs[0], by = bs[1], bz = bs[2], bv = e->bv;
    const Py_ssize_t grid[3] = {(shape[0] + bx - 1) / bx, (shape[1] + by - 1) / by,
                                (shape[2] + bz - 1) / bz};
    Py_ssize_t slots = 1;
    while (slots < 2 * bv)
        slots <<= 1;
    uint64_t *values = malloc(bv * sizeof(uint64_t)), *keys = malloc(slots * sizeof(uint64_t));
    /* found: each slot's rank (empty: all ones); slot: each voxel's slot; taken: the
     * slots of a block's distinct values */
    uint32_t *found = malloc(slots * sizeof(uint32_t)), *slot = malloc(bv * sizeof(uint32_t)),
             *taken = malloc(bv * sizeof(uint32_t));
    Py_ssize_t *offsets = malloc((bx + by + bz) * sizeof(Py_ssize_t));
    if (!values || !keys || !found || !slot || !taken || !offsets) {
        free(values), free(keys), free(found), free(slot), free(taken), free(offsets);
        return -1;
    }
    memset(found, 0xFF, slots * sizeof(uint32_t));
    /* byte offsets of a block's voxels along each axis; the axis read innermost (f) */
    Py_ssize_t *off[3] = {offsets, offsets + bx, offsets + bx + by};
    const Py_ssize_t lstride[3] = {1, bx, bx * by};
    int f = 0;
    for (int a = 1; a < 3; a++)
        if (llabs((long long)strides[a]) < llabs((long long)strides[f]))
            f = a;
    const int p = f == 2 ? 1 : 2, q = f == 0 ? 1 : 0; /* the others, outer and middle */
    Py_ssize_t used = 0;
    /* Blocks are tabulated with the grid axis of the smallest stride fastest (their tables
     * and indices are kept by block number, so any order will do): the next block then
     * continues the rows of this one, in pages already mapped, as the prefetcher expects;
     * in block-number order (x fastest), a chunk of a C-order volume jumps a plane of it
     * from block to block (46% of the time went in waiting for those reads). */
    for (Py_ssize_t t = 0; t < e->nb; t++) {
        Py_ssize_t lo[3], next[3], r = t + 1;
        lo[f] = t % grid[f] * bs[f];
        lo[q] = t / grid[f] % grid[q] * bs[q];
        lo[p] = t / (grid[f] * grid[q]) * bs[p];
        Py_ssize_t b = lo[0] / bx + grid[0] * (lo[1] / by + grid[1] * (lo[2] / bz));
        if (r < e->nb) {
            next[f] = r % grid[f] * bs[f];
            next[q] = r / grid[f] % grid[q] * bs[q];
            next[p] = r / (grid[f] * grid[q]) * bs[p];
            prefetch_block(src, shape, strides, next, bs);
        }
        /* the block's voxels (x fastest in values), read with the axis of the smallest
         * stride innermost: one cache line after the other (in a chunk cut out of a C-order
         * volume, rows along x are pages apart and share a cache set) */
        for (int a = 0; a < 3; a++)
            for (Py_ssize_t i = 0; i < bs[a]; i++) { /* past the edge: the nearest voxel */
                Py_ssize_t c = lo[a] + i < shape[a] ? lo[a] + i : shape[a] - 1;
                off[a][i] = c * strides[a];
            }
        for (Py_ssize_t i = 0; i < bs[p]; i++)
            for (Py_ssize_t j = 0; j < bs[q]; j++) {
                const char *row = src + off[p][i] + off[q][j];
                uint64_t *into = values + i * lstride[p] + j * lstride[q];
                const Py_ssize_t *of = off[f], ls = lstride[f], n = bs[f];
                if (itemsize == 4)
                    for (Py_ssize_t k = 0; k < n; k++) {
                        uint32_t v;
                        memcpy(&v, row + of[k], 4);
                        into[k * ls] = v;
                    }
                else
                    for (Py_ssize_t k = 0; k < n; k++)
                        memcpy(&into[k * ls], row + of[k], 8);
            }
        uint64_t *table = e->tables + used;
        Py_ssize_t k = 0;
        int uniform = 1;
        for (Py_ssize_t i = 1; i < bv && uniform; i++)
            uniform = values[i] == values[0];
        if (uniform) {
            table[k++] = values[0];
            memset(e->index + b * bv, 0, bv * sizeof(uint32_t));
        } else { /* distinct values by hashing, sorted, then each voxel's rank; a voxel
                  * equal to the one before it (runs along x) skips the hashing */
            /* found[] is all empty between blocks: only the slots a block took are
             * emptied after it (k of them), not the whole table (4 KiB a block) */
            for (Py_ssize_t i = 0; i < bv; i++) {
                if (i && values[i] == values[i - 1])
                    continue;
                Py_ssize_t s = mix64(values[i]) & (slots - 1);
                while (found[s] != 0xFFFFFFFFu && keys[s] != values[i])
                    s = (s + 1) & (slots - 1);
                if (found[s] == 0xFFFFFFFFu) {
                    keys[s] = values[i];
                    found[s] = 0;
                    taken[k] = (uint32_t)s;
                    table[k++] = values[i];
                }
                slot[i] = (uint32_t)s;
            }
            sort_u64(table, k);
            for (Py_ssize_t i = 0; i < k; i++) {
                Py_ssize_t s = mix64(table[i]) & (slots - 1);
                while (keys[s] != table[i])
                    s = (s + 1) & (slots - 1);
                found[s] = (uint32_t)i;
            }
            uint32_t *index = e->index + b * bv;
            for (Py_ssize_t i = 0; i < bv; i++)
                index[i] = i && values[i] == values[i - 1] ? index[i - 1] : found[slot[i]];
            for (Py_ssize_t i = 0; i < k; i++)
                found[taken[i]] = 0xFFFFFFFFu;
        }
        e->count[b] = k;
        e->tstart[b] = used;
        used += k;
    }
    free(values), free(keys), free(found), free(slot), free(taken), free(offsets);
    return 0;
}

/* Each block's first block with an equal table (itself if none): equal tables stored once. */
static int share_tables(Encoded *e) {
    Py_ssize_t slots = 1;
    while (slots < 2 * e->nb)
        slots <<= 1;
    Py_ssize_t *first = malloc(slots * sizeof(Py_ssize_t));
    if (!first)
        return -1;
    memset(first, 0xFF, slots * sizeof(Py_ssize_t));
    for (Py_ssize_t b = 0; b < e->nb; b++) {
        const uint64_t *t = e->tables + e->tstart[b];
        Py_ssize_t k = e->count[b];
        uint64_t h = mix64((uint64_t)k);
        for (Py_ssize_t i = 0; i < k; i++)
            h = mix64(h ^ t[i]);
        Py_ssize_t s = h & (slots - 1);
        e->rep[b] = b;
        for (; first[s] >= 0; s = (s + 1) & (slots - 1)) {
            Py_ssize_t o = first[s];
            if (e->count[o] == k && !memcmp(e->tables + e->tstart[o], t, k * sizeof(uint64_t))) {
                e->rep[b] = o;
                break;
            }
        }
        if (e->rep[b] == b)
            first[s] = b;
    }
    free(first);
    return 0;
}

/* The channel's words (headers, packed indices, tables) into *total; 1 when its offsets do
 * not fit in 24 bits. */
static int measure(const Encoded *e, Py_ssize_t *total) {
    Py_ssize_t nb = e->nb, bv = e->bv, tend = 2 * nb;
    for (Py_ssize_t b = 0; b < nb; b++) {
        tend += (bv * bits_for(e->count[b]) + 31) / 32;
        if (e->rep[b] == b)
            tend += e->count[b] * e->entry;
    }
    *total = tend;
    return tend >= (1 << 24);
}

/* A block's indices of B bits (B divides 32) packed into its words from w[v] on, LSB first,
 * each word or-ed whole from the indices it holds. */
#define PACK(B)                                                                            \
    for (Py_ssize_t i = 0, j = 0; i < bv; j++) {                                           \
        uint32_t word = 0;                                                                 \
        for (int t = 0; t < 32 / (B) && i < bv; t++, i++)                                  \
            word |= idx[i] << (t * (B) & 31);                                              \
        w[v + j] |= word;                                                                  \
    }

/* Write the channel's words (as many as measure() says) at out; 0, or -1 when out of
 * memory. */
static int lay_out(const Encoded *e, uint32_t *w) {
    Py_ssize_t nb = e->nb, bv = e->bv, vend = 2 * nb;
    for (Py_ssize_t b = 0; b < nb; b++)
        vend += (bv * bits_for(e->count[b]) + 31) / 32;
    /* the packed indices are or-ed in; headers and tables are written whole */
    memset(w + 2 * nb, 0, (vend - 2 * nb) * sizeof(uint32_t));
    Py_ssize_t *toff = malloc(nb * sizeof(Py_ssize_t));
    if (!toff)
        return -1;
    Py_ssize_t v = 2 * nb, t = vend;
    for (Py_ssize_t b = 0; b < nb; b++) {
        if (e->rep[b] == b) { /* the owner's table, in place */
            const uint64_t *table = e->tables + e->tstart[b];
            toff[b] = t;
            for (Py_ssize_t i = 0; i < e->count[b]; i++) {
                w[t++] = (uint32_t)table[i];
                if (e->entry == 2)
                    w[t++] = (uint32_t)(table[i] >> 32);
            }
        } else {
            toff[b] = toff[e->rep[b]];
        }
        int bits = bits_for(e->count[b]);
        w[2 * b] = (uint32_t)toff[b] | (uint32_t)bits << 24;
        w[2 * b + 1] = (uint32_t)v;
        if (bits) {
            const uint32_t *idx = e->index + b * bv;
            switch (bits) { /* a loop per width: shifts of constants */
            case 1: PACK(1); break;
            case 2: PACK(2); break;
            case 4: PACK(4); break;
            case 8: PACK(8); break;
            case 16: PACK(16); break;
            default: PACK(32); break;
            }
            v += (bv * bits + 31) / 32;
        }
    }
    free(toff);
    return 0;
}

/* cseg_encode(array (x, y, z) of uint32 or uint64, (bx, by, bz), head) -> head then the
 * channel's words (bytes: head of whole words, one chunk's channel offset say), or None when
 * its offsets overflow 24 bits */
PyObject *cseg_encode(PyObject *self, PyObject *args) {
    PyObject *array;
    Py_ssize_t bs[3];
    Py_buffer head;
    if (!PyArg_ParseTuple(args, "O(nnn)y*", &array, &bs[0], &bs[1], &bs[2], &head))
        return NULL;
    Py_ssize_t lead = head.len / 4;
    Py_buffer view;
    if (PyObject_GetBuffer(array, &view, PyBUF_RECORDS_RO) < 0) {
        PyBuffer_Release(&head);
        return NULL;
    }
    if (view.ndim != 3 || (view.itemsize != 4 && view.itemsize != 8) || bs[0] < 1 ||
        bs[1] < 1 || bs[2] < 1 || head.len % 4 || bs[0] * bs[1] * bs[2] > (1 << 24)) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&head);
        PyErr_SetString(PyExc_ValueError, "cseg_encode: arguments that do not fit");
        return NULL;
    }
    Encoded e = {0};
    const Py_ssize_t *shape = view.shape;
    e.bv = bs[0] * bs[1] * bs[2];
    e.entry = view.itemsize / 4;
    e.nb = ((shape[0] + bs[0] - 1) / bs[0]) * ((shape[1] + bs[1] - 1) / bs[1]) *
           ((shape[2] + bs[2] - 1) / bs[2]);
    if (shape[0] == 0 || shape[1] == 0 || shape[2] == 0)
        e.nb = 0;
    int failed = 0, overflow = 0;
    Py_ssize_t total = 0;
    Py_BEGIN_ALLOW_THREADS
    e.count = malloc((e.nb + 1) * sizeof(Py_ssize_t));
    e.tstart = malloc((e.nb + 1) * sizeof(Py_ssize_t));
    e.rep = malloc((e.nb + 1) * sizeof(Py_ssize_t));
    e.tables = malloc((e.nb * e.bv + 1) * sizeof(uint64_t));
    e.index = malloc((e.nb * e.bv + 1) * sizeof(uint32_t));
    failed = !e.count || !e.tstart || !e.rep || !e.tables || !e.index ||
             tabulate(view.buf, shape, view.strides, (int)view.itemsize, bs, &e) < 0 ||
             share_tables(&e) < 0;
    if (!failed)
        overflow = measure(&e, &total);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *out = NULL;
    if (!failed && !overflow) { /* laid out straight into the bytes returned */
        out = PyBytes_FromStringAndSize(NULL, 4 * (lead + total));
        if (out != NULL) {
            uint32_t *words = (uint32_t *)PyBytes_AS_STRING(out);
            memcpy(words, head.buf, 4 * lead);
            Py_BEGIN_ALLOW_THREADS
            failed = lay_out(&e, words + lead) < 0;
            Py_END_ALLOW_THREADS
        }
    }
    free(e.count), free(e.tstart), free(e.rep), free(e.tables), free(e.index);
    PyBuffer_Release(&head);
    if (failed) {
        Py_XDECREF(out);
        return PyErr_NoMemory();
    }
    if (overflow)
        Py_RETURN_NONE;
    return out;
}
