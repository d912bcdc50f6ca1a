/*
 * Sweeps of the analysis over one time window of a trace (nsys2prv/analysis/timeline.py):
 * each record is touched once, without the GIL. The analysis did these as sorts, joins and
 * windowed sums in polars, a few times over every event of every window; here they are one
 * pass in time order (the order of a window's events and states: Paraver's file order).
 *
 * Event semantics are Paraver's Last Evt Val: on a row, a set of event types is "open" from
 * an event of the set with a value != 0 until the next event of the set on the row (or the
 * window's end). A type may belong to several sets (`set_bits`, a bitmask per type).
 *
 * group_sweep   per group of rows (a GPU device, a process): how many of its rows have each
 *               set open, summed over time into the efficiency model's classes (useful,
 *               communication, active, overlap levels), and the maximal runs in which any
 *               row of the group has set ACTIVE open (what the idle analysis calls active).
 *
 * row_timeline  per row of a few (host threads): the row's time cut where its state or its
 *               open call sets change, each piece put in a bin = (state, open sets) and
 *               summed per row; and, for queries (row, a, b), the time of each column of a
 *               bin -> column map between a and b (the causes of a GPU gap on the host
 *               thread that launched the work after it).
 *
 * Spans         every activity of a trace as one span, paired across windows: a value
 *               event and the next event of its (row, type) (kernels, memory operations,
 *               NVTX start/end lanes; a kernel takes the full-name event at its start), or
 *               a push and its pop (NVTX push/pop types nest).
 *
 * enclosing     the nesting of ranges on their rows as Nsight Systems nests NVTX ranges
 *               (the shortest range that contains each): the levels of the ranges projected
 *               onto the GPU (analysis/projection.py).
 *
 * last_events   the last event of each (row, type) of a window: what is carried into the
 *               next one.
 *
 * Gaps          the holes between a device's active runs across windows, each with the
 *               host row of the launch arrow that reaches the device at the gap's end.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_views.h"

#define NONE INT64_MIN

/* the set bits of an event type: types sorted, k of them (a handful: binary search) */
static inline int bits_of(const int64_t *types, const uint8_t *bits, Py_ssize_t k, int64_t t) {
    Py_ssize_t lo = 0, hi = k;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (types[mid] < t) lo = mid + 1;
        else hi = mid;
    }
    return (lo < k && types[lo] == t) ? bits[lo] : 0;
}

/* a 64-bit hash (the hash tables of Spans, last_events and Gaps) */
static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* ================================================================ group_sweep ======= */

/* set bits of group_sweep and the columns it sums per group */
enum { G_KERNEL = 1, G_COMPUTE = 2, G_NCCL = 4, G_ACTIVE = 8 };
enum { S_USEFUL_TALP, S_COMM_TALP, S_USEFUL_NCCL, S_COMM_NCCL, S_ACTIVE, S_NCCL_TIME,
       S_HIDDEN_COMM, S_L1, S_L2, S_L3, S_LC1, S_LC2, S_LC3, NSUMS };

typedef struct {
    int32_t k, c, n, a;  /* rows of the group with each set open */
    int64_t last;        /* time of the group's last event (NONE: none yet) */
    int64_t run_s, run_e; /* the run of ACTIVE being extended (run_s NONE: none) */
} Group;

typedef struct {
    int64_t *p;
    size_t n, cap; /* in int64 */
} I64s;

/* room for k more values (the capacity doubles) */
static int i64s_reserve(I64s *v, size_t k) {
    if (v->n + k <= v->cap) return 0;
    size_t cap = v->cap ? v->cap * 2 : 3 * 4096;
    while (cap < v->n + k) cap *= 2;
    int64_t *p = realloc(v->p, cap * sizeof *p);
    if (!p) return -1;
    v->p = p;
    v->cap = cap;
    return 0;
}

static int i64s_push3(I64s *v, int64_t a, int64_t b, int64_t c) {
    if (i64s_reserve(v, 3) < 0) return -1;
    v->p[v->n++] = a;
    v->p[v->n++] = b;
    v->p[v->n++] = c;
    return 0;
}

static int i64s_push4(I64s *v, int64_t a, int64_t b, int64_t c, int64_t d) {
    if (i64s_reserve(v, 4) < 0) return -1;
    v->p[v->n++] = a;
    v->p[v->n++] = b;
    v->p[v->n++] = c;
    v->p[v->n++] = d;
    return 0;
}

/* add `dur` to the sums of group g as its counts stand, and extend its ACTIVE run */
static int group_account(Group *gr, int64_t *sums, int64_t g, int64_t s, int64_t e, I64s *runs) {
    int64_t dur = e - s;
    if (dur <= 0) return 0;
    int64_t *o = sums + g * NSUMS;
    int32_t k = gr->k, c = gr->c, n = gr->n, a = gr->a;
    if (k > 0) o[S_USEFUL_TALP] += dur;
    if (a > 0 && k == 0) o[S_COMM_TALP] += dur;
    if (c > 0) o[S_USEFUL_NCCL] += dur;
    if (a > 0 && c == 0) o[S_COMM_NCCL] += dur;
    if (a > 0) o[S_ACTIVE] += dur;
    if (n > 0) o[S_NCCL_TIME] += dur;
    if (n > 0 && c > 0) o[S_HIDDEN_COMM] += dur;
    if (k > 0) {
        int lv = k > 3 ? 3 : k;
        o[S_L1 + lv - 1] += dur;
        if (n > 0) o[S_LC1 + lv - 1] += dur;
    }
    if (a > 0) {
        if (gr->run_s != NONE && gr->run_e == s) gr->run_e = e;
        else {
            if (gr->run_s != NONE && i64s_push3(runs, g, gr->run_s, gr->run_e) < 0) return -1;
            gr->run_s = s;
            gr->run_e = e;
        }
    }
    return 0;
}

/* group_sweep(ev_row, ev_time, ev_type, ev_value, group_of_row, set_types, set_bits, end,
 *             sums) -> bytes of the ACTIVE runs, (group, start, end) int64 triples in the
 * order they closed. sums: int64 [ngroups * NSUMS], added to. */
