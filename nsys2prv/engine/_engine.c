/*
 * nsys2prv's engine: records in, sorted Paraver text out.
 *
 * Three objects, used by nsys2prv/engine/__init__.py (read that first):
 *
 *   RecordStore   per report: takes record columns, keeps them in a bounded buffer, spills
 *                 runs sorted by time (stable) to compact binary files ("run files").
 *   IntervalStore per report: takes state intervals, sorts them by (row, start, ord) out of
 *                 core, and tiles every row into states that go straight into a RecordStore.
 *   Merger        merge stage: k-way merges the run files of every report (and in-memory
 *                 sources already in trace-wide form), maps them to the trace (clock shift,
 *                 rows, renumbered values), orders each time by the merge key and formats the
 *                 .prv lines, block by block, or puts the records straight into a PrvScanner's
 *                 columns as scanning those lines would (scan, for the analysis).
 *
 * Python objects are only touched with the GIL held; all loops over records run without it.
 * Null integers are INT64_MIN (the Python side fills nulls with it).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_scan.h"

#define NUL INT64_MIN
#define KIND_STATE 1
#define KIND_EVENT 2
#define KIND_COMM 3
#define SRC_STATE 0
#define SRC_LAUNCH_OFFSET 64
#define ROW_FAMILY 0
#define VALUE_KEY (((int64_t)1) << 48)
#define RUN_MAGIC "N2PRUN3\n"

/* ------------------------------------------------------------------ small buffers -- */

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->n + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + extra) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static void buf_free(Buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static inline uint64_t zz(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
/* a - b modulo 2^64 (defined for any two types; adding it back gives a again) */
static inline int64_t wrap_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static inline int64_t unzz(uint64_t u) { return (int64_t)(u >> 1) ^ -(int64_t)(u & 1); }

static inline char *put_varint(char *o, uint64_t v) {
    while (v >= 0x80) {
        *o++ = (char)(v | 0x80);
        v >>= 7;
    }
    *o++ = (char)v;
    return o;
}

/* Run files are little-endian on every host (docs/intermediate.md): the block header's two
 * u32 are written and read byte by byte, not as host integers. */
static inline void put_le32(unsigned char *o, uint32_t v) {
    for (int i = 0; i < 4; i++) o[i] = (unsigned char)(v >> (8 * i));
}

static inline uint32_t get_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t get_varint(const unsigned char **pp) {
    const unsigned char *p = *pp;
    uint64_t v = 0;
    int shift = 0;
    while (*p & 0x80) {
        v |= (uint64_t)(*p++ & 0x7f) << shift;
        shift += 7;
    }
    v |= (uint64_t)(*p++) << shift;
    *pp = p;
    return v;
}

/* ------------------------------------------------------------------ stable radix sort -- */

/* Sorts idx[0..n) stably by key[idx[i]] (unsigned). tmp is scratch of n entries. */
static void radix_sort(uint32_t *idx, uint32_t *tmp, const uint64_t *key, size_t n) {
    if (n < 2) return;
    uint64_t all_or = 0;
    for (size_t i = 0; i < n; i++) all_or |= key[i];
    uint32_t *src = idx, *dst = tmp;
    for (int shift = 0; shift < 64; shift += 11) {
        if (((all_or >> shift) & 0x7ff) == 0) continue;
        size_t count[2048];
        memset(count, 0, sizeof count);
        for (size_t i = 0; i < n; i++) count[(key[src[i]] >> shift) & 0x7ff]++;
        size_t sum = 0;
        for (int b = 0; b < 2048; b++) {
            size_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) dst[count[(key[src[i]] >> shift) & 0x7ff]++] = src[i];
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != idx) memcpy(idx, src, n * sizeof *idx);
}

/* Sort scratch kept by a store between spills: freeing and reallocating tens of MB per run
 * costs a page fault per 4 KB each time. */
typedef struct {
    uint32_t *idx, *tmp;
    uint64_t *key;
    size_t cap;
} Scratch;

static int scratch_reserve(Scratch *s, size_t n) {
    if (n <= s->cap) return 0;
    free(s->idx); free(s->tmp); free(s->key);
    s->idx = malloc(n * sizeof *s->idx);
    s->tmp = malloc(n * sizeof *s->tmp);
    s->key = malloc(n * sizeof *s->key);
    s->cap = n;
    if (!s->idx || !s->tmp || !s->key) { s->cap = 0; return -1; }
    return 0;
}

static void scratch_free(Scratch *s) {
    free(s->idx); free(s->tmp); free(s->key);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------------ buffer helpers -- */

typedef struct {
    Py_buffer view;
    int held;
} Arr;

static int arr_get(PyObject *obj, Arr *a, Py_ssize_t itemsize, const char *what) {
    a->held = 0;
    if (PyObject_GetBuffer(obj, &a->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    a->held = 1;
    if (a->view.itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: expected items of %zd bytes, got %zd", what, itemsize,
                     a->view.itemsize);
        return -1;
    }
    return 0;
}

static void arr_release(Arr *a) {
    if (a->held) PyBuffer_Release(&a->view);
    a->held = 0;
}

static Py_ssize_t arr_len(Arr *a) { return a->view.len / a->view.itemsize; }

static const char DIGIT_PAIRS[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* decimal text of v (two digits per step) */
static inline char *fmt_i64(char *o, int64_t v) {
    uint64_t u;
    if (v < 0) {
        *o++ = '-';
        u = (uint64_t)0 - (uint64_t)v;
    } else u = (uint64_t)v;
    if (u < 10) {
        *o++ = (char)('0' + u);
        return o;
    }
    char tmp[24];
    char *t = tmp + sizeof tmp;
    while (u >= 100) {
        unsigned r = (unsigned)(u % 100);
        u /= 100;
        t -= 2;
        memcpy(t, DIGIT_PAIRS + 2 * r, 2);
    }
    if (u >= 10) {
        t -= 2;
        memcpy(t, DIGIT_PAIRS + 2 * u, 2);
    } else *--t = (char)('0' + u);
    size_t n = (size_t)(tmp + sizeof tmp - t);
    memcpy(o, t, n);
    return o + n;
}

/* ================================================================== RecordStore ====== */

typedef struct {
    int64_t time, sub, ord;
    int64_t f[6]; /* a..f */
    int32_t row;
    int8_t kind, phase, src, pad;
    uint32_t tlen;
    uint32_t plen;  /* bytes of the record's (type, value) pairs, binary, after its text */
    uint64_t toff;
} Rec;

typedef struct {
    PyObject_HEAD
    Rec *recs;
    size_t n, cap;
    Buf text;
    size_t budget;        /* bytes of records + text before a run is spilled */
    uint32_t block_records;
    char *prefix;         /* run files are <prefix>-NNNNN.run */
    PyObject *runs;       /* list of (path, [(first time, offset), ...], records) */
    long long total;
    Scratch scratch;
    Buf block;
} RecordStore;

static void RecordStore_dealloc(RecordStore *self) {
    free(self->recs);
    scratch_free(&self->scratch);
    buf_free(&self->block);
    buf_free(&self->text);
    free(self->prefix);
    Py_XDECREF(self->runs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int RecordStore_init(RecordStore *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"prefix", "budget", "block_records", NULL};
    const char *prefix;
    Py_ssize_t budget = 256 << 20, block = 8192;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|nn", kwlist, &prefix, &budget, &block))
        return -1;
    self->prefix = strdup(prefix);
    self->budget = budget < 4096 ? 4096 : (size_t)budget;
    self->block_records = block < 1 ? 1 : (uint32_t)block;
    self->runs = PyList_New(0);
    if (!self->prefix || !self->runs) return -1;
    return 0;
}

/* Encoding of one record in a run (times are deltas inside a block, so runs are small):
 *   u8 head = kind | phase<<2 | has_text<<4 | submode<<5 | has_pairs<<7
 *   varint dt, zz row, u8 src, [sub], zz ord, u8 nullmask(a..f), a..f present, [text],
 *   [varint bytes, pairs]
 * pairs: per (type, value) pair, zz(type - previous type of the record) and zz(value), as
 * the store made them; the merge writes them ":type:value" after the text (a third of the
 * bytes of the text they stand for: fewer bytes written and read back).
 * submode 0: sub = 0; 1: sub = -(time + v); 2: sub = v - time; 3: zz(sub).
 * States and communications store a (and c, d of communications) relative to time. */
static char *encode_rec(char *o, const Rec *r, int64_t prev_time, const char *text) {
    int submode;
    uint64_t subv = 0;
    if (r->sub == 0) submode = 0;
    else if (r->sub <= -r->time && r->time >= 0) { submode = 1; subv = (uint64_t)(-r->sub - r->time); }
    else if (r->sub < 0 && r->time + r->sub >= 0) { submode = 2; subv = (uint64_t)(r->time + r->sub); }
    else { submode = 3; subv = zz(r->sub); }
    *o++ = (char)(r->kind | (r->phase << 2) | ((r->tlen ? 1 : 0) << 4) | (submode << 5) |
                  ((r->plen ? 1 : 0) << 7));
    o = put_varint(o, (uint64_t)(r->time - prev_time));
    o = put_varint(o, zz(r->row));
    *o++ = (char)r->src;
    if (submode) o = put_varint(o, subv);
    o = put_varint(o, zz(r->ord));
    unsigned char mask = 0;
    for (int k = 0; k < 6; k++)
        if (r->f[k] == NUL) mask |= (unsigned char)(1 << k);
    *o++ = (char)mask;
    int rel = r->kind != KIND_EVENT;
    for (int k = 0; k < 6; k++) {
        if (mask & (1 << k)) continue;
        int64_t v = r->f[k];
        if (rel && (k == 0 || (r->kind == KIND_COMM && (k == 2 || k == 3)))) v -= r->time;
        o = put_varint(o, zz(v));
    }
    if (r->tlen) {
        o = put_varint(o, r->tlen);
        memcpy(o, text, r->tlen);
        o += r->tlen;
    }
    if (r->plen) {
        o = put_varint(o, r->plen);
        memcpy(o, text + r->tlen, r->plen);
        o += r->plen;
    }
    return o;
}

/* worst case bytes of an encoded record with tlen bytes of text and pairs */
#define ENC_MAX(tlen) (1 + 10 + 10 + 1 + 10 + 10 + 1 + 60 + 10 + 10 + (size_t)(tlen))

typedef struct {
    int64_t time, sub, ord, f[6];
    int64_t row;
    int kind, phase, src;
    const char *text;
    uint32_t tlen;
    const unsigned char *pairs;
    uint32_t plen;
} DRec;

/* Decodes the record at p; `readable` is where the bytes that may be read end. The fields
 * before the text are within ENC_MAX(0) bytes (the caller's slack); the pairs' length comes
 * after the text: when it could lie past `readable` it is not read, and the pointer returned
 * lies past it, so the caller reads more and decodes again. */
static const unsigned char *decode_rec(const unsigned char *p, DRec *r, int64_t prev_time,
                                       const unsigned char *readable) {
    unsigned head = *p++;
    r->kind = head & 3;
    r->phase = (head >> 2) & 3;
    int has_text = (head >> 4) & 1;
    int submode = (head >> 5) & 3;
    r->time = prev_time + (int64_t)get_varint(&p);
    r->row = unzz(get_varint(&p));
    r->src = (int8_t)*p++;
    if (submode == 0) r->sub = 0;
    else {
        uint64_t v = get_varint(&p);
        if (submode == 1) r->sub = -(r->time + (int64_t)v);
        else if (submode == 2) r->sub = (int64_t)v - r->time;
        else r->sub = unzz(v);
    }
    r->ord = unzz(get_varint(&p));
    unsigned mask = *p++;
    int rel = r->kind != KIND_EVENT;
    for (int k = 0; k < 6; k++) {
        if (mask & (1u << k)) { r->f[k] = NUL; continue; }
        int64_t v = unzz(get_varint(&p));
        if (rel && (k == 0 || (r->kind == KIND_COMM && (k == 2 || k == 3)))) v += r->time;
        r->f[k] = v;
    }
    if (has_text) {
        r->tlen = (uint32_t)get_varint(&p);
        r->text = (const char *)p;
        p += r->tlen;
    } else {
        r->tlen = 0;
        r->text = NULL;
    }
    if (head >> 7) {
        if (p + 10 > readable) return p + 10;
        r->plen = (uint32_t)get_varint(&p);
        r->pairs = p;
        p += r->plen;
    } else {
        r->plen = 0;
        r->pairs = NULL;
    }
    return p;
}

static int write_all(FILE *fh, const void *p, size_t n) { return fwrite(p, 1, n, fh) == n ? 0 : -1; }

/* Sort the buffered records by time (stable) and write them as one run file. Called without
 * the GIL; returns 0, or -1 with errno set. The block index goes to *index (pairs). */
static int store_spill_nogil(RecordStore *self, const char *path, int64_t **index, size_t *nindex) {
    size_t n = self->n;
    int64_t *ix = malloc(((n + self->block_records - 1) / self->block_records + 1) * 2 * sizeof *ix);
    FILE *fh = NULL;
    int rc = -1;
    if (scratch_reserve(&self->scratch, n) < 0 || !ix) { errno = ENOMEM; goto done; }
    uint32_t *idx = self->scratch.idx, *tmp = self->scratch.tmp;
    uint64_t *key = self->scratch.key;
#define block (self->block)
    int64_t tmin = n ? self->recs[0].time : 0;
    for (size_t i = 0; i < n; i++)
        if (self->recs[i].time < tmin) tmin = self->recs[i].time;
    for (size_t i = 0; i < n; i++) {
        idx[i] = (uint32_t)i;
        key[i] = (uint64_t)(self->recs[i].time - tmin);
    }
    radix_sort(idx, tmp, key, n);
    fh = fopen(path, "wb");
    if (!fh) goto done;
    setvbuf(fh, NULL, _IOFBF, 1 << 20);
    if (write_all(fh, RUN_MAGIC, 8) < 0) goto done;
    long long offset = 8;
    size_t nb = 0;
    for (size_t lo = 0; lo < n; lo += self->block_records) {
        size_t hi = lo + self->block_records < n ? lo + self->block_records : n;
        block.n = 0;
        int64_t prev = 0;
        for (size_t i = lo; i < hi; i++) {
            const Rec *r = &self->recs[idx[i]];
            if (buf_reserve(&block, ENC_MAX(r->tlen + r->plen)) < 0) { errno = ENOMEM; goto done; }
            char *o = encode_rec(block.p + block.n, r, prev, self->text.p + r->toff);
            block.n = (size_t)(o - block.p);
            prev = r->time;
        }
        unsigned char head[8];  /* records in the block, bytes of the block */
        put_le32(head, (uint32_t)(hi - lo));
        put_le32(head + 4, (uint32_t)block.n);
        if (write_all(fh, head, sizeof head) < 0 || write_all(fh, block.p, block.n) < 0) goto done;
        ix[2 * nb] = self->recs[idx[lo]].time;
        ix[2 * nb + 1] = offset;
        nb++;
        offset += (long long)sizeof head + (long long)block.n;
    }
    if (fclose(fh) != 0) { fh = NULL; goto done; }
    fh = NULL;
    *index = ix;
    *nindex = nb;
    ix = NULL;
    rc = 0;
done:
    if (fh) {
        int e = errno;
        fclose(fh);
        errno = e;
    }
#undef block
    free(ix);
    return rc;
}

static int store_spill(RecordStore *self) {
    if (self->n == 0) return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s-%05zd.run", self->prefix, PyList_GET_SIZE(self->runs));
    int64_t *ix = NULL;
    size_t nix = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = store_spill_nogil(self, path, &ix, &nix);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        return -1;
    }
    PyObject *index = PyList_New((Py_ssize_t)nix);
    if (!index) { free(ix); return -1; }
    for (size_t i = 0; i < nix; i++) {
        PyObject *pair = Py_BuildValue("(LL)", (long long)ix[2 * i], (long long)ix[2 * i + 1]);
        if (!pair) { free(ix); Py_DECREF(index); return -1; }
        PyList_SET_ITEM(index, (Py_ssize_t)i, pair);
    }
    free(ix);
    PyObject *entry = Py_BuildValue("(sNn)", path, index, (Py_ssize_t)self->n);
    if (!entry || PyList_Append(self->runs, entry) < 0) { Py_XDECREF(entry); return -1; }
    Py_DECREF(entry);
    self->n = 0;
    self->text.n = 0;
    return 0;
}

static size_t store_bytes(RecordStore *self) { return self->n * sizeof(Rec) + self->text.n; }

static int store_reserve(RecordStore *self, size_t extra) {
    if (self->n + extra <= self->cap) return 0;
    size_t cap = self->cap ? self->cap : self->budget / sizeof(Rec) + 1024;
    while (cap < self->n + extra) cap *= 2;
    Rec *p = realloc(self->recs, cap * sizeof *p);
    if (!p) { PyErr_NoMemory(); return -1; }
    self->recs = p;
    self->cap = cap;
    return 0;
}

#define MAX_PAIRS 64

/* add(time, row, kind, phase, sub, src, ord, a, b, c, d, e, f, text_offsets, text_data,
 *     pair_types, pair_values, list_offsets, list_types, list_values)
 * int64 arrays but row (int32) and kind/phase/src (int8); text_offsets int64 (n+1) or None.
 * pair_types: a sequence of event types, pair_values: one int64 column per type; each
 * non-null value becomes a (type, value) pair of the record, written ":type:value" after its
 * text by the merge (pairs_text; never built as strings in polars). list_offsets (int64, n+1),
 * list_types, list_values (int64): record i's own further pairs, entries
 * list_offsets[i]..list_offsets[i+1] (a sample's callers: as many as its stack has),
 * appended after the numeric pairs; None: none. */
static PyObject *RecordStore_add(RecordStore *self, PyObject *args) {
    PyObject *o[15], *ptypes = Py_None, *pvals = Py_None;
    PyObject *loffs_o = Py_None, *ltypes_o = Py_None, *lvals_o = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOO|OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4],
                          &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13],
                          &o[14], &ptypes, &pvals, &loffs_o, &ltypes_o, &lvals_o))
        return NULL;
    Arr la[3];
    memset(la, 0, sizeof la);
    const int64_t *loffs = NULL, *ltypes = NULL, *lvals = NULL;
    static const Py_ssize_t sizes[13] = {8, 4, 1, 1, 8, 1, 8, 8, 8, 8, 8, 8, 8};
    Arr a[15];
    memset(a, 0, sizeof a);
    Arr pa[MAX_PAIRS];
    memset(pa, 0, sizeof pa);
    int64_t ptype[MAX_PAIRS];
    const int64_t *pv[MAX_PAIRS];
    int npairs = 0;
    PyObject *result = NULL;
    Py_ssize_t n = -1;
    for (int k = 0; k < 13; k++) {
        if (arr_get(o[k], &a[k], sizes[k], "record column") < 0) goto done;
        if (n < 0) n = arr_len(&a[k]);
        else if (arr_len(&a[k]) != n) {
            PyErr_SetString(PyExc_ValueError, "record columns of different lengths");
            goto done;
        }
    }
    int has_text = o[13] != Py_None;
    if (has_text) {
        if (arr_get(o[13], &a[13], 8, "text offsets") < 0 || arr_get(o[14], &a[14], 1, "text") < 0)
            goto done;
        if (arr_len(&a[13]) != n + 1) {
            PyErr_SetString(PyExc_ValueError, "text offsets must have n + 1 entries");
            goto done;
        }
    }
    if (ptypes != Py_None) {
        PyObject *ts = PySequence_Fast(ptypes, "pair types"), *vs = PySequence_Fast(pvals, "pair values");
        if (!ts || !vs) { Py_XDECREF(ts); Py_XDECREF(vs); goto done; }
        Py_ssize_t k = PySequence_Fast_GET_SIZE(ts);
        if (k != PySequence_Fast_GET_SIZE(vs) || k > MAX_PAIRS) {
            Py_DECREF(ts); Py_DECREF(vs);
            PyErr_SetString(PyExc_ValueError, "pair types and values differ (or too many)");
            goto done;
        }
        for (Py_ssize_t i = 0; i < k; i++) {
            ptype[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(ts, i));
            if (PyErr_Occurred() || arr_get(PySequence_Fast_GET_ITEM(vs, i), &pa[i], 8, "pair values") < 0 ||
                arr_len(&pa[i]) != n) {
                Py_DECREF(ts); Py_DECREF(vs);
                npairs = (int)i + 1;
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "pair column length");
                goto done;
            }
            pv[i] = pa[i].view.buf;
            npairs = (int)i + 1;
        }
        Py_DECREF(ts);
        Py_DECREF(vs);
    }
    if (loffs_o != Py_None) {
        if (arr_get(loffs_o, &la[0], 8, "list offsets") < 0 ||
            arr_get(ltypes_o, &la[1], 8, "list types") < 0 ||
            arr_get(lvals_o, &la[2], 8, "list values") < 0)
            goto done;
        loffs = la[0].view.buf;
        ltypes = la[1].view.buf;
        lvals = la[2].view.buf;
        Py_ssize_t m = arr_len(&la[1]);
        if (arr_len(&la[0]) != n + 1 || arr_len(&la[2]) != m || loffs[0] != 0 || loffs[n] != m) {
            PyErr_SetString(PyExc_ValueError, "list pairs: n + 1 offsets from 0 to the entries");
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            if (loffs[i + 1] < loffs[i]) {
                PyErr_SetString(PyExc_ValueError, "list pairs: offsets must not decrease");
                goto done;
            }
    }
    const int64_t *time = a[0].view.buf, *sub = a[4].view.buf, *ord = a[6].view.buf;
    const int32_t *row = a[1].view.buf;
    const int8_t *kind = a[2].view.buf, *phase = a[3].view.buf, *src = a[5].view.buf;
    const int64_t *fv[6];
    for (int k = 0; k < 6; k++) fv[k] = a[7 + k].view.buf;
    const int64_t *toffs = has_text ? a[13].view.buf : NULL;
    const char *tdata = has_text ? a[14].view.buf : NULL;
    Py_ssize_t done_n = 0;
    while (done_n < n) {
        /* fill up to the budget, then spill */
        size_t room = self->budget > store_bytes(self) ? self->budget - store_bytes(self) : 0;
        Py_ssize_t take = (Py_ssize_t)(room / (sizeof(Rec) + 16));
        if (take < 16) take = 16;
        if (take > n - done_n) take = n - done_n;
        if (store_reserve(self, (size_t)take) < 0) goto done;
        size_t tbytes = has_text ? (size_t)(toffs[done_n + take] - toffs[done_n]) : 0;
        /* a pair: two varints of at most 10 bytes */
        tbytes += (size_t)take * (size_t)npairs * 20;
        if (loffs) tbytes += (size_t)(loffs[done_n + take] - loffs[done_n]) * 20;
        if (buf_reserve(&self->text, tbytes) < 0) { PyErr_NoMemory(); goto done; }
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = done_n; i < done_n + take; i++) {
            Rec *r = &self->recs[self->n++];
            r->time = time[i];
            r->sub = sub[i];
            r->ord = ord[i];
            for (int k = 0; k < 6; k++) r->f[k] = fv[k][i];
            r->row = row[i];
            r->kind = kind[i];
            r->phase = phase[i];
            r->src = src[i];
            r->pad = 0;
            r->toff = self->text.n;
            char *t0 = self->text.p + self->text.n, *t = t0;
            if (has_text) {
                int64_t lo = toffs[i], hi = toffs[i + 1];
                memcpy(t, tdata + lo, (size_t)(hi - lo));
                t += hi - lo;
            }
            r->tlen = (uint32_t)(t - t0);
            /* the pairs stay numbers until the merge writes them (pairs_text) */
            int64_t prev_type = 0;
            for (int k = 0; k < npairs; k++) {
                if (pv[k][i] == NUL) continue;
                t = put_varint(t, zz(wrap_sub(ptype[k], prev_type)));
                t = put_varint(t, zz(pv[k][i]));
                prev_type = ptype[k];
            }
            if (loffs)
                for (int64_t j = loffs[i]; j < loffs[i + 1]; j++) {
                    t = put_varint(t, zz(wrap_sub(ltypes[j], prev_type)));
                    t = put_varint(t, zz(lvals[j]));
                    prev_type = ltypes[j];
                }
            r->plen = (uint32_t)(t - t0) - r->tlen;
            self->text.n += r->tlen + r->plen;
            if (!r->tlen && !r->plen) r->toff = 0;
        }
        Py_END_ALLOW_THREADS
        done_n += take;
        self->total += take;
        if (store_bytes(self) >= self->budget && store_spill(self) < 0) goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (int k = 0; k < 15; k++) arr_release(&a[k]);
    for (int k = 0; k < npairs; k++) arr_release(&pa[k]);
    for (int k = 0; k < 3; k++) arr_release(&la[k]);
    return result;
}

/* Append one state record (used by the tiler; GIL not needed, no Python calls). */
static int store_add_state(RecordStore *self, int32_t row, int64_t time, int64_t end, int64_t state,
                           int64_t ord) {
    if (self->n == self->cap) {
        size_t cap = self->cap ? self->cap * 2 : 65536;
        Rec *p = realloc(self->recs, cap * sizeof *p);
        if (!p) return -1;
        self->recs = p;
        self->cap = cap;
    }
    Rec *r = &self->recs[self->n++];
    r->time = time;
    r->sub = 0;
    r->ord = ord;
    r->f[0] = end;
    r->f[1] = state;
    r->f[2] = r->f[3] = r->f[4] = r->f[5] = NUL;
    r->row = row;
    r->kind = KIND_STATE;
    r->phase = 0;
    r->src = SRC_STATE;
    r->pad = 0;
    r->tlen = 0;
    r->plen = 0;
    r->toff = 0;
    self->total++;
    return 0;
}

static PyObject *RecordStore_finish(RecordStore *self, PyObject *Py_UNUSED(ignored)) {
    if (store_spill(self) < 0) return NULL;
    free(self->recs);
    self->recs = NULL;
    self->cap = 0;
    buf_free(&self->text);
    scratch_free(&self->scratch);
    buf_free(&self->block);
    Py_INCREF(self->runs);
    return self->runs;
}

static PyObject *RecordStore_get_total(RecordStore *self, void *closure) {
    return PyLong_FromLongLong(self->total);
}

static PyMethodDef RecordStore_methods[] = {
    {"add", (PyCFunction)RecordStore_add, METH_VARARGS,
     "add(time, row, kind, phase, sub, src, ord, a, b, c, d, e, f, text_offsets, text)"},
    {"finish", (PyCFunction)RecordStore_finish, METH_NOARGS,
     "Spill what is buffered; returns [(path, [(first time, offset)], records)] of every run"},
    {NULL}};

static PyGetSetDef RecordStore_getset[] = {
    {"total", (getter)RecordStore_get_total, NULL, "records added", NULL}, {NULL}};

static PyTypeObject RecordStoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nsys2prv.engine._engine.RecordStore",
    .tp_basicsize = sizeof(RecordStore),
    .tp_dealloc = (destructor)RecordStore_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Records of one report, spilled as runs sorted by time",
    .tp_methods = RecordStore_methods,
    .tp_getset = RecordStore_getset,
    .tp_init = (initproc)RecordStore_init,
    .tp_new = PyType_GenericNew,
};