static PyObject *group_sweep(PyObject *self, PyObject *args) {
    PyObject *o[9];
    long long end;
    if (!PyArg_ParseTuple(args, "OOOOOOOLO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &end, &o[7]))
        return NULL;
    View b[8];
    memset(b, 0, sizeof b);
    static const Py_ssize_t size[8] = {4, 8, 8, 8, 4, 8, 1, 8};
    static const char *names[8] = {"ev_row", "ev_time", "ev_type", "ev_value", "group_of_row",
                                   "set_types", "set_bits", "sums"};
    for (int i = 0; i < 8; i++)
        if (view_get(o[i], &b[i], size[i], i == 7, names[i]) < 0) {
            views_release(b, 8);
            return NULL;
        }
    Py_ssize_t n = view_len(&b[0]), nrows = view_len(&b[4]), k = view_len(&b[5]);
    Py_ssize_t ngroups = view_len(&b[7]) / NSUMS;
    if (view_len(&b[1]) != n || view_len(&b[2]) != n || view_len(&b[3]) != n ||
        view_len(&b[6]) != k) {
        views_release(b, 8);
        PyErr_SetString(PyExc_ValueError, "group_sweep: column lengths differ");
        return NULL;
    }
    const int32_t *row = b[0].view.buf, *group_of = b[4].view.buf;
    const int64_t *time = b[1].view.buf, *type = b[2].view.buf, *value = b[3].view.buf;
    const int64_t *types = b[5].view.buf;
    const uint8_t *bits = b[6].view.buf;
    int64_t *sums = b[7].view.buf;
    uint8_t *flags = calloc((size_t)(nrows ? nrows : 1), 1);
    Group *groups = malloc((size_t)(ngroups ? ngroups : 1) * sizeof *groups);
    I64s runs = {0};
    int err = 0; /* 1: no memory, 2: a group out of range, 3: times not sorted */
    if (!flags || !groups) err = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t g = 0; !err && g < ngroups; g++) {
        groups[g] = (Group){0, 0, 0, 0, NONE, NONE, NONE};
    }
    int64_t prev_time = NONE;
    for (Py_ssize_t i = 0; !err && i < n; i++) {
        int m = bits_of(types, bits, k, type[i]);
        if (!m) continue;
        int32_t r = row[i];
        if (r < 0 || r >= nrows) continue;
        int32_t g = group_of[r];
        if (g < 0) continue;
        if (g >= ngroups) { err = 2; break; }
        int64_t t = time[i];
        if (prev_time != NONE && t < prev_time) { err = 3; break; }
        prev_time = t;
        Group *gr = &groups[g];
        if (gr->last != NONE && group_account(gr, sums, g, gr->last, t, &runs) < 0) { err = 1; break; }
        gr->last = t;
        uint8_t old = flags[r];
        uint8_t now = (uint8_t)((old & ~m) | (value[i] != 0 ? m : 0));
        uint8_t ch = old ^ now;
        if (ch) {
            int d;
            if (ch & G_KERNEL) { d = (now & G_KERNEL) ? 1 : -1; gr->k += d; }
            if (ch & G_COMPUTE) { d = (now & G_COMPUTE) ? 1 : -1; gr->c += d; }
            if (ch & G_NCCL) { d = (now & G_NCCL) ? 1 : -1; gr->n += d; }
            if (ch & G_ACTIVE) { d = (now & G_ACTIVE) ? 1 : -1; gr->a += d; }
            flags[r] = now;
        }
    }
    for (Py_ssize_t g = 0; !err && g < ngroups; g++) {
        Group *gr = &groups[g];
        if (gr->last != NONE && end > gr->last &&
            group_account(gr, sums, g, gr->last, end, &runs) < 0) { err = 1; break; }
        if (gr->run_s != NONE && i64s_push3(&runs, g, gr->run_s, gr->run_e) < 0) { err = 1; break; }
    }
    Py_END_ALLOW_THREADS
    free(flags);
    free(groups);
    views_release(b, 8);
    if (err) {
        free(runs.p);
        if (err == 1) return PyErr_NoMemory();
        PyErr_SetString(PyExc_ValueError, err == 2 ? "group_sweep: a group out of range"
                                                   : "group_sweep: events not sorted by time");
        return NULL;
    }
    PyObject *res = PyBytes_FromStringAndSize((const char *)runs.p,
                                              (Py_ssize_t)(runs.n * sizeof(int64_t)));
    free(runs.p);
    return res;
}

/* ================================================================ row_timeline ====== */

/* state index of a bin: 0 no state yet, 1 after a state ended, 2 + state for states in
 * [0, nst), nst + 2 for any other state value */
#define ST_NONE 0
#define ST_ENDED 1

typedef struct {
    int64_t t;
    int64_t q;    /* query index */
    int sign;     /* +1 at b, -1 at a */
} Endpoint;

static int endpoint_less(const void *x, const void *y) {
    const Endpoint *a = x, *b = y;
    if (a->t != b->t) return a->t < b->t ? -1 : 1;
    return a->q < b->q ? -1 : a->q > b->q;
}

/* counting sort of record indices by slot (stable): order[] gets the indices of slot s in
 * [start[s], start[s+1]); records with a slot < 0 are left out */
static int by_slot(const int32_t *slot_of_rec, Py_ssize_t n, Py_ssize_t nslots, int64_t **start_out,
                   int64_t **order_out) {
    int64_t *start = calloc((size_t)nslots + 2, sizeof *start);
    if (!start) return -1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (slot_of_rec[i] >= 0) start[slot_of_rec[i] + 1]++;
    for (Py_ssize_t s = 0; s < nslots; s++) start[s + 1] += start[s];
    int64_t *order = malloc((size_t)(start[nslots] ? start[nslots] : 1) * sizeof *order);
    int64_t *fill = malloc(((size_t)nslots + 1) * sizeof *fill);
    if (!order || !fill) { free(start); free(order); free(fill); return -1; }
    memcpy(fill, start, ((size_t)nslots + 1) * sizeof *fill);
    for (Py_ssize_t i = 0; i < n; i++)
        if (slot_of_rec[i] >= 0) order[fill[slot_of_rec[i]]++] = i;
    free(fill);
    *start_out = start;
    *order_out = order;
    return 0;
}

typedef struct {
    /* inputs */
    const int32_t *st_row, *st_state, *ev_row, *q_row;
    const int64_t *st_begin, *st_end, *ev_time, *ev_type, *ev_value, *q_a, *q_b;
    const int32_t *slot_of_row;
    Py_ssize_t nrows, nslots, nst, nsets;
    const int64_t *set_types;
    const uint8_t *set_bits;
    Py_ssize_t nset_types;
    int64_t end;
    const int8_t *bin_col; /* queries: column of each bin (-1: none) */
    Py_ssize_t ncols;
    /* outputs */
    int64_t *row_bins; /* [nslots * nbins], added to (NULL: not wanted) */
    int64_t *opens;    /* [nslots * nsets]: intervals of positive length of each set */
    int64_t *q_out;    /* [nq * ncols] */
} Timeline;

static inline Py_ssize_t state_index(const Timeline *tl, int64_t st) {
    return (st >= 0 && st < tl->nst) ? (Py_ssize_t)st + 2 : tl->nst + 2;
}

/* One slot's walk: states (indices into the state columns, by begin), call events (indices,
 * in time order) and query endpoints (by time). */
static void walk(const Timeline *tl, Py_ssize_t slot, const int64_t *si, Py_ssize_t ns,
                 const int64_t *ei, Py_ssize_t ne, const Endpoint *ep, Py_ssize_t nep,
                 int64_t *cum) {
    Py_ssize_t nsets = tl->nsets;
    int64_t *bins = tl->row_bins ? tl->row_bins + slot * ((tl->nst + 3) << nsets) : NULL;
    int64_t *opens = tl->opens ? tl->opens + slot * nsets : NULL;
    int64_t open_since[8];
    unsigned flags = 0;
    for (int s = 0; s < 8; s++) open_since[s] = NONE;
    Py_ssize_t st = ST_NONE;
    int64_t state_end = NONE; /* end of the state the row is in (NONE: in none) */
    Py_ssize_t a = 0, c = 0, e = 0;
    int64_t prev = NONE;
    if (cum) memset(cum, 0, (size_t)tl->ncols * sizeof *cum);
    for (;;) {
        int64_t tb = a < ns ? tl->st_begin[si[a]] : INT64_MAX;
        int64_t te = state_end != NONE ? state_end : INT64_MAX;
        int64_t tc = c < ne ? tl->ev_time[ei[c]] : INT64_MAX;
        int64_t tz = flags ? tl->end : INT64_MAX;
        int64_t t = tb < te ? tb : te;
        if (tc < t) t = tc;
        if (tz < t) t = tz;
        if (t == INT64_MAX) break;
        if (prev != NONE && t > prev) {
            Py_ssize_t bin = (st << nsets) | (Py_ssize_t)flags;
            int col = tl->bin_col ? tl->bin_col[bin] : -1;
            /* query endpoints inside [prev, t): the sums so far plus the part before them */
            for (; e < nep && ep[e].t < t; e++) {
                int64_t *out = tl->q_out + ep[e].q * tl->ncols;
                int64_t part = ep[e].t > prev ? ep[e].t - prev : 0;
                for (Py_ssize_t k = 0; k < tl->ncols; k++)
                    out[k] += ep[e].sign * (cum[k] + (k == col ? part : 0));
            }
            if (bins) bins[bin] += t - prev;
            if (col >= 0 && cum) cum[col] += t - prev;
        }
        /* endpoints before the row's first change, or at it: nothing summed before them */
        for (; e < nep && ep[e].t <= t && prev == NONE; e++) {
            int64_t *out = tl->q_out + ep[e].q * tl->ncols;
            for (Py_ssize_t k = 0; k < tl->ncols; k++) out[k] += ep[e].sign * cum[k];
        }
        /* the changes at t: a state's end, then states beginning (the last one wins, as
         * Paraver's file order gives), then the calls */
        if (te == t) {
            st = ST_ENDED;
            state_end = NONE;
        }
        while (a < ns && tl->st_begin[si[a]] == t) {
            int64_t i = si[a++];
            st = state_index(tl, tl->st_state[i]);
            state_end = tl->st_end[i] > t ? tl->st_end[i] : NONE;
        }
        while (c < ne && tl->ev_time[ei[c]] == t) {
            int64_t i = ei[c++];
            unsigned m = (unsigned)bits_of(tl->set_types, tl->set_bits, tl->nset_types,
                                           tl->ev_type[i]);
            int on = tl->ev_value[i] != 0;
            for (Py_ssize_t s = 0; s < nsets; s++) {
                if (!(m & (1u << s))) continue;
                if ((flags & (1u << s)) && opens && t > open_since[s]) opens[s]++;
                if (on) {
                    flags |= 1u << s;
                    open_since[s] = t;
                } else
                    flags &= ~(1u << s);
            }
        }
        if (tz == t) { /* the window's end closes what is open */
            for (Py_ssize_t s = 0; s < nsets; s++)
                if ((flags & (1u << s)) && opens && t > open_since[s]) opens[s]++;
            flags = 0;
        }
        prev = t;
    }
    /* endpoints after the row's last change: everything summed */
    for (; e < nep; e++) {
        int64_t *out = tl->q_out + ep[e].q * tl->ncols;
        for (Py_ssize_t k = 0; k < tl->ncols; k++) out[k] += ep[e].sign * cum[k];
    }
}

/* row_timeline(st_row, st_begin, st_end, st_state, ev_row, ev_time, ev_type, ev_value,
 *              slot_of_row, nst, set_types, set_bits, nsets, end, row_bins, opens,
 *              q_row, q_a, q_b, bin_col, q_out)
 * Rows with slot_of_row[row] >= 0 are walked; a bin is (state index << nsets) | open sets,
 * (nst + 3) << nsets of them per slot. row_bins [nslots * nbins] and opens [nslots * nsets]
 * are added to (None: not wanted); with queries (None: none), q_out [nq * ncols] gets the
 * time of each column between q_a and q_b on q_row (bin_col: the column of each bin). */
static PyObject *row_timeline(PyObject *self, PyObject *args) {
    PyObject *o[21];
    long long nst, nsets, end;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOLOOLLOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7], &o[8], &nst, &o[10], &o[11], &nsets, &end, &o[14],
                          &o[15], &o[16], &o[17], &o[18], &o[19], &o[20]))
        return NULL;
    if (nsets < 0 || nsets > 8 || nst < 0 || nst > 4096) {
        PyErr_SetString(PyExc_ValueError, "row_timeline: at most 8 sets and 4096 states");
        return NULL;
    }
    enum { STR, STB, STE, STS, EVR, EVT, EVY, EVV, SLOT, TYPES, BITS, BINS, OPENS, QR, QA, QB,
           BCOL, QOUT, NB };
    PyObject *objs[NB] = {o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7], o[8], o[10], o[11],
                          o[14], o[15], o[16], o[17], o[18], o[19], o[20]};
    static const Py_ssize_t size[NB] = {4, 8, 8, 4, 4, 8, 8, 8, 4, 8, 1, 8, 8, 4, 8, 8, 1, 8};
    static const char *names[NB] = {"st_row", "st_begin", "st_end", "st_state", "ev_row",
                                    "ev_time", "ev_type", "ev_value", "slot_of_row",
                                    "set_types", "set_bits", "row_bins", "opens", "q_row",
                                    "q_a", "q_b", "bin_col", "q_out"};
    View b[NB];
    memset(b, 0, sizeof b);
    for (int i = 0; i < NB; i++)
        if (view_get(objs[i], &b[i], size[i], i == BINS || i == OPENS || i == QOUT, names[i]) < 0) {
            views_release(b, NB);
            return NULL;
        }
    Timeline tl = {0};
    Py_ssize_t nstates = view_len(&b[STR]), nev = view_len(&b[EVR]), nq = view_len(&b[QR]);
    tl.nrows = view_len(&b[SLOT]);
    tl.nst = nst;
    tl.nsets = nsets;
    tl.end = end;
    tl.nset_types = view_len(&b[TYPES]);
    Py_ssize_t nbins = (nst + 3) << nsets;
    tl.nslots = 0;
    const int32_t *slot_of = b[SLOT].view.buf;
    for (Py_ssize_t r = 0; r < tl.nrows; r++)
        if (slot_of[r] >= tl.nslots) tl.nslots = slot_of[r] + 1;
    int bad = view_len(&b[STB]) != nstates || view_len(&b[STE]) != nstates ||
              view_len(&b[STS]) != nstates ||
              view_len(&b[EVT]) != nev || view_len(&b[EVY]) != nev || view_len(&b[EVV]) != nev ||
              view_len(&b[BITS]) != tl.nset_types ||
              (b[BINS].held && view_len(&b[BINS]) < tl.nslots * nbins) ||
              (b[OPENS].held && view_len(&b[OPENS]) < tl.nslots * nsets) ||
              (nq && (view_len(&b[QA]) != nq || view_len(&b[QB]) != nq || !b[BCOL].held ||
                      view_len(&b[BCOL]) != nbins || !b[QOUT].held));
    if (!bad && nq) {
        tl.ncols = view_len(&b[QOUT]) / nq;
        bad = tl.ncols * nq != view_len(&b[QOUT]);
    }
    if (bad) {
        views_release(b, NB);
        PyErr_SetString(PyExc_ValueError, "row_timeline: column lengths differ");
        return NULL;
    }
    tl.st_row = b[STR].view.buf; tl.st_begin = b[STB].view.buf; tl.st_end = b[STE].view.buf;
    tl.st_state = b[STS].view.buf;
    tl.ev_row = b[EVR].view.buf; tl.ev_time = b[EVT].view.buf; tl.ev_type = b[EVY].view.buf;
    tl.ev_value = b[EVV].view.buf;
    tl.slot_of_row = slot_of;
    tl.set_types = b[TYPES].view.buf; tl.set_bits = b[BITS].view.buf;
    tl.row_bins = b[BINS].held ? b[BINS].view.buf : NULL;
    tl.opens = b[OPENS].held ? b[OPENS].view.buf : NULL;
    tl.q_row = nq ? b[QR].view.buf : NULL; tl.q_a = nq ? b[QA].view.buf : NULL;
    tl.q_b = nq ? b[QB].view.buf : NULL;
    tl.bin_col = nq ? b[BCOL].view.buf : NULL;
    tl.q_out = nq ? b[QOUT].view.buf : NULL;
    for (Py_ssize_t i = 0; nq && i < nbins; i++)
        if (tl.bin_col[i] >= tl.ncols) {
            views_release(b, NB);
            PyErr_SetString(PyExc_ValueError, "row_timeline: a bin's column out of range");
            return NULL;
        }
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    /* the slot of every record (-1: not walked), then the records of each slot in order */
    int32_t *st_slot = malloc((size_t)(nstates ? nstates : 1) * sizeof *st_slot);
    int32_t *ev_slot = malloc((size_t)(nev ? nev : 1) * sizeof *ev_slot);
    int32_t *q_slot = malloc((size_t)(nq ? nq : 1) * sizeof *q_slot);
    int64_t *st_start = NULL, *st_order = NULL, *ev_start = NULL, *ev_order = NULL;
    Endpoint *ep = malloc((size_t)(nq ? 2 * nq : 1) * sizeof *ep);
    int64_t *ep_start = calloc((size_t)tl.nslots + 2, sizeof *ep_start);
    int64_t *cum = malloc((size_t)(tl.ncols ? tl.ncols : 1) * sizeof *cum);
    if (!st_slot || !ev_slot || !q_slot || !ep || !ep_start || !cum) err = 1;
    for (Py_ssize_t i = 0; !err && i < nstates; i++) {
        int32_t r = tl.st_row[i];
        st_slot[i] = (r >= 0 && r < tl.nrows) ? slot_of[r] : -1;
    }
    for (Py_ssize_t i = 0; !err && i < nev; i++) {
        int32_t r = tl.ev_row[i];  /* the row first: most events are on rows not walked */
        ev_slot[i] = (r >= 0 && r < tl.nrows && slot_of[r] >= 0 &&
                      bits_of(tl.set_types, tl.set_bits, tl.nset_types, tl.ev_type[i]))
                     ? slot_of[r] : -1;
    }
    if (!err && (by_slot(st_slot, nstates, tl.nslots, &st_start, &st_order) < 0 ||
                 by_slot(ev_slot, nev, tl.nslots, &ev_start, &ev_order) < 0))
        err = 1;
    if (!err && nq) {
        /* query endpoints grouped by slot, by time inside a slot */
        for (Py_ssize_t q = 0; q < nq; q++) {
            int32_t r = tl.q_row[q];
            q_slot[q] = (r >= 0 && r < tl.nrows) ? slot_of[r] : -1;
            if (q_slot[q] >= 0) ep_start[q_slot[q] + 1] += 2;
        }
        for (Py_ssize_t s = 0; s < tl.nslots; s++) ep_start[s + 1] += ep_start[s];
        int64_t *fill = malloc(((size_t)tl.nslots + 1) * sizeof *fill);
        if (!fill) err = 1;
        else {
            memcpy(fill, ep_start, ((size_t)tl.nslots + 1) * sizeof *fill);
            for (Py_ssize_t q = 0; q < nq; q++) {
                if (q_slot[q] < 0) continue;
                ep[fill[q_slot[q]]++] = (Endpoint){tl.q_a[q], q, -1};
                ep[fill[q_slot[q]]++] = (Endpoint){tl.q_b[q], q, 1};
            }
            free(fill);
            for (Py_ssize_t s = 0; s < tl.nslots; s++)
                qsort(ep + ep_start[s], (size_t)(ep_start[s + 1] - ep_start[s]), sizeof *ep,
                      endpoint_less);
        }
        memset(tl.q_out, 0, (size_t)(nq * tl.ncols) * sizeof(int64_t));
    }
    for (Py_ssize_t s = 0; !err && s < tl.nslots; s++)
        walk(&tl, s, st_order + st_start[s], st_start[s + 1] - st_start[s],
             ev_order + ev_start[s], ev_start[s + 1] - ev_start[s], ep + ep_start[s],
             ep_start[s + 1] - ep_start[s], nq ? cum : NULL);
    free(st_slot); free(ev_slot); free(q_slot); free(st_start); free(st_order);
    free(ev_start); free(ev_order); free(ep); free(ep_start); free(cum);
    Py_END_ALLOW_THREADS
    views_release(b, NB);
    if (err) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* ================================================================ Spans ============= */

enum { K_FLAT = 1, K_KERNEL = 2, K_STACKED = 3, K_FULL = 4 };

typedef struct {
    int64_t start, value, full; /* start NONE: no span open */
} OpenSpan;

typedef struct {
    int64_t *start, *value;
    int32_t n, cap;
} Stack;

/* one (row, type) seen: a table of them, not rows x types (a thousand ranks' rows times the
 * NVTX lanes and domains would be a dense table of gigabytes) */
typedef struct {
    uint64_t key; /* row << 32 | type index, + 1: 0 = empty */
    OpenSpan open;
    Stack stack;
} Cell;

typedef struct {
    PyObject_HEAD
    int64_t *types;  /* sorted */
    uint8_t *kinds;  /* K_* of each type */
    Py_ssize_t ntypes, nrows;
    Cell *cells;
    size_t cap, used;
    int64_t *full_t, *full_v; /* per row: the last full-name event */
    int kernel_types[2];
    int nkernel;
} Spans;

static void Spans_dealloc(Spans *self) {
    for (size_t i = 0; self->cells && i < self->cap; i++) {
        free(self->cells[i].stack.start);
        free(self->cells[i].stack.value);
    }
    free(self->cells);
    free(self->types);
    free(self->kinds);
    free(self->full_t);
    free(self->full_v);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Cell *cell_slot(Cell *cells, size_t cap, uint64_t key) {
    size_t h = (size_t)mix64(key) & (cap - 1);
    while (cells[h].key && cells[h].key != key) h = (h + 1) & (cap - 1);
    return &cells[h];
}

/* the cell of (row, type index), made when first seen; NULL without memory */
static Cell *spans_cell(Spans *self, int32_t row, Py_ssize_t k) {
    uint64_t key = ((uint64_t)(uint32_t)row << 32 | (uint64_t)k) + 1;
    Cell *c = cell_slot(self->cells, self->cap, key);
    if (c->key) return c;
    if ((self->used + 1) * 2 > self->cap) {
        size_t cap = self->cap * 2;
        Cell *fresh = calloc(cap, sizeof *fresh);
        if (!fresh) return NULL;
        for (size_t i = 0; i < self->cap; i++)
            if (self->cells[i].key) *cell_slot(fresh, cap, self->cells[i].key) = self->cells[i];
        free(self->cells);
        self->cells = fresh;
        self->cap = cap;
        c = cell_slot(self->cells, self->cap, key);
    }
    c->key = key;
    c->open = (OpenSpan){NONE, 0, NONE};
    self->used++;
    return c;
}

/* Spans(types, kinds, nrows): types sorted (int64), kinds (uint8: 1 flat, 2 kernel, 3 stacked,
 * 4 full name), nrows the trace's row count */
static int Spans_init(Spans *self, PyObject *args, PyObject *kw) {
    PyObject *ot, *ok;
    Py_ssize_t nrows;
    if (!PyArg_ParseTuple(args, "OOn", &ot, &ok, &nrows)) return -1;
    View b[2];
    if (view_get(ot, &b[0], 8, 0, "types") < 0 || view_get(ok, &b[1], 1, 0, "kinds") < 0) {
        views_release(b, 2);
        return -1;
    }
    Py_ssize_t k = view_len(&b[0]);
    if (view_len(&b[1]) != k || nrows < 0) {
        views_release(b, 2);
        PyErr_SetString(PyExc_ValueError, "Spans: one kind per type");
        return -1;
    }
    self->ntypes = k;
    self->nrows = nrows;
    self->cap = 1024;
    self->types = malloc((size_t)(k ? k : 1) * sizeof(int64_t));
    self->kinds = malloc((size_t)(k ? k : 1));
    self->cells = calloc(self->cap, sizeof *self->cells);
    self->full_t = malloc((size_t)(nrows ? nrows : 1) * sizeof(int64_t));
    self->full_v = malloc((size_t)(nrows ? nrows : 1) * sizeof(int64_t));
    if (!self->types || !self->kinds || !self->cells || !self->full_t || !self->full_v) {
        views_release(b, 2);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(self->types, b[0].view.buf, (size_t)k * sizeof(int64_t));
    memcpy(self->kinds, b[1].view.buf, (size_t)k);
    views_release(b, 2);
    for (Py_ssize_t i = 1; i < k; i++)
        if (self->types[i] <= self->types[i - 1]) {
            PyErr_SetString(PyExc_ValueError, "Spans: types must be sorted and distinct");
            return -1;
        }
    for (Py_ssize_t r = 0; r < nrows; r++) self->full_t[r] = NONE;
    self->nkernel = 0;
    for (Py_ssize_t i = 0; i < k; i++)
        if (self->kinds[i] == K_KERNEL) {
            if (self->nkernel == 2) {
                PyErr_SetString(PyExc_ValueError, "Spans: at most two kernel types");
                return -1;
            }
            self->kernel_types[self->nkernel++] = (int)i;
        }
    return 0;
}

static int push6(I64s *v, int64_t a, int64_t b, int64_t c, int64_t d, int64_t e, int64_t f) {
    return i64s_push3(v, a, b, c) < 0 || i64s_push3(v, d, e, f) < 0 ? -1 : 0;
}

static int stack_push(Stack *st, int64_t start, int64_t value) {
    if (st->n == st->cap) {
        int32_t cap = st->cap ? st->cap * 2 : 4;
        int64_t *s = realloc(st->start, (size_t)cap * sizeof *s);
        if (!s) return -1;
        st->start = s;
        int64_t *v = realloc(st->value, (size_t)cap * sizeof *v);
        if (!v) return -1;
        st->value = v;
        st->cap = cap;
    }
    st->start[st->n] = start;
    st->value[st->n] = value;
    st->n++;
    return 0;
}

static inline Py_ssize_t type_index(const Spans *s, int64_t t) {
    Py_ssize_t lo = 0, hi = s->ntypes;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (s->types[mid] < t) lo = mid + 1;
        else hi = mid;
    }
    return (lo < s->ntypes && s->types[lo] == t) ? lo : -1;
}

/* add(ev_row, ev_time, ev_type, ev_value) -> (flat, stacked): the spans that closed, as bytes
 * of int64 sextuples in the order they closed: flat (row, type, value, start, dur, full:
 * the kernel's full-name value, NONE when none came or for other types), stacked (row, type,
 * value, start, dur, level: the depth of the push, 1 outermost). A pop with nothing open is
 * dropped. Spans still open wait for the next call. */
static PyObject *Spans_add(Spans *self, PyObject *args) {
    PyObject *o[4];
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3])) return NULL;
    View b[4];
    static const Py_ssize_t size[4] = {4, 8, 8, 8};
    static const char *names[4] = {"ev_row", "ev_time", "ev_type", "ev_value"};
    for (int i = 0; i < 4; i++)
        if (view_get(o[i], &b[i], size[i], 0, names[i]) < 0) { views_release(b, 4); return NULL; }
    Py_ssize_t n = view_len(&b[0]);
    if (view_len(&b[1]) != n || view_len(&b[2]) != n || view_len(&b[3]) != n) {
        views_release(b, 4);
        PyErr_SetString(PyExc_ValueError, "Spans.add: column lengths differ");
        return NULL;
    }
    const int32_t *row = b[0].view.buf;
    const int64_t *time = b[1].view.buf, *type = b[2].view.buf, *value = b[3].view.buf;
    I64s flat = {0}, stacked = {0};
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !err; i++) {
        int32_t r = row[i];
        if (r < 0 || r >= self->nrows) continue;
        Py_ssize_t k = type_index(self, type[i]);
        if (k < 0) continue;
        int64_t t = time[i], v = value[i];
        uint8_t kind = self->kinds[k];
        if (kind == K_FULL) {
            if (v == 0) continue;
            self->full_t[r] = t;
            self->full_v[r] = v;
            for (int j = 0; j < self->nkernel; j++) {
                uint64_t key = ((uint64_t)(uint32_t)r << 32 | (uint64_t)self->kernel_types[j]) + 1;
                Cell *c = cell_slot(self->cells, self->cap, key);
                if (c->key && c->open.start == t && c->open.full == NONE) c->open.full = v;
            }
            continue;
        }
        Cell *c = spans_cell(self, r, k);
        if (!c) { err = 1; break; }
        if (kind == K_STACKED) {
            Stack *st = &c->stack;
            if (v != 0) {
                if (stack_push(st, t, v) < 0) err = 1;
            } else if (st->n > 0) {
                int32_t level = st->n--;
                if (push6(&stacked, r, type[i], st->value[st->n], st->start[st->n],
                          t - st->start[st->n], level) < 0)
                    err = 1;
            }
        } else {
            OpenSpan *os = &c->open;
            if (os->start != NONE &&
                push6(&flat, r, type[i], os->value, os->start, t - os->start, os->full) < 0)
                err = 1;
            if (v != 0) {
                os->start = t;
                os->value = v;
                os->full = (kind == K_KERNEL && self->full_t[r] == t) ? self->full_v[r] : NONE;
            } else
                os->start = NONE;
        }
    }
    Py_END_ALLOW_THREADS
    views_release(b, 4);
    if (err) {
        free(flat.p);
        free(stacked.p);
        return PyErr_NoMemory();
    }
    /* y# gives None for a NULL pointer: no span is an empty bytes */
    PyObject *res = Py_BuildValue("(y#y#)", flat.p ? (const char *)flat.p : "",
                                  (Py_ssize_t)(flat.n * sizeof(int64_t)),
                                  stacked.p ? (const char *)stacked.p : "",
                                  (Py_ssize_t)(stacked.n * sizeof(int64_t)));
    free(flat.p);
    free(stacked.p);
    return res;
}