/* ================================================================== IntervalStore ===== */

typedef struct {
    int64_t start, end, ord;
    int32_t row;
    int8_t state, src;
    int16_t pad;
} Iv;

typedef struct {
    PyObject_HEAD
    Iv *v;
    size_t n, cap, budget_n;
    char *prefix;
    int nruns;
    long long total;
    Scratch scratch;
    Iv *sorted;
    size_t sorted_cap;
} IntervalStore;

static void IntervalStore_dealloc(IntervalStore *self) {
    free(self->v);
    scratch_free(&self->scratch);
    free(self->sorted);
    for (int i = 0; i < self->nruns; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s-%05d.iv", self->prefix, i);
        remove(path);
    }
    free(self->prefix);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int IntervalStore_init(IntervalStore *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"prefix", "budget", NULL};
    const char *prefix;
    Py_ssize_t budget = 128 << 20;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|n", kwlist, &prefix, &budget)) return -1;
    self->prefix = strdup(prefix);
    if (!self->prefix) return -1;
    self->budget_n = (size_t)(budget < 4096 ? 4096 : budget) / sizeof(Iv);
    return 0;
}

static int iv_less(const Iv *x, const Iv *y) {
    if (x->row != y->row) return x->row < y->row;
    if (x->start != y->start) return x->start < y->start;
    return x->ord < y->ord;
}