static PyMethodDef Spans_methods[] = {
    {"add", (PyCFunction)Spans_add, METH_VARARGS,
     "add(ev_row, ev_time, ev_type, ev_value) -> (flat, stacked) spans closed (see _timeline.c)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SpansType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nsys2prv.engine._engine.Spans",
    .tp_basicsize = sizeof(Spans),
    .tp_dealloc = (destructor)Spans_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Spans(types, kinds, nrows): activities paired across windows (see _timeline.c)",
    .tp_methods = Spans_methods,
    .tp_init = (initproc)Spans_init,
    .tp_new = PyType_GenericNew,
};

/* ================================================================ enclosing ========= */

/* enclosing(row, start, end, parent, level): the nesting of ranges on their rows, as Nsight
 * Systems nests NVTX ranges: sorted by (row, start ascending, end descending), the parent of
 * a range is the shortest other range of its row that contains it, both ends inclusive (the
 * one started last among equals); ranges with equal start and end are each other's parent,
 * a cycle that leaves them and everything below them without a level (-1). One pass in
 * order, with the ranges still open at each start (a handful: the nesting depth). Writes
 * `parent` (int64: the index, -1 at a root) and `level` (int32: 0 at a root). */
static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* the better parent of two candidates (-1: none): the shorter, the later of equal ones */
static Py_ssize_t better(Py_ssize_t a, Py_ssize_t b, const int64_t *start,
                         const int64_t *end) {
    if (a < 0) return b;
    if (b < 0) return a;
    int64_t la = end[a] - start[a], lb = end[b] - start[b];
    if (la != lb) return la < lb ? a : b;
    return a > b ? a : b;
}

static PyObject *enclosing(PyObject *self, PyObject *args) {
    PyObject *o[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    View b[5];
    static const char *names[5] = {"row", "start", "end", "parent", "level"};
    static const Py_ssize_t sizes[5] = {4, 8, 8, 8, 4};
    for (int k = 0; k < 5; k++) {
        if (view_get(o[k], &b[k], sizes[k], k >= 3, names[k]) < 0) {
            views_release(b, k + 1);
            return NULL;
        }
    }
    Py_ssize_t n = view_len(&b[0]);
    for (int k = 1; k < 5; k++) {
        if (view_len(&b[k]) != n) {
            views_release(b, 5);
            PyErr_SetString(PyExc_ValueError, "enclosing: column lengths differ");
            return NULL;
        }
    }
    const int32_t *row = b[0].view.buf;
    const int64_t *start = b[1].view.buf, *end = b[2].view.buf;
    int64_t *parent = b[3].view.buf;
    int32_t *level = b[4].view.buf;
    /* The parent of a range is, among the earlier ranges of its row (by start, longer
     * first) that end at or after it, the shortest, the last of equal ones: a range that
     * ends before it starts is over, and one that ends inside it does not hold it. The
     * earlier ranges are kept in a tree over the row's distinct ends (a leaf: the last
     * range that ends there, the shortest of them since ranges come by start), each node
     * the best of its leaves: a parent is a query of the ends at or after the range's,
     * O(log n) a range, whatever how many are open at once (10^6 pushes never popped). */
    int64_t *ends = malloc((size_t)(n > 0 ? n : 1) * sizeof *ends);
    Py_ssize_t *tree = NULL;
    int failed = ends == NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r0 = 0; r0 < n && !failed;) {
        Py_ssize_t r1 = r0 + 1;
        while (r1 < n && row[r1] == row[r0]) r1++;
        Py_ssize_t m = 0;
        for (Py_ssize_t i = r0; i < r1; i++) ends[m++] = end[i];
        qsort(ends, (size_t)m, sizeof *ends, cmp_i64);
        Py_ssize_t u = 0;
        for (Py_ssize_t k = 0; k < m; k++)
            if (u == 0 || ends[k] != ends[u - 1]) ends[u++] = ends[k];
        Py_ssize_t size = 1;
        while (size < u) size <<= 1;
        Py_ssize_t *grown = realloc(tree, (size_t)(2 * size) * sizeof *tree);
        if (grown == NULL) { failed = 1; break; }
        tree = grown;
        for (Py_ssize_t k = 0; k < 2 * size; k++) tree[k] = -1;
        for (Py_ssize_t i = r0; i < r1; i++) {
            /* the rank of its end among the row's ends */
            Py_ssize_t lo = 0, hi = u;
            while (lo < hi) {
                Py_ssize_t mid = (lo + hi) / 2;
                if (ends[mid] < end[i]) lo = mid + 1; else hi = mid;
            }
            Py_ssize_t best = -1;
            for (Py_ssize_t l = lo + size, h = 2 * size; l < h; l >>= 1, h >>= 1) {
                if (l & 1) best = better(best, tree[l++], start, end);
                if (h & 1) best = better(best, tree[--h], start, end);
            }
            parent[i] = best;
            if (best >= 0 && start[best] == start[i] && end[best] == end[i])
                parent[best] = i; /* twins: each the other's parent */
            Py_ssize_t at = lo + size;
            tree[at] = i;
            for (at >>= 1; at >= 1; at >>= 1)
                tree[at] = better(tree[2 * at], tree[2 * at + 1], start, end);
        }
        r0 = r1;
    }
    /* levels in order: a parent comes before its child, but in a cycle */
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        int64_t p = parent[i];
        if (p < 0) level[i] = 0;
        else if (p > i || level[p] < 0) level[i] = -1;
        else level[i] = level[p] + 1;
    }
    Py_END_ALLOW_THREADS
    free(ends);
    free(tree);
    views_release(b, 5);
    if (failed) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* ================================================================ last_events ======= */

/* last_events(ev_row, ev_type) -> bytes of int64: the index of the last event of every
 * (row, type), ascending (file order). The table holds one slot per distinct (row, type)
 * and grows with them: a window has millions of events and a few thousand keys, and a
 * table sized by the events (as this was) spent its time clearing and faulting in memory
 * that no key used (benchmarks/RESULTS.md, round 19). */
typedef struct { uint64_t key; int64_t at; } LastSlot; /* at: event index + 1, 0 empty */

static int last_grow(LastSlot **tab, size_t *cap) {
    size_t fresh_cap = *cap * 2;
    LastSlot *fresh = calloc(fresh_cap, sizeof *fresh);
    if (!fresh) return -1;
    for (size_t i = 0; i < *cap; i++) {
        if (!(*tab)[i].at) continue;
        size_t h = (size_t)mix64((*tab)[i].key) & (fresh_cap - 1);
        while (fresh[h].at) h = (h + 1) & (fresh_cap - 1);
        fresh[h] = (*tab)[i];
    }
    free(*tab);
    *tab = fresh;
    *cap = fresh_cap;
    return 0;
}

static PyObject *last_events(PyObject *self, PyObject *args) {
    PyObject *o[2];
    if (!PyArg_ParseTuple(args, "OO", &o[0], &o[1])) return NULL;
    View b[2];
    if (view_get(o[0], &b[0], 4, 0, "ev_row") < 0 || view_get(o[1], &b[1], 8, 0, "ev_type") < 0) {
        views_release(b, 2);
        return NULL;
    }
    Py_ssize_t n = view_len(&b[0]);
    if (view_len(&b[1]) != n) {
        views_release(b, 2);
        PyErr_SetString(PyExc_ValueError, "last_events: column lengths differ");
        return NULL;
    }
    const int32_t *row = b[0].view.buf;
    const int64_t *type = b[1].view.buf;
    size_t cap = 1024, used = 0;
    LastSlot *tab = calloc(cap, sizeof *tab);
    int64_t *out = NULL;
    int failed = tab == NULL;
    Py_BEGIN_ALLOW_THREADS
    if (!failed) {
        /* the key is the row in the high half with the type mixed into it: two pairs can
         * share a key (a type past 32 bits), so a hit compares the row and type in full */
        for (Py_ssize_t i = 0; i < n && !failed; i++) {
            uint64_t key = ((uint64_t)(uint32_t)row[i] << 32) ^ (uint64_t)type[i];
            size_t h = (size_t)mix64(key) & (cap - 1);
            for (;;) {
                int64_t j = tab[h].at - 1;
                if (j < 0) {
                    tab[h].key = key;
                    tab[h].at = i + 1;
                    if (++used * 2 > cap && last_grow(&tab, &cap) < 0) failed = 1;
                    break;
                }
                if (tab[h].key == key && row[j] == row[i] && type[j] == type[i]) {
                    tab[h].at = i + 1;
                    break;
                }
                h = (h + 1) & (cap - 1);
            }
        }
        if (!failed) out = malloc((used ? used : 1) * sizeof *out);
        failed = failed || out == NULL;
        if (!failed) {
            size_t m = 0;
            for (size_t h = 0; h < cap; h++)
                if (tab[h].at) out[m++] = tab[h].at - 1;
            qsort(out, used, sizeof *out, cmp_i64);
        }
    }
    Py_END_ALLOW_THREADS
    views_release(b, 2);
    PyObject *res = failed ? PyErr_NoMemory()
        : PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)(used * sizeof *out));
    free(tab);
    free(out);
    return res;
}