/* sort v[0..n) by (row, start, ord), stable */
static int iv_sort(IntervalStore *self, Iv *v, size_t n) {
    if (n < 2) return 0;
    if (scratch_reserve(&self->scratch, n) < 0) return -1;
    if (self->sorted_cap < n) {
        free(self->sorted);
        self->sorted = malloc(n * sizeof *self->sorted);
        self->sorted_cap = self->sorted ? n : 0;
        if (!self->sorted) return -1;
    }
    uint32_t *idx = self->scratch.idx, *tmp = self->scratch.tmp;
    uint64_t *key = self->scratch.key;
    Iv *out = self->sorted;
    int64_t smin = v[0].start;
    int32_t rmin = v[0].row;
    for (size_t i = 0; i < n; i++) {
        if (v[i].start < smin) smin = v[i].start;
        if (v[i].row < rmin) rmin = v[i].row;
    }
    for (size_t i = 0; i < n; i++) {
        idx[i] = (uint32_t)i;
        key[i] = (uint64_t)(v[i].start - smin);
    }
    radix_sort(idx, tmp, key, n);
    for (size_t i = 0; i < n; i++) key[i] = (uint64_t)((int64_t)v[i].row - rmin);
    radix_sort(idx, tmp, key, n);
    for (size_t i = 0; i < n; i++) out[i] = v[idx[i]];
    /* equal (row, start): order by ord, stably (rare) */
    for (size_t i = 1; i < n; i++) {
        if (out[i].row == out[i - 1].row && out[i].start == out[i - 1].start &&
            out[i].ord < out[i - 1].ord) {
            Iv x = out[i];
            size_t j = i;
            while (j > 0 && out[j - 1].row == x.row && out[j - 1].start == x.start &&
                   out[j - 1].ord > x.ord) {
                out[j] = out[j - 1];
                j--;
            }
            out[j] = x;
        }
    }
    memcpy(v, out, n * sizeof *v);
    return 0;
}

static int iv_spill(IntervalStore *self) {
    if (self->n == 0) return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s-%05d.iv", self->prefix, self->nruns);
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    if (iv_sort(self, self->v, self->n) < 0) { errno = ENOMEM; rc = -1; }
    else {
        FILE *fh = fopen(path, "wb");
        if (!fh) rc = -1;
        else {
            if (write_all(fh, self->v, self->n * sizeof(Iv)) < 0) rc = -1;
            if (fclose(fh) != 0) rc = -1;
        }
    }
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        return -1;
    }
    self->nruns++;
    self->n = 0;
    return 0;
}

/* add(row int32, start, end, state int8, src int8, ord) */
static PyObject *IntervalStore_add(IntervalStore *self, PyObject *args) {
    PyObject *o[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5])) return NULL;
    static const Py_ssize_t sizes[6] = {4, 8, 8, 1, 1, 8};
    Arr a[6];
    memset(a, 0, sizeof a);
    PyObject *result = NULL;
    Py_ssize_t n = -1;
    for (int k = 0; k < 6; k++) {
        if (arr_get(o[k], &a[k], sizes[k], "interval column") < 0) goto done;
        if (n < 0) n = arr_len(&a[k]);
        else if (arr_len(&a[k]) != n) {
            PyErr_SetString(PyExc_ValueError, "interval columns of different lengths");
            goto done;
        }
    }
    const int32_t *row = a[0].view.buf;
    const int64_t *start = a[1].view.buf, *end = a[2].view.buf, *ord = a[5].view.buf;
    const int8_t *state = a[3].view.buf, *src = a[4].view.buf;
    Py_ssize_t i = 0;
    while (i < n) {
        if (self->n == self->cap) {
            size_t cap = self->cap ? self->cap * 2 : 65536;
            if (cap > self->budget_n) cap = self->budget_n > self->n ? self->budget_n : self->n + 1;
            Iv *p = realloc(self->v, cap * sizeof *p);
            if (!p) { PyErr_NoMemory(); goto done; }
            self->v = p;
            self->cap = cap;
        }
        Py_ssize_t take = (Py_ssize_t)(self->cap - self->n);
        if (take > n - i) take = n - i;
        for (Py_ssize_t j = i; j < i + take; j++) {
            Iv *v = &self->v[self->n++];
            v->row = row[j];
            v->start = start[j];
            v->end = end[j];
            v->state = state[j];
            v->src = src[j];
            v->ord = ord[j];
            v->pad = 0;
        }
        i += take;
        self->total += take;
        if (self->n >= self->budget_n && iv_spill(self) < 0) goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (int k = 0; k < 6; k++) arr_release(&a[k]);
    return result;
}

/* A sorted source of intervals: a run file or the in-memory rest. */
typedef struct {
    FILE *fh;
    Iv *mem;
    size_t mem_n, mem_i;
    Iv buf[4096];
    size_t bn, bi;
    Iv cur;
    int live;
} IvSource;

static void ivsrc_next(IvSource *s) {
    if (s->fh) {
        if (s->bi == s->bn) {
            s->bn = fread(s->buf, sizeof(Iv), 4096, s->fh);
            s->bi = 0;
            if (s->bn == 0) { s->live = 0; return; }
        }
        s->cur = s->buf[s->bi++];
        s->live = 1;
    } else {
        if (s->mem_i == s->mem_n) { s->live = 0; return; }
        s->cur = s->mem[s->mem_i++];
        s->live = 1;
    }
}

/* min-heap of interval sources on (head, source index): ties keep run order */
static inline int ivsrc_less(const IvSource *srcs, int a, int b) {
    if (iv_less(&srcs[a].cur, &srcs[b].cur)) return 1;
    if (iv_less(&srcs[b].cur, &srcs[a].cur)) return 0;
    return a < b;
}

static void ivheap_down(int *heap, int hn, const IvSource *srcs, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < hn && ivsrc_less(srcs, heap[l], heap[m])) m = l;
        if (r < hn && ivsrc_less(srcs, heap[r], heap[m])) m = r;
        if (m == i) return;
        int t = heap[i]; heap[i] = heap[m]; heap[m] = t;
        i = m;
    }
}

static void ivheap_push(int *heap, int *hn, const IvSource *srcs, int s) {
    int i = (*hn)++;
    heap[i] = s;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!ivsrc_less(srcs, heap[i], heap[p])) break;
        int t = heap[i]; heap[i] = heap[p]; heap[p] = t;
        i = p;
    }
}

/* the top source advanced: drop it if done, else sift it down */
static void ivheap_fix(int *heap, int *hn, const IvSource *srcs) {
    if (!srcs[heap[0]].live) heap[0] = heap[--(*hn)];
    if (*hn > 0) ivheap_down(heap, *hn, srcs, 0);
}

/* the tiler's running state */
typedef struct {
    RecordStore *store;
    const int64_t *first;    /* per row: first time (NUL: none) */
    const int8_t *deflt;     /* per row: default state */
    const uint8_t *is_gpu;   /* per row: overlapping activities go to lanes */
    int64_t *row_max;        /* per row: max end of tiled intervals (NUL: none) */
    Py_ssize_t nrows;
    /* current row */
    int32_t row;
    int have_row;
    int64_t cm;              /* max end so far in row (tiled intervals) */
    int have_cm;
    int64_t cluster_max;     /* lanes: max end of all intervals so far in row */
    int64_t *lane_ends;
    size_t nlanes, lanes_cap;
    Buf moved;               /* Iv + int64 lane per moved interval */
    int err;
} Tiler;

static void tiler_row(Tiler *t, int32_t row) {
    t->row = row;
    t->have_row = 1;
    t->have_cm = 0;
    t->nlanes = 0;
}

static void tiler_push(Tiler *t, const Iv *v) {
    if (!t->have_row || v->row != t->row) tiler_row(t, v->row);
    int32_t row = v->row;
    int in_range = row >= 0 && row < t->nrows;
    if (in_range && t->is_gpu[row]) {
        /* lanes: first fit inside clusters of overlapping activities */
        int new_cluster = t->nlanes == 0 || v->start >= t->cluster_max;
        size_t lane;
        if (new_cluster) {
            t->nlanes = 0;
            t->cluster_max = v->end;
        } else if (v->end > t->cluster_max) t->cluster_max = v->end;
        for (lane = 0; lane < t->nlanes; lane++)
            if (t->lane_ends[lane] <= v->start) break;
        if (lane == t->nlanes) {
            if (t->nlanes == t->lanes_cap) {
                size_t cap = t->lanes_cap ? t->lanes_cap * 2 : 16;
                int64_t *p = realloc(t->lane_ends, cap * sizeof *p);
                if (!p) { t->err = 1; return; }
                t->lane_ends = p;
                t->lanes_cap = cap;
            }
            t->nlanes++;
        }
        t->lane_ends[lane] = v->end;
        if (lane > 0) {
            if (buf_reserve(&t->moved, sizeof(Iv) + 8) < 0) { t->err = 1; return; }
            memcpy(t->moved.p + t->moved.n, v, sizeof(Iv));
            int64_t l = (int64_t)lane;
            memcpy(t->moved.p + t->moved.n + sizeof(Iv), &l, 8);
            t->moved.n += sizeof(Iv) + 8;
            return;
        }
    }
    int64_t prev = t->have_cm ? t->cm : (in_range ? t->first[row] : NUL);
    int64_t eff = (prev != NUL && prev > v->start) ? prev : v->start;
    if (eff < v->end && store_add_state(t->store, row, eff, v->end, v->state, v->ord) < 0) t->err = 1;
    if (prev != NUL && prev < v->start) {
        int64_t d = in_range ? t->deflt[row] : 0;
        if (store_add_state(t->store, row, prev, v->start, d, v->ord) < 0) t->err = 1;
    }
    if (!t->have_cm || v->end > t->cm) t->cm = v->end;
    t->have_cm = 1;
    if (in_range && (t->row_max[row] == NUL || t->cm > t->row_max[row])) t->row_max[row] = t->cm;
}

/* tile(store, first, default, is_gpu) -> (moved intervals as bytes, row_max as bytes)
 * Every interval added so far is tiled (sorted by row, start, ord, out of core); states go into
 * `store`. Activities that overlap an earlier one on a GPU row are not tiled but returned with
 * their lane (moved: structs of Iv + int64 lane). */
static PyObject *IntervalStore_tile(IntervalStore *self, PyObject *args) {
    PyObject *store_obj, *o_first, *o_def, *o_gpu;
    if (!PyArg_ParseTuple(args, "O!OOO", &RecordStoreType, &store_obj, &o_first, &o_def, &o_gpu))
        return NULL;
    Arr a[3];
    memset(a, 0, sizeof a);
    PyObject *result = NULL;
    IvSource *srcs = NULL;
    int *heap = NULL;
    int hn = 0;
    int nsrc = 0;
    Tiler t;
    memset(&t, 0, sizeof t);
    if (arr_get(o_first, &a[0], 8, "first") < 0 || arr_get(o_def, &a[1], 1, "default") < 0 ||
        arr_get(o_gpu, &a[2], 1, "is_gpu") < 0)
        goto done;
    t.nrows = arr_len(&a[0]);
    if (arr_len(&a[1]) != t.nrows || arr_len(&a[2]) != t.nrows) {
        PyErr_SetString(PyExc_ValueError, "per-row arrays of different lengths");
        goto done;
    }
    t.store = (RecordStore *)store_obj;
    t.first = a[0].view.buf;
    t.deflt = a[1].view.buf;
    t.is_gpu = a[2].view.buf;
    t.row_max = malloc((t.nrows + 1) * sizeof *t.row_max);
    if (!t.row_max) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < t.nrows; i++) t.row_max[i] = NUL;
    if (self->nruns > 0 && iv_spill(self) < 0) goto done;
    nsrc = self->nruns + 1;
    srcs = calloc((size_t)nsrc, sizeof *srcs);
    if (!srcs) { PyErr_NoMemory(); goto done; }
    int err = 0;
    char errpath[4096] = "";
    Py_BEGIN_ALLOW_THREADS
    if (self->nruns == 0) {
        if (iv_sort(self, self->v, self->n) < 0) { err = ENOMEM; }
        srcs[0].mem = self->v;
        srcs[0].mem_n = self->n;
        nsrc = 1;
    } else {
        nsrc = self->nruns;
        for (int i = 0; i < nsrc && !err; i++) {
            snprintf(errpath, sizeof errpath, "%s-%05d.iv", self->prefix, i);
            srcs[i].fh = fopen(errpath, "rb");
            if (!srcs[i].fh) err = errno;
        }
    }
    heap = malloc(((size_t)nsrc + 1) * sizeof *heap);
    if (!heap) err = ENOMEM;
    if (!err)
        for (int i = 0; i < nsrc; i++) {
            ivsrc_next(&srcs[i]);
            if (srcs[i].live) ivheap_push(heap, &hn, srcs, i);
        }
    Py_END_ALLOW_THREADS
    /* tile in steps: the states spill as runs (with the GIL) whenever the store is full */
    int finished = 0;
    while (!err && !finished) {
        Py_BEGIN_ALLOW_THREADS
        for (;;) {
            if (hn == 0) { finished = 1; break; }
            int best = heap[0];
            tiler_push(&t, &srcs[best].cur);
            if (t.err) { err = ENOMEM; break; }
            ivsrc_next(&srcs[best]);
            ivheap_fix(heap, &hn, srcs);
            if (store_bytes(t.store) >= t.store->budget) break;
        }
        Py_END_ALLOW_THREADS
        if (!err && !finished && store_spill(t.store) < 0) goto done;
    }
    if (err) {
        errno = err;
        if (err == ENOMEM) PyErr_NoMemory();
        else PyErr_SetFromErrnoWithFilename(PyExc_OSError, errpath);
        goto done;
    }
    result = Py_BuildValue("(y#y#)", t.moved.p ? t.moved.p : "", (Py_ssize_t)t.moved.n,
                           (const char *)t.row_max, (Py_ssize_t)(t.nrows * sizeof(int64_t)));
done:
    free(heap);
    if (srcs) {
        for (int i = 0; i < nsrc; i++)
            if (srcs[i].fh) fclose(srcs[i].fh);
        free(srcs);
    }
    free(t.row_max);
    free(t.lane_ends);
    buf_free(&t.moved);
    for (int k = 0; k < 3; k++) arr_release(&a[k]);
    free(self->v);
    self->v = NULL;
    self->n = self->cap = 0;
    return result;
}

static PyObject *IntervalStore_get_total(IntervalStore *self, void *closure) {
    return PyLong_FromLongLong(self->total);
}

static PyMethodDef IntervalStore_methods[] = {
    {"add", (PyCFunction)IntervalStore_add, METH_VARARGS, "add(row, start, end, state, src, ord)"},
    {"tile", (PyCFunction)IntervalStore_tile, METH_VARARGS,
     "tile(store, first, default, is_gpu) -> (moved, row_max)"},
    {NULL}};

static PyGetSetDef IntervalStore_getset[] = {
    {"total", (getter)IntervalStore_get_total, NULL, "intervals added", NULL}, {NULL}};

static PyTypeObject IntervalStoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nsys2prv.engine._engine.IntervalStore",
    .tp_basicsize = sizeof(IntervalStore),
    .tp_dealloc = (destructor)IntervalStore_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "State intervals of one report, tiled into states",
    .tp_methods = IntervalStore_methods,
    .tp_getset = IntervalStore_getset,
    .tp_init = (initproc)IntervalStore_init,
    .tp_new = PyType_GenericNew,
};

/* ================================================================== Merger ============ */