/* ================================================================ Gaps ============== */

/* a launch arrow kept until the gaps it may end are known: keyed by (group, recv) */
typedef struct {
    int64_t g, recv;  /* g < 0: empty slot */
    int64_t recv_row, send, send_row;
} Arrow;

typedef struct {
    PyObject_HEAD
    int32_t *group_of_row; /* GPU rows -> dense device group, -1 elsewhere */
    Py_ssize_t nrows, ngroups;
    int64_t *last_end, *first; /* per group: end of its last active run, start of its first */
    Arrow *arrows;
    size_t cap, used;
    int64_t *tags;
    Py_ssize_t ntags;
} Gaps;

static void Gaps_dealloc(Gaps *self) {
    free(self->group_of_row);
    free(self->last_end);
    free(self->first);
    free(self->arrows);
    free(self->tags);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Gaps(group_of_row int32, ngroups, launch_tags int64) */
static int Gaps_init(Gaps *self, PyObject *args, PyObject *kw) {
    PyObject *og, *ot;
    Py_ssize_t ngroups;
    if (!PyArg_ParseTuple(args, "OnO", &og, &ngroups, &ot)) return -1;
    View b[2];
    if (view_get(og, &b[0], 4, 0, "group_of_row") < 0 ||
        view_get(ot, &b[1], 8, 0, "launch_tags") < 0) {
        views_release(b, 2);
        return -1;
    }
    self->nrows = view_len(&b[0]);
    self->ntags = view_len(&b[1]);
    self->ngroups = ngroups;
    self->group_of_row = malloc((size_t)(self->nrows ? self->nrows : 1) * sizeof(int32_t));
    self->tags = malloc((size_t)(self->ntags ? self->ntags : 1) * sizeof(int64_t));
    self->last_end = malloc((size_t)(ngroups ? ngroups : 1) * sizeof(int64_t));
    self->first = malloc((size_t)(ngroups ? ngroups : 1) * sizeof(int64_t));
    self->cap = 1024;
    self->arrows = malloc(self->cap * sizeof(Arrow));
    if (!self->group_of_row || !self->tags || !self->last_end || !self->first || !self->arrows) {
        views_release(b, 2);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(self->group_of_row, b[0].view.buf, (size_t)self->nrows * sizeof(int32_t));
    memcpy(self->tags, b[1].view.buf, (size_t)self->ntags * sizeof(int64_t));
    views_release(b, 2);
    for (Py_ssize_t g = 0; g < ngroups; g++) self->last_end[g] = self->first[g] = NONE;
    for (size_t i = 0; i < self->cap; i++) self->arrows[i].g = -1;
    for (Py_ssize_t r = 0; r < self->nrows; r++)
        if (self->group_of_row[r] >= ngroups) {
            PyErr_SetString(PyExc_ValueError, "Gaps: a group out of range");
            return -1;
        }
    return 0;
}

static inline size_t arrow_slot(const Arrow *a, size_t cap, int64_t g, int64_t recv) {
    size_t h = (size_t)mix64(((uint64_t)g << 48) ^ (uint64_t)recv) & (cap - 1);
    while (a[h].g >= 0 && !(a[h].g == g && a[h].recv == recv)) h = (h + 1) & (cap - 1);
    return h;
}

/* the arrows kept in a table of `cap` slots, those with recv >= keep_from only */
static int arrows_rehash(Gaps *self, size_t cap, int64_t keep_from) {
    Arrow *fresh = malloc(cap * sizeof *fresh);
    if (!fresh) return -1;
    for (size_t i = 0; i < cap; i++) fresh[i].g = -1;
    size_t used = 0;
    for (size_t i = 0; i < self->cap; i++) {
        Arrow *x = &self->arrows[i];
        if (x->g < 0 || x->recv < keep_from) continue;
        fresh[arrow_slot(fresh, cap, x->g, x->recv)] = *x;
        used++;
    }
    free(self->arrows);
    self->arrows = fresh;
    self->cap = cap;
    self->used = used;
    return 0;
}

/* keep the arrow reaching (g, recv) that sorts first by (recv_row, send) */
static int arrow_add(Gaps *self, int64_t g, int64_t recv, int64_t recv_row, int64_t send,
                     int64_t send_row) {
    if ((self->used + 1) * 2 > self->cap && arrows_rehash(self, self->cap * 2, INT64_MIN) < 0)
        return -1;
    size_t h = arrow_slot(self->arrows, self->cap, g, recv);
    Arrow *x = &self->arrows[h];
    if (x->g < 0) {
        *x = (Arrow){g, recv, recv_row, send, send_row};
        self->used++;
    } else if (recv_row < x->recv_row || (recv_row == x->recv_row && send < x->send)) {
        x->recv_row = recv_row;
        x->send = send;
        x->send_row = send_row;
    }
    return 0;
}

/* add(run_g, run_s, run_e, send_row, send, recv_row, recv, tag, window_end) -> bytes of the
 * gaps that ended in the window, int64 (group, start, end, host row or -1), by group and
 * start. Runs: the window's active runs of every group (dense group ids), by group and
 * start; the arrows: the window's communications (those with a launch tag reaching a GPU
 * row are kept until the window in which a gap may end with them has passed). */
static PyObject *Gaps_add(Gaps *self, PyObject *args) {
    PyObject *o[8];
    long long window_end;
    if (!PyArg_ParseTuple(args, "OOOOOOOOL", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &window_end))
        return NULL;
    View b[8];
    static const Py_ssize_t size[8] = {8, 8, 8, 4, 8, 4, 8, 8};
    static const char *names[8] = {"run_g", "run_s", "run_e", "send_row", "send", "recv_row",
                                   "recv", "tag"};
    for (int i = 0; i < 8; i++)
        if (view_get(o[i], &b[i], size[i], 0, names[i]) < 0) { views_release(b, 8); return NULL; }
    Py_ssize_t nr = view_len(&b[0]), nc = view_len(&b[3]);
    if (view_len(&b[1]) != nr || view_len(&b[2]) != nr || view_len(&b[4]) != nc ||
        view_len(&b[5]) != nc || view_len(&b[6]) != nc || view_len(&b[7]) != nc) {
        views_release(b, 8);
        PyErr_SetString(PyExc_ValueError, "Gaps.add: column lengths differ");
        return NULL;
    }
    const int64_t *rg = b[0].view.buf, *rs = b[1].view.buf, *re = b[2].view.buf;
    const int32_t *send_row = b[3].view.buf, *recv_row = b[5].view.buf;
    const int64_t *send = b[4].view.buf, *recv = b[6].view.buf, *tag = b[7].view.buf;
    I64s out = {0};
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < nc && !err; i++) {
        int32_t r = recv_row[i];
        if (r < 0 || r >= self->nrows || self->group_of_row[r] < 0) continue;
        int launch = 0;
        for (Py_ssize_t k = 0; k < self->ntags; k++) launch |= tag[i] == self->tags[k];
        if (launch && arrow_add(self, self->group_of_row[r], recv[i], r, send[i], send_row[i]) < 0)
            err = 1;
    }
    for (Py_ssize_t i = 0; i < nr && !err; i++) {
        int64_t g = rg[i];
        if (g < 0 || g >= self->ngroups) { err = 2; break; }
        int first_of_group = i == 0 || rg[i - 1] != g;
        if (first_of_group && self->first[g] == NONE) self->first[g] = rs[i];
        int64_t prev = first_of_group ? self->last_end[g] : re[i - 1];
        if (prev != NONE && rs[i] > prev) {
            Arrow *x = &self->arrows[arrow_slot(self->arrows, self->cap, g, rs[i])];
            if (i64s_push4(&out, g, prev, rs[i], x->g >= 0 ? x->send_row : -1) < 0) {
                err = 1;
                break;
            }
        }
        if (i + 1 == nr || rg[i + 1] != g) self->last_end[g] = re[i]; /* runs by start */
    }
    if (!err && arrows_rehash(self, self->cap, window_end) < 0) err = 1;
    Py_END_ALLOW_THREADS
    views_release(b, 8);
    if (err) {
        free(out.p);
        if (err == 1) return PyErr_NoMemory();
        PyErr_SetString(PyExc_ValueError, "Gaps.add: a group out of range");
        return NULL;
    }
    PyObject *res = PyBytes_FromStringAndSize(out.p ? (const char *)out.p : "",
                                              (Py_ssize_t)(out.n * sizeof(int64_t)));
    free(out.p);
    return res;
}

/* spans() -> bytes of int64 (group, first start, last end) of the groups that were active */
static PyObject *Gaps_spans(Gaps *self, PyObject *Py_UNUSED(ignored)) {
    I64s out = {0};
    for (Py_ssize_t g = 0; g < self->ngroups; g++)
        if (self->first[g] != NONE && i64s_push3(&out, g, self->first[g], self->last_end[g]) < 0) {
            free(out.p);
            return PyErr_NoMemory();
        }
    PyObject *res = PyBytes_FromStringAndSize(out.p ? (const char *)out.p : "",
                                              (Py_ssize_t)(out.n * sizeof(int64_t)));
    free(out.p);
    return res;
}

/* idle(window_end) -> bytes of int64 (group, since): the groups idle at the window's end
 * (active before, their last run ended earlier): a gap is open on them since `since` */
static PyObject *Gaps_idle(Gaps *self, PyObject *args) {
    long long window_end;
    if (!PyArg_ParseTuple(args, "L", &window_end)) return NULL;
    Py_ssize_t n = 0;
    for (Py_ssize_t g = 0; g < self->ngroups; g++)
        n += self->first[g] != NONE && self->last_end[g] < window_end;
    PyObject *res = PyBytes_FromStringAndSize(NULL, n * 2 * (Py_ssize_t)sizeof(int64_t));
    if (!res) return NULL;
    int64_t *out = (int64_t *)PyBytes_AS_STRING(res);
    for (Py_ssize_t g = 0; g < self->ngroups; g++)
        if (self->first[g] != NONE && self->last_end[g] < window_end) {
            *out++ = g;
            *out++ = self->last_end[g];
        }
    return res;
}

static PyMethodDef Gaps_methods[] = {
    {"idle", (PyCFunction)Gaps_idle, METH_VARARGS,
     "idle(window_end) -> (group, since) of the groups idle at the window's end"},
    {"add", (PyCFunction)Gaps_add, METH_VARARGS,
     "add(run_g, run_s, run_e, send_row, send, recv_row, recv, tag, window_end) -> gaps "
     "(group, start, end, host row) that ended in the window"},
    {"spans", (PyCFunction)Gaps_spans, METH_NOARGS,
     "spans() -> (group, first start, last end) of every active group"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject GapsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nsys2prv.engine._engine.Gaps",
    .tp_basicsize = sizeof(Gaps),
    .tp_dealloc = (destructor)Gaps_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Gaps(group_of_row, ngroups, launch_tags): a device's gaps across windows",
    .tp_methods = Gaps_methods,
    .tp_init = (initproc)Gaps_init,
    .tp_new = PyType_GenericNew,
};

static PyMethodDef timeline_methods[] = {
    {"group_sweep", group_sweep, METH_VARARGS,
     "group_sweep(ev_row, ev_time, ev_type, ev_value, group_of_row, set_types, set_bits, end, "
     "sums) -> bytes of the ACTIVE runs (group, start, end): see _timeline.c"},
    {"row_timeline", row_timeline, METH_VARARGS,
     "row_timeline(st_row, st_begin, st_end, st_state, ev_row, ev_time, ev_type, ev_value, "
     "slot_of_row, nst, set_types, set_bits, nsets, end, row_bins, opens, q_row, q_a, q_b, "
     "bin_col, q_out): time per (state, open sets) of rows, and per query: see _timeline.c"},
    {"enclosing", enclosing, METH_VARARGS,
     "enclosing(row, start, end, parent, level): the nesting of ranges sorted by (row, start, "
     "-end), as nsys nests NVTX ranges: see _timeline.c"},
    {"last_events", last_events, METH_VARARGS,
     "last_events(ev_row, ev_type) -> bytes of int64: the index of the last event of every "
     "(row, type), ascending"},
    {NULL, NULL, 0, NULL},
};

int timeline_register(PyObject *m) {
    if (PyType_Ready(&SpansType) < 0 || PyType_Ready(&GapsType) < 0) return -1;
    Py_INCREF(&SpansType);
    if (PyModule_AddObject(m, "Spans", (PyObject *)&SpansType) < 0) return -1;
    Py_INCREF(&GapsType);
    if (PyModule_AddObject(m, "Gaps", (PyObject *)&GapsType) < 0) return -1;
    return PyModule_AddFunctions(m, timeline_methods);
}