/* int64 -> int64 open-addressing map */
typedef struct {
    int64_t *keys, *vals;
    uint8_t *used;
    size_t mask;
    size_t n;
} Map;

static inline size_t map_hash(int64_t k) {
    uint64_t x = (uint64_t)k;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

static int map_build(Map *m, const int64_t *keys, const int64_t *vals, size_t n) {
    size_t cap = 16;
    while (cap < n * 2 + 2) cap *= 2;
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    m->used = calloc(cap, 1);
    m->mask = cap - 1;
    m->n = n;
    if (!m->keys || !m->vals || !m->used) return -1;
    for (size_t i = 0; i < n; i++) {
        size_t h = map_hash(keys[i]) & m->mask;
        while (m->used[h] && m->keys[h] != keys[i]) h = (h + 1) & m->mask;
        if (!m->used[h]) { /* first wins, like a dict built in order... last wins for dicts */
            m->used[h] = 1;
            m->keys[h] = keys[i];
        }
        m->vals[h] = vals[i];
    }
    return 0;
}

static inline int map_get(const Map *m, int64_t k, int64_t *v) {
    if (m->n == 0) return 0;
    size_t h = map_hash(k) & m->mask;
    while (m->used[h]) {
        if (m->keys[h] == k) { *v = m->vals[h]; return 1; }
        h = (h + 1) & m->mask;
    }
    return 0;
}

static void map_free(Map *m) {
    free(m->keys); free(m->vals); free(m->used);
    memset(m, 0, sizeof *m);
}

typedef struct {
    int64_t shift;
    Py_ssize_t nrows;                 /* local rows; slot nrows = "no row" (zeros) */
    int64_t *order, *cpu, *task, *thread;
    Map types, fams, values, moves;
    uint64_t text_srcs;               /* bit s: the text pairs of events of src s are names */
} ReportMap;

/* a record in trace-wide form */
typedef struct {
    int64_t time, order, sub, ord;
    int64_t f[6];
    int64_t cpu, task, thread, rcpu, rtask, rthread;
    int32_t rep;
    int8_t kind, phase, src;
    uint32_t tlen;
    size_t toff; /* into the group's text arena */
} FRec;

typedef struct {
    /* run file: read with pread at `offset`; the descriptor may be closed between blocks
     * (fd -1) when the runs outnumber the descriptors the merge may hold (max_open) */
    int is_run;
    int fd;
    char *path;
    long long end_offset;     /* stop before this offset (-1: end of file) */
    long long offset;         /* of the next bytes to read */
    unsigned char *block;     /* the current block's bytes read so far, RUN_READ_BYTES at a time */
    size_t block_cap;
    uint32_t block_left;      /* records of the current block not decoded yet */
    uint32_t bfile;           /* bytes of the current block not read yet */
    const unsigned char *p, *lim;
    int64_t prev_time;
    int rep;
    /* in-memory trace-wide source (columns) */
    Py_ssize_t mem_n, mem_i;
    const int64_t *mcol[22];
    const int64_t *toffs;
    const char *tdata;
    /* head */
    FRec head;
    const char *head_text;
    Buf rtext;                /* the head's text pairs renumbered (ReportMap.text_srcs) */
    Buf ptext;                /* the head's text with its binary pairs written out */
    int live;
    int index;
} MSource;

typedef struct {
    PyObject_HEAD
    MSource *srcs;
    int nsrc;
    ReportMap *reps;
    int nreps;
    int64_t lo, hi;           /* window [lo, hi) of trace times */
    FRec *group;
    size_t gn, gcap;
    Buf gtext;
    uint32_t *gidx, *gtmp;
    int *heap;                /* source indices, min-heap on (head.time, index) */
    int hn;
    /* line state */
    int prev_event;
    int64_t prev_time, prev_order;
    int started;
    int64_t line_row;         /* scan: the row of the current line, -1 if it is malformed */
    long long dropped, written;
    int64_t last_time;
    Buf outbuf[2];            /* results alternate between two buffers (see next()) */
    int which;
    PyObject *keep;           /* references to the arrays of in-memory sources */
    Arr *arrs;
    int narrs;
    int err;
    char errpath[4096];
    /* descriptors of run files: at most max_open at once, the oldest opened closed first */
    int max_open, nopen;
    int *ring;                /* source indices in the order their files were opened */
    int ring_head, ring_n;
    long long reopened;       /* opens after the first of each run (0 when all fit) */
} Merger;

static void merger_free_reps(Merger *self) {
    for (int i = 0; i < self->nreps; i++) {
        ReportMap *r = &self->reps[i];
        free(r->order); free(r->cpu); free(r->task); free(r->thread);
        map_free(&r->types); map_free(&r->fams); map_free(&r->values); map_free(&r->moves);
    }
    free(self->reps);
    self->reps = NULL;
}

static void Merger_dealloc(Merger *self) {
    for (int i = 0; i < self->nsrc; i++) {
        if (self->srcs[i].fd >= 0) close(self->srcs[i].fd);
        free(self->srcs[i].path);
        free(self->srcs[i].block);
        buf_free(&self->srcs[i].rtext);
        buf_free(&self->srcs[i].ptext);
    }
    free(self->srcs);
    merger_free_reps(self);
    free(self->group);
    buf_free(&self->gtext);
    free(self->gidx);
    free(self->gtmp);
    free(self->heap);
    free(self->ring);
    buf_free(&self->outbuf[0]);
    buf_free(&self->outbuf[1]);
    for (int i = 0; i < self->narrs; i++) arr_release(&self->arrs[i]);
    free(self->arrs);
    Py_XDECREF(self->keep);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline int64_t gather(const ReportMap *r, const int64_t *col, int64_t row) {
    if (row == NUL || row < 0 || row >= r->nrows) return col[r->nrows];
    return col[row];
}

/* the trace-wide value of an event's (type, value) pair */
static inline int64_t renumber(const ReportMap *r, int64_t type, int64_t value) {
    int64_t fam;
    if (type == NUL || !map_get(&r->fams, type, &fam)) return value;
    if (fam == ROW_FAMILY) return value == NUL ? NUL : gather(r, r->thread, value);
    if (value == NUL || value == 0) return value;
    int64_t named;
    if (map_get(&r->values, (int64_t)((uint64_t)fam * (uint64_t)VALUE_KEY + (uint64_t)value), &named))
        return named;
    return value;
}

/* Parse a decimal integer (optional '-') at p (before end); the position after it, or NULL. */
static const char *parse_i64(const char *p, const char *end, int64_t *v) {
    int neg = p < end && *p == '-';
    p += neg;
    if (p >= end || *p < '0' || *p > '9') return NULL;
    uint64_t u = 0;
    while (p < end && *p >= '0' && *p <= '9') u = u * 10 + (uint64_t)(*p++ - '0');
    *v = neg ? -(int64_t)u : (int64_t)u;
    return p;
}

/* The ":type:value" text pairs of an event whose values are names (a sample's callers) with
 * their types and values made trace-wide as an (a, b) pair's are, into out; text that is not
 * such pairs is copied as it is. 0, or -1 out of memory. */
static int renumber_text(const ReportMap *r, const char *p, uint32_t n, Buf *out) {
    /* a pair takes 4 bytes at least and is written in 44 at most */
    out->n = 0;
    if (buf_reserve(out, (size_t)n * 11 + 64) < 0) return -1;
    const char *end = p + n;
    char *o = out->p;
    while (p < end) {
        int64_t t, v, nt;
        const char *q, *w = NULL;
        if (*p != ':' || !(q = parse_i64(p + 1, end, &t)) || q >= end || *q != ':' ||
            !(w = parse_i64(q + 1, end, &v))) {
            memcpy(o, p, (size_t)(end - p)); /* not a pair: the rest as it is */
            o += end - p;
            break;
        }
        if (r->types.n && map_get(&r->types, t, &nt)) t = nt;
        v = renumber(r, t, v);
        *o++ = ':';
        o = fmt_i64(o, t);
        *o++ = ':';
        o = fmt_i64(o, v);
        p = w;
    }
    out->n = (size_t)(o - out->p);
    return 0;
}

/* A varint at *pp, not reading at or past end; 0, or -1 when it does not end before end. */
static int get_varint_in(const unsigned char **pp, const unsigned char *end, uint64_t *v) {
    const unsigned char *p = *pp;
    uint64_t u = 0;
    for (int shift = 0; p < end && shift < 64; shift += 7) {
        unsigned char b = *p++;
        u |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = u;
            *pp = p;
            return 0;
        }
    }
    return -1;
}

/* A record's text, then its binary pairs as ":type:value" text (what the store was given),
 * into out; 0, -1 out of memory (errno ENOMEM) or pairs that are not well formed (EIO). */
static int pairs_text(const char *text, uint32_t tlen, const unsigned char *p, uint32_t plen,
                      Buf *out) {
    out->n = 0;
    /* a pair takes 2 bytes at least and is written in 42 at most */
    if (buf_reserve(out, (size_t)tlen + (size_t)plen * 21 + 64) < 0) { errno = ENOMEM; return -1; }
    char *o = out->p;
    if (tlen) {
        memcpy(o, text, tlen);
        o += tlen;
    }
    const unsigned char *end = p + plen;
    int64_t type = 0;
    while (p < end) {
        uint64_t dt, v;
        if (get_varint_in(&p, end, &dt) < 0 || get_varint_in(&p, end, &v) < 0) {
            errno = EIO;
            return -1;
        }
        type = (int64_t)((uint64_t)type + (uint64_t)unzz(dt));  /* wrap_sub undone */
        *o++ = ':';
        o = fmt_i64(o, type);
        *o++ = ':';
        o = fmt_i64(o, unzz(v));
    }
    out->n = (size_t)(o - out->p);
    return 0;
}

/* Load the next record of a run source into its head (trace-wide); 0 at the end, -1 error. */
/* n bytes at offset (fewer only at the end of the file); -1 with errno on an error */
static ssize_t read_at(int fd, void *buf, size_t n, long long offset) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(offset + (long long)got));
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* an open descriptor for source s's run file, closing the oldest opened one first when
 * max_open are open; 0, or -1 with errno set (and the path in errpath) */
static int msrc_open(Merger *m, MSource *s) {
    if (s->fd >= 0) return 0;
    while (m->nopen >= m->max_open && m->ring_n > 0) {
        MSource *old = &m->srcs[m->ring[m->ring_head]];
        m->ring_head = (m->ring_head + 1) % (m->nsrc + 1);
        m->ring_n--;
        if (old->fd >= 0) { close(old->fd); old->fd = -1; m->nopen--; }
    }
    int fd;
    do fd = open(s->path, O_RDONLY | O_CLOEXEC); while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        snprintf(m->errpath, sizeof m->errpath, "%s", s->path);
        return -1;
    }
    s->fd = fd;
    m->nopen++;
    m->ring[(m->ring_head + m->ring_n) % (m->nsrc + 1)] = s->index;
    m->ring_n++;
    return 0;
}

static void msrc_close(Merger *m, MSource *s) {
    if (s->fd >= 0) { close(s->fd); s->fd = -1; m->nopen--; }
}

/* A run's block is read RUN_READ_BYTES at a time, not whole: the merge holds a buffer per
 * run, and a block of RUN_BLOCK_RECORDS records is ~140 kB (a 30M-activity export's ~530 runs:
 * 75 MB held, not 17). The buffer keeps REC_HEAD_MAX bytes of slack past what was read, so
 * that decoding a malformed record stays inside it. */
#define RUN_READ_BYTES (32u << 10)
#define REC_HEAD_MAX ENC_MAX(0)

/* at least `need` bytes of the current block from s->p on in the buffer, or all it has
 * left; 0, or -1 with errno set */
static int msrc_fill(Merger *m, MSource *s, size_t need) {
    size_t avail = (size_t)(s->lim - s->p);
    if (avail >= need || s->bfile == 0) return 0;
    size_t want = need > RUN_READ_BYTES ? need : RUN_READ_BYTES;
    if (want + REC_HEAD_MAX > s->block_cap) {
        size_t at = (size_t)(s->p - s->block);
        unsigned char *b = realloc(s->block, want + REC_HEAD_MAX);
        if (!b) { errno = ENOMEM; return -1; }
        s->block = b;
        s->block_cap = want + REC_HEAD_MAX;
        s->p = b + at;
    }
    if (avail && s->p != s->block) memmove(s->block, s->p, avail);
    s->p = s->block;
    size_t n = s->block_cap - REC_HEAD_MAX - avail;
    if (n > s->bfile) n = s->bfile;
    if (s->fd < 0) {
        if (msrc_open(m, s) < 0) return -1;
        m->reopened++;
    }
    ssize_t got = read_at(s->fd, s->block + avail, n, s->offset);
    if (got < 0) return -1;
    if ((size_t)got != n) { errno = EIO; return -1; }
    memset(s->block + avail + n, 0, REC_HEAD_MAX);
    s->offset += (long long)n;
    s->bfile -= (uint32_t)n;
    s->lim = s->block + avail + n;
    return 0;
}

static int msrc_next_run(Merger *m, MSource *s) {
    for (;;) {
        if (s->block_left == 0) {
            s->offset += s->bfile;  /* bytes a malformed block did not use */
            s->bfile = 0;
            s->p = s->lim = s->block;
            if (s->end_offset >= 0 && s->offset >= s->end_offset) { msrc_close(m, s); return 0; }
            if (s->fd < 0) {
                if (msrc_open(m, s) < 0) return -1;
                m->reopened++;
            }
            unsigned char head[8];
            ssize_t got = read_at(s->fd, head, sizeof head, s->offset);
            if (got < 0) return -1;
            if (got == 0) { msrc_close(m, s); return 0; }
            if (got != (ssize_t)sizeof head) { errno = EIO; return -1; }
            s->offset += (long long)sizeof head;
            s->block_left = get_le32(head);
            s->bfile = get_le32(head + 4);
            s->prev_time = 0;
            continue;
        }
        if (msrc_fill(m, s, REC_HEAD_MAX) < 0) return -1;
        DRec d;
        const unsigned char *q = decode_rec(s->p, &d, s->prev_time, s->lim + REC_HEAD_MAX);
        while (q > s->lim) {  /* its text or pairs go on past the bytes read */
            if (s->bfile == 0) { errno = EIO; return -1; }
            if (msrc_fill(m, s, (size_t)(q - s->p)) < 0) return -1;
            q = decode_rec(s->p, &d, s->prev_time, s->lim + REC_HEAD_MAX);
        }
        s->p = q;
        s->prev_time = d.time;
        s->block_left--;
        const ReportMap *r = &m->reps[s->rep];
        FRec *f = &s->head;
        int64_t time = d.time + r->shift;
        if (time < m->lo) continue;
        if (time >= m->hi) { msrc_close(m, s); return 0; }
        int64_t a = d.f[0], b = d.f[1], c = d.f[2], dd = d.f[3];
        int64_t row = d.row, mv;
        if (d.kind == KIND_EVENT) {
            int64_t nt;
            if (r->types.n) {
                if (a != NUL && map_get(&r->types, a, &nt)) a = nt;
                if (c != NUL && map_get(&r->types, c, &nt)) c = nt;
            }
            if (r->moves.n && map_get(&r->moves, ((int64_t)d.src << 48) + d.ord, &mv)) row = mv;
            b = renumber(r, a, b);
            dd = renumber(r, c, dd);
        } else if (d.kind == KIND_COMM) {
            if (r->moves.n && map_get(&r->moves, ((int64_t)(d.src - SRC_LAUNCH_OFFSET) << 48) + d.ord, &mv))
                b = mv;
            if (a != NUL) a += r->shift;
            if (c != NUL) c += r->shift;
            if (dd != NUL) dd += r->shift;
            f->rcpu = gather(r, r->cpu, b);
            f->rtask = gather(r, r->task, b);
            f->rthread = gather(r, r->thread, b);
        } else {
            if (a != NUL) a += r->shift;
        }
        f->time = time;
        f->order = gather(r, r->order, row);
        f->cpu = gather(r, r->cpu, row);
        f->task = gather(r, r->task, row);
        f->thread = gather(r, r->thread, row);
        f->sub = d.sub;
        f->ord = d.ord;
        f->f[0] = a; f->f[1] = b; f->f[2] = c; f->f[3] = dd; f->f[4] = d.f[4]; f->f[5] = d.f[5];
        f->rep = s->rep;
        f->kind = (int8_t)d.kind;
        f->phase = (int8_t)d.phase;
        f->src = (int8_t)d.src;
        f->tlen = d.tlen;
        s->head_text = d.text;
        if (d.plen) {
            if (pairs_text(d.text, d.tlen, d.pairs, d.plen, &s->ptext) < 0) return -1;
            s->head_text = s->ptext.p;
            f->tlen = (uint32_t)s->ptext.n;
        }
        if (d.kind == KIND_EVENT && f->tlen && d.src >= 0 && d.src < 64 &&
            ((r->text_srcs >> d.src) & 1)) {
            if (renumber_text(r, s->head_text, f->tlen, &s->rtext) < 0) { errno = ENOMEM; return -1; }
            s->head_text = s->rtext.p;
            f->tlen = (uint32_t)s->rtext.n;
        }
        return 1;
    }
}

/* columns of an in-memory source, in this order */
enum { MC_TIME, MC_ORDER, MC_KIND, MC_PHASE, MC_SUB, MC_SRC, MC_REP, MC_ORD, MC_A, MC_B, MC_C, MC_D, MC_E, MC_F,
       MC_CPU, MC_TASK, MC_THREAD, MC_RCPU, MC_RTASK, MC_RTHREAD, MC_NCOLS };

static int msrc_next_mem(Merger *m, MSource *s) {
    while (s->mem_i < s->mem_n) {
        Py_ssize_t i = s->mem_i++;
        FRec *f = &s->head;
        f->time = s->mcol[MC_TIME][i];
        if (f->time < m->lo) continue;
        if (f->time >= m->hi) { s->mem_i = s->mem_n; return 0; }
        f->order = s->mcol[MC_ORDER][i];
        f->kind = (int8_t)s->mcol[MC_KIND][i];
        f->phase = (int8_t)s->mcol[MC_PHASE][i];
        f->sub = s->mcol[MC_SUB][i];
        f->src = (int8_t)s->mcol[MC_SRC][i];
        f->rep = (int32_t)s->mcol[MC_REP][i];
        f->ord = s->mcol[MC_ORD][i];
        for (int k = 0; k < 6; k++) f->f[k] = s->mcol[MC_A + k][i];
        f->cpu = s->mcol[MC_CPU][i];
        f->task = s->mcol[MC_TASK][i];
        f->thread = s->mcol[MC_THREAD][i];
        f->rcpu = s->mcol[MC_RCPU][i];
        f->rtask = s->mcol[MC_RTASK][i];
        f->rthread = s->mcol[MC_RTHREAD][i];
        if (s->toffs) {
            f->tlen = (uint32_t)(s->toffs[i + 1] - s->toffs[i]);
            s->head_text = s->tdata + s->toffs[i];
        } else {
            f->tlen = 0;
            s->head_text = NULL;
        }
        return 1;
    }
    return 0;
}

static int msrc_next(Merger *m, MSource *s) {
    int rc = s->is_run ? msrc_next_run(m, s) : msrc_next_mem(m, s);
    if (rc < 0) {
        m->err = errno ? errno : EIO;
        s->live = 0;
        return -1;
    }
    s->live = rc;
    return rc;
}

static inline int heap_less(Merger *m, int x, int y) {
    const MSource *a = &m->srcs[x], *b = &m->srcs[y];
    if (a->head.time != b->head.time) return a->head.time < b->head.time;
    return x < y;
}

static void heap_push(Merger *m, int s) {
    int i = m->hn++;
    m->heap[i] = s;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!heap_less(m, m->heap[i], m->heap[p])) break;
        int t = m->heap[i]; m->heap[i] = m->heap[p]; m->heap[p] = t;
        i = p;
    }
}

static int heap_pop(Merger *m) {
    int top = m->heap[0];
    m->heap[0] = m->heap[--m->hn];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, s = i;
        if (l < m->hn && heap_less(m, m->heap[l], m->heap[s])) s = l;
        if (r < m->hn && heap_less(m, m->heap[r], m->heap[s])) s = r;
        if (s == i) break;
        int t = m->heap[i]; m->heap[i] = m->heap[s]; m->heap[s] = t;
        i = s;
    }
    return top;
}

/* merge key inside one time: (order, kind, phase, sub, src, rep, ord) */
static inline int frec_less(const FRec *x, const FRec *y) {
    if (x->order != y->order) return x->order < y->order;
    if (x->kind != y->kind) return x->kind < y->kind;
    if (x->phase != y->phase) return x->phase < y->phase;
    if (x->sub != y->sub) return x->sub < y->sub;
    if (x->src != y->src) return x->src < y->src;
    if (x->rep != y->rep) return x->rep < y->rep;
    return x->ord < y->ord;
}

static void group_sort(Merger *m, size_t lo, size_t hi) {
    uint32_t *a = m->gidx, *t = m->gtmp;
    size_t n = hi - lo;
    if (n < 2) return;
    if (n <= 16) {
        for (size_t i = lo + 1; i < hi; i++) {
            uint32_t x = a[i];
            size_t j = i;
            while (j > lo && frec_less(&m->group[x], &m->group[a[j - 1]])) { a[j] = a[j - 1]; j--; }
            a[j] = x;
        }
        return;
    }
    size_t mid = lo + n / 2;
    group_sort(m, lo, mid);
    group_sort(m, mid, hi);
    size_t i = lo, j = mid, k = lo;
    while (i < mid && j < hi) t[k++] = frec_less(&m->group[a[j]], &m->group[a[i]]) ? a[j++] : a[i++];
    while (i < mid) t[k++] = a[i++];
    while (j < hi) t[k++] = a[j++];
    memcpy(a + lo, t + lo, n * sizeof *a);
}

/* "appl:task" of a task id: the id carries its application in its high 32 bits (0 for
 * application 1, so a trace of one application has plain task numbers) */
static inline char *fmt_appl_task(char *o, int64_t task) {
    o = fmt_i64(o, (task >> 32) + 1);
    *o++ = ':';
    return fmt_i64(o, task & 0xffffffff);
}

/* the row a scanner gives the ids fmt_appl_task and the thread write, or -1 */
static inline int64_t scanner_row_of(const Scanner *s, int64_t task, int64_t thread) {
    return scanner_row(s, (task >> 32) + 1, task & 0xffffffff, thread);
}

/* A record with unresolved fields is not written (counted in `dropped`). */
static inline int record_dropped(const FRec *f) {
    return f->f[0] == NUL || f->f[1] == NUL || f->cpu == NUL ||
           (f->kind == KIND_COMM && f->rcpu == NUL);
}

/* Events of one row at one time share a line: does this record continue the last one? */
static inline int continues_line(const Merger *m, const FRec *f) {
    return f->kind == KIND_EVENT && m->prev_event && f->time == m->prev_time &&
           f->order == m->prev_order;
}

static inline void record_written(Merger *m, const FRec *f) {
    m->prev_event = f->kind == KIND_EVENT;
    m->prev_time = f->time;
    m->prev_order = f->order;
    m->started = 1;
    m->written++;
}

/* Append the formatted records of the current group to out. */
static int format_group(Merger *m, Buf *out) {
    for (size_t gi = 0; gi < m->gn; gi++) {
        const FRec *f = &m->group[m->gidx[gi]];
        if (record_dropped(f)) {
            m->dropped++;
            continue;
        }
        if (buf_reserve(out, 400 + f->tlen) < 0) return -1;
        char *o = out->p + out->n;
        int is_event = f->kind == KIND_EVENT;
        int cont = continues_line(m, f);
        if (!cont) {
            if (m->started) *o++ = '\n';
            *o++ = (char)('0' + f->kind);
            *o++ = ':';
            o = fmt_i64(o, f->cpu);
            *o++ = ':';
            o = fmt_appl_task(o, f->task);
            *o++ = ':';
            o = fmt_i64(o, f->thread);
            *o++ = ':';
            o = fmt_i64(o, f->time);
        }
        *o++ = ':';
        o = fmt_i64(o, f->f[0]);
        if (f->kind == KIND_COMM) {
            *o++ = ':';
            o = fmt_i64(o, f->rcpu);
            *o++ = ':';
            o = fmt_appl_task(o, f->rtask);
            *o++ = ':';
            o = fmt_i64(o, f->rthread);
        } else {
            *o++ = ':';
            o = fmt_i64(o, f->f[1]);
        }
        if (f->f[2] != NUL && f->f[3] != NUL) {
            *o++ = ':';
            o = fmt_i64(o, f->f[2]);
            *o++ = ':';
            o = fmt_i64(o, f->f[3]);
        }
        if (f->kind == KIND_COMM && f->f[4] != NUL && f->f[5] != NUL) {
            *o++ = ':';
            o = fmt_i64(o, f->f[4]);
            *o++ = ':';
            o = fmt_i64(o, f->f[5]);
        }
        if (is_event && f->tlen) {
            memcpy(o, m->gtext.p + f->toff, f->tlen);
            o += f->tlen;
        }
        out->n = (size_t)(o - out->p);
        record_written(m, f);
    }
    return 0;
}

/* One record into the scanner as scanning the text format_group writes for it gives it (the
 * row of its line; what would make that line malformed); 0, -1 malformed, -2 no memory. */
static int scan_record(Merger *m, Scanner *s, const FRec *f, int starts_line) {
    if (starts_line) m->line_row = scanner_row_of(s, f->task, f->thread);
    else if (m->line_row < 0) return 0; /* the rest of a malformed line: counted once */
    int64_t row = m->line_row;
    if (f->kind == KIND_STATE) /* 1:cpu:appl:task:thread:begin:end:state */
        return row < 0 ? -1 : scanner_state(s, row, f->time, f->f[0], f->f[1]);
    if (f->kind == KIND_EVENT) { /* 2:...:time:type:value[:type:value][text] */
        if (row < 0) return -1;
        int rc = scanner_event(s, row, f->time, f->f[0], f->f[1]);
        if (rc == 0 && f->f[2] != NUL && f->f[3] != NUL)
            rc = scanner_event(s, row, f->time, f->f[2], f->f[3]);
        if (rc == 0 && f->tlen) {
            /* ":type:value" pairs (as the engine and records.pairs write them: other text
             * would run into the value before it on the line, so it counts as malformed) */
            const char *text = m->gtext.p + f->toff;
            rc = text[0] != ':' ? -1 : scanner_pairs(s, row, f->time, text + 1, text + f->tlen);
        }
        if (rc == -1) m->line_row = -1;
        return rc;
    }
    if (f->kind != KIND_COMM || !scanner_wants_comms(s)) return 0;
    /* 3:...:lsend:psend:rcpu:rappl:rtask:rthread:lrecv:precv:size:tag, all fields needed */
    if (f->f[2] == NUL || f->f[3] == NUL || f->f[4] == NUL || f->f[5] == NUL) return -1;
    int64_t recv_row = scanner_row_of(s, f->rtask, f->rthread);
    if (row < 0 || recv_row < 0) return -1;
    return scanner_comm(s, row, f->time, f->f[0], recv_row, f->f[2], f->f[3], f->f[4], f->f[5]);
}

/* The records of the current group into the scanner, as scanning format_group's text would
 * put them (lines and malformed lines counted likewise); -1 out of memory. */
static int scan_group(Merger *m, Scanner *s) {
    long long lines = 0, bad = 0;
    for (size_t gi = 0; gi < m->gn; gi++) {
        const FRec *f = &m->group[m->gidx[gi]];
        if (record_dropped(f)) {
            m->dropped++;
            continue;
        }
        int starts_line = !continues_line(m, f);
        record_written(m, f);
        lines += starts_line;
        int rc = scan_record(m, s, f, starts_line);
        if (rc == -2) return -1;
        bad += rc == -1;
    }
    scanner_count(s, lines, bad);
    return 0;
}

static int group_add(Merger *m, MSource *s) {
    if (m->gn == m->gcap) {
        size_t cap = m->gcap ? m->gcap * 2 : 1024;
        FRec *g = realloc(m->group, cap * sizeof *g);
        uint32_t *i1 = realloc(m->gidx, cap * sizeof *i1);
        if (i1) m->gidx = i1;
        uint32_t *i2 = realloc(m->gtmp, cap * sizeof *i2);
        if (i2) m->gtmp = i2;
        if (!g || !i1 || !i2) {
            if (g) m->group = g;
            return -1;
        }
        m->group = g;
        m->gcap = cap;
    }
    FRec *f = &m->group[m->gn];
    *f = s->head;
    if (f->tlen) {
        if (buf_reserve(&m->gtext, f->tlen) < 0) return -1;
        f->toff = m->gtext.n;
        memcpy(m->gtext.p + m->gtext.n, s->head_text, f->tlen);
        m->gtext.n += f->tlen;
    }
    m->gidx[m->gn] = (uint32_t)m->gn;
    m->gn++;
    return 0;
}

/* Gather the records of the next time (group) in merge-key order, from the sources in `take`
 * (room for every source); 0 or an errno. Needs a live source (hn > 0). */
static int merge_group(Merger *m, int *take) {
    int64_t t = m->srcs[m->heap[0]].head.time;
    int nt = 0;
    while (m->hn > 0 && m->srcs[m->heap[0]].head.time == t) take[nt++] = heap_pop(m);
    /* sources in index order: ties keep source order (the heap already pops that way) */
    m->gn = 0;
    m->gtext.n = 0;
    for (int k = 0; k < nt; k++) {
        MSource *s = &m->srcs[take[k]];
        while (s->live && s->head.time == t) {
            if (group_add(m, s) < 0) return ENOMEM;
            if (msrc_next(m, s) < 0) return m->err;
        }
        if (s->live) heap_push(m, take[k]);
    }
    group_sort(m, 0, m->gn);
    m->last_time = t;
    return 0;
}

static PyObject *merge_error(Merger *m, int err) {
    errno = err;
    if (err == ENOMEM) return PyErr_NoMemory();
    if (m->errpath[0]) return PyErr_SetFromErrnoWithFilename(PyExc_OSError, m->errpath);
    return PyErr_SetFromErrno(PyExc_OSError);
}

/* next(max_bytes) -> a memoryview of whole lines, or None at the end. The view is valid until
 * the call after the next one (results alternate between two buffers), so a caller can write
 * one block while the next is being formatted. */
static PyObject *Merger_next(Merger *self, PyObject *args) {
    Py_ssize_t max_bytes = 8 << 20;
    if (!PyArg_ParseTuple(args, "|n", &max_bytes)) return NULL;
    Buf out = self->outbuf[self->which];
    out.n = 0;
    if (buf_reserve(&out, (size_t)max_bytes + 65536) < 0) return PyErr_NoMemory();
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    int *take = malloc((size_t)(self->nsrc + 1) * sizeof *take);
    if (!take) err = ENOMEM;
    while (!err && self->hn > 0 && out.n < (size_t)max_bytes) {
        err = merge_group(self, take);
        if (!err && format_group(self, &out) < 0) err = ENOMEM;
    }
    free(take);
    Py_END_ALLOW_THREADS
    self->outbuf[self->which] = out;
    if (err) return merge_error(self, err);
    if (out.n == 0) {
        if (self->started == 1) {
            /* the last line's newline */
            self->started = 2;
            return PyBytes_FromStringAndSize("\n", 1);
        }
        Py_RETURN_NONE;
    }
    PyObject *res = PyMemoryView_FromMemory(out.p, (Py_ssize_t)out.n, PyBUF_READ);
    self->which ^= 1;
    return res;
}

/* scan(scanner, max_records) -> the number of records merged (0 at the end): the next groups,
 * until at least max_records, go straight into a reading PrvScanner's columns as scanning
 * the lines next() would format gives them (the same lines counted, the same malformed
 * lines counted in its `bad`), without the text. A merger is read with next() or scan(),
 * not both. */
static PyObject *Merger_scan(Merger *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t max_records;
    if (!PyArg_ParseTuple(args, "On", &obj, &max_records)) return NULL;
    if (max_records < 1) {
        PyErr_SetString(PyExc_ValueError, "max_records must be positive");
        return NULL;
    }
    Scanner *scanner = scanner_for_records(obj);
    if (!scanner) return NULL;
    Py_INCREF(obj); /* in use without the GIL */
    long long handled = 0;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    int *take = malloc((size_t)(self->nsrc + 1) * sizeof *take);
    if (!take) err = ENOMEM;
    while (!err && self->hn > 0 && handled < max_records) {
        err = merge_group(self, take);
        if (!err && scan_group(self, scanner) < 0) err = ENOMEM;
        handled += (long long)self->gn;
    }
    free(take);
    Py_END_ALLOW_THREADS
    Py_DECREF(obj);
    if (err) return merge_error(self, err);
    return PyLong_FromLongLong(handled);
}

static int take_i64(PyObject *obj, int64_t **dst, Py_ssize_t n, const char *what) {
    Arr a;
    if (arr_get(obj, &a, 8, what) < 0) { arr_release(&a); return -1; }
    if (arr_len(&a) != n) {
        arr_release(&a);
        PyErr_Format(PyExc_ValueError, "%s: expected %zd entries", what, n);
        return -1;
    }
    *dst = malloc((size_t)(n ? n : 1) * sizeof **dst);
    if (!*dst) { arr_release(&a); PyErr_NoMemory(); return -1; }
    memcpy(*dst, a.view.buf, (size_t)n * sizeof **dst);
    arr_release(&a);
    return 0;
}

static int take_map(PyObject *keys, PyObject *vals, Map *m, const char *what) {
    Arr k, v;
    memset(&k, 0, sizeof k);
    memset(&v, 0, sizeof v);
    int rc = -1;
    if (arr_get(keys, &k, 8, what) < 0 || arr_get(vals, &v, 8, what) < 0) goto done;
    if (arr_len(&k) != arr_len(&v)) {
        PyErr_Format(PyExc_ValueError, "%s: keys and values differ in length", what);
        goto done;
    }
    if (map_build(m, k.view.buf, v.view.buf, (size_t)arr_len(&k)) < 0) { PyErr_NoMemory(); goto done; }
    rc = 0;
done:
    arr_release(&k);
    arr_release(&v);
    return rc;
}

/* Merger(runs, reports, memory_sources, lo, hi, max_open=0)
 *   runs: [(path, report index, start offset, end offset or -1)]
 *   reports: [(shift, order, cpu, task, thread, type_keys, type_vals, fam_keys, fam_vals,
 *              value_keys, value_vals, move_keys, move_rows[, text_srcs])]  (row arrays have
 *              n_local + 1; text_srcs: bit s set when the text pairs of events of src s carry
 *              names, renumbered as the (a, b) pair: a sample's callers)
 *   memory_sources: [(20 int64 columns in M_* order, text offsets or None, text or None)] */
static int Merger_init(Merger *self, PyObject *args, PyObject *kw) {
    PyObject *runs, *reports, *mems;
    long long lo, hi;
    int max_open = 0;
    if (!PyArg_ParseTuple(args, "O!O!O!LL|i", &PyList_Type, &runs, &PyList_Type, &reports,
                          &PyList_Type, &mems, &lo, &hi, &max_open))
        return -1;
    self->lo = lo;
    self->hi = hi;
    self->keep = PyList_New(0);
    if (!self->keep) return -1;
    self->nreps = (int)PyList_GET_SIZE(reports);
    self->reps = calloc((size_t)self->nreps + 1, sizeof *self->reps);
    if (!self->reps) { PyErr_NoMemory(); return -1; }
    for (int i = 0; i < self->nreps; i++) {
        PyObject *t = PyList_GET_ITEM(reports, i);
        long long shift;
        unsigned long long text_srcs = 0;
        PyObject *ord, *cpu, *task, *thr, *tk, *tv, *fk, *fv, *vk, *vv, *mk, *mvv;
        if (!PyArg_ParseTuple(t, "LOOOOOOOOOOOO|K", &shift, &ord, &cpu, &task, &thr, &tk, &tv, &fk,
                              &fv, &vk, &vv, &mk, &mvv, &text_srcs))
            return -1;
        ReportMap *r = &self->reps[i];
        r->shift = shift;
        r->text_srcs = (uint64_t)text_srcs;
        Arr probe;
        if (arr_get(ord, &probe, 8, "order") < 0) { arr_release(&probe); return -1; }
        r->nrows = arr_len(&probe) - 1;
        arr_release(&probe);
        if (r->nrows < 0) { PyErr_SetString(PyExc_ValueError, "row arrays need a 'no row' slot"); return -1; }
        if (take_i64(ord, &r->order, r->nrows + 1, "order") < 0 ||
            take_i64(cpu, &r->cpu, r->nrows + 1, "cpu") < 0 ||
            take_i64(task, &r->task, r->nrows + 1, "task") < 0 ||
            take_i64(thr, &r->thread, r->nrows + 1, "thread") < 0 ||
            take_map(tk, tv, &r->types, "types") < 0 || take_map(fk, fv, &r->fams, "families") < 0 ||
            take_map(vk, vv, &r->values, "values") < 0 || take_map(mk, mvv, &r->moves, "moves") < 0)
            return -1;
    }
    Py_ssize_t nruns = PyList_GET_SIZE(runs), nmem = PyList_GET_SIZE(mems);
    self->nsrc = (int)(nruns + nmem);
    self->srcs = calloc((size_t)self->nsrc + 1, sizeof *self->srcs);
    self->heap = malloc(((size_t)self->nsrc + 1) * sizeof *self->heap);
    self->ring = malloc(((size_t)self->nsrc + 1) * sizeof *self->ring);
    /* max_open 0: every run file open at once */
    self->max_open = max_open > 0 ? max_open : (int)nruns + 1;
    for (int i = 0; i < self->nsrc; i++) self->srcs[i].fd = -1;
    self->arrs = calloc((size_t)nmem * 22 + 1, sizeof *self->arrs);
    if (!self->srcs || !self->heap || !self->arrs || !self->ring) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < nruns; i++) {
        const char *path;
        int rep;
        long long start, end;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(runs, i), "siLL", &path, &rep, &start, &end)) return -1;
        if (rep < 0 || rep >= self->nreps) { PyErr_SetString(PyExc_ValueError, "bad report index"); return -1; }
        MSource *s = &self->srcs[i];
        s->index = (int)i;
        s->rep = rep;
        s->is_run = 1;
        s->path = strdup(path);
        if (!s->path) { PyErr_NoMemory(); return -1; }
        if (msrc_open(self, s) < 0) { PyErr_SetFromErrnoWithFilename(PyExc_OSError, path); return -1; }
        char magic[8];
        if (read_at(s->fd, magic, 8, 0) != 8 || memcmp(magic, RUN_MAGIC, 8) != 0) {
            PyErr_Format(PyExc_ValueError, "%s: not a run file of this nsys2prv version", path);
            return -1;
        }
        s->offset = start > 8 ? start : 8;
        s->end_offset = end;
    }
    for (Py_ssize_t i = 0; i < nmem; i++) {
        PyObject *cols, *toffs, *tdata;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(mems, i), "OOO", &cols, &toffs, &tdata)) return -1;
        MSource *s = &self->srcs[nruns + i];
        s->index = (int)(nruns + i);
        if (!PySequence_Check(cols) || PySequence_Size(cols) != MC_NCOLS) {
            PyErr_SetString(PyExc_ValueError, "memory source: 20 columns expected");
            return -1;
        }
        Py_ssize_t n = -1;
        for (int k = 0; k < MC_NCOLS; k++) {
            PyObject *c = PySequence_GetItem(cols, k);
            if (!c) return -1;
            Arr *a = &self->arrs[self->narrs++];
            int rc = arr_get(c, a, 8, "memory source column");
            Py_DECREF(c);
            if (rc < 0) return -1;
            if (n < 0) n = arr_len(a);
            else if (arr_len(a) != n) { PyErr_SetString(PyExc_ValueError, "memory source: ragged"); return -1; }
            s->mcol[k] = a->view.buf;
        }
        s->mem_n = n;
        if (toffs != Py_None) {
            Arr *a = &self->arrs[self->narrs++];
            if (arr_get(toffs, a, 8, "text offsets") < 0) return -1;
            s->toffs = a->view.buf;
            a = &self->arrs[self->narrs++];
            if (arr_get(tdata, a, 1, "text") < 0) return -1;
            s->tdata = a->view.buf;
        }
    }
    /* first heads */
    for (int i = 0; i < self->nsrc; i++) {
        if (msrc_next(self, &self->srcs[i]) < 0) {
            errno = self->err;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (self->srcs[i].live) heap_push(self, i);
    }
    return 0;
}

static PyObject *Merger_get_dropped(Merger *self, void *c) { return PyLong_FromLongLong(self->dropped); }
static PyObject *Merger_get_written(Merger *self, void *c) { return PyLong_FromLongLong(self->written); }
static PyObject *Merger_get_last_time(Merger *self, void *c) { return PyLong_FromLongLong(self->last_time); }
static PyObject *Merger_get_reopened(Merger *self, void *c) { return PyLong_FromLongLong(self->reopened); }
static PyObject *Merger_get_done(Merger *self, void *c) { return PyBool_FromLong(self->hn == 0); }

static PyMethodDef Merger_methods[] = {
    {"next", (PyCFunction)Merger_next, METH_VARARGS,
     "next(max_bytes) -> the next .prv lines (bytes), or None at the end"},
    {"scan", (PyCFunction)Merger_scan, METH_VARARGS,
     "scan(scanner, max_records) -> records merged into a PrvScanner's columns (at least "
     "max_records, whole times), as scanning next()'s text would put them; 0 at the end"},
    {NULL}};

static PyGetSetDef Merger_getset[] = {
    {"dropped", (getter)Merger_get_dropped, NULL, "records with unresolved fields", NULL},
    {"written", (getter)Merger_get_written, NULL, "records written", NULL},
    {"last_time", (getter)Merger_get_last_time, NULL, "trace time of the last group", NULL},
    {"reopened", (getter)Merger_get_reopened, NULL,
     "run files opened again after their descriptor was closed to stay within max_open", NULL},
    {"done", (getter)Merger_get_done, NULL, "every record merged", NULL},
    {NULL}};

static PyTypeObject MergerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nsys2prv.engine._engine.Merger",
    .tp_basicsize = sizeof(Merger),
    .tp_dealloc = (destructor)Merger_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "k-way merge of run files and trace-wide sources into .prv text",
    .tp_methods = Merger_methods,
    .tp_getset = Merger_getset,
    .tp_init = (initproc)Merger_init,
    .tp_new = PyType_GenericNew,
};

/* ================================================================== module ============ */

int scan_register(PyObject *m); /* _scan.c */
int graph_register(PyObject *m); /* _graph.c */
int timeline_register(PyObject *m); /* _timeline.c */

static struct PyModuleDef engine_module = {
    PyModuleDef_HEAD_INIT, "_engine",
    "nsys2prv's compiled engine: record stores, tiling, merge and .prv formatting", -1, NULL};

PyMODINIT_FUNC PyInit__engine(void) {
    if (PyType_Ready(&RecordStoreType) < 0 || PyType_Ready(&IntervalStoreType) < 0 ||
        PyType_Ready(&MergerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&engine_module);
    if (!m) return NULL;
    Py_INCREF(&RecordStoreType);
    Py_INCREF(&IntervalStoreType);
    Py_INCREF(&MergerType);
    if (PyModule_AddObject(m, "RecordStore", (PyObject *)&RecordStoreType) < 0 ||
        PyModule_AddObject(m, "IntervalStore", (PyObject *)&IntervalStoreType) < 0 ||
        PyModule_AddObject(m, "Merger", (PyObject *)&MergerType) < 0)
        return NULL;
    if (scan_register(m) < 0) return NULL;
    if (graph_register(m) < 0) return NULL;
    if (timeline_register(m) < 0) return NULL;
    PyModule_AddObject(m, "NUL", PyLong_FromLongLong(NUL));
    return m;
}
