/*
 * PrvScanner: reads the body of a Paraver trace (.prv text) into compact columns, for the
 * analysis (nsys2prv/paraver/read.py). One pass, fed in blocks of any size (a line may be
 * split between two blocks), without the GIL; memory grows only with the records kept:
 *
 *   events  (row int32, time int64, type int32, value int64), one per kept type:value pair,
 *           in file order (Paraver's order for events at one time);
 *   states  (row int32, begin int64, end int64, state int32) of the rows in a mask;
 *   comms   (send row, logical send, physical send, recv row, logical recv, physical recv,
 *           size, tag), when asked for.
 *
 * With a row map it rewrites instead: every line is copied but records of rows not kept,
 * and the cpu and thread ids of kept rows are renumbered (a trace of fewer rows).
 *
 * A reading scanner may also be filled without text: the Merger (_engine.c, Merger.scan)
 * hands it merged records through the functions a scanned line ends in (_scan.h).
 *
 * Rows are numbered as in the header: row = task_rows[appl_offsets[appl-1] + task-1] +
 * thread-1; task_rows has one more entry than there are tasks (the row count). Lines whose ids fall outside the header are counted in `bad` and skipped
 * (nsys2prv check reports them; the analysis only reads).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_scan.h"

typedef struct {
    char *p;
    size_t n, cap; /* in bytes */
} Col;

static int col_grow(Col *c, size_t size) {
    size_t cap = c->cap ? c->cap * 2 : 1 << 16;
    while (cap < c->n + size) cap *= 2;
    char *p = realloc(c->p, cap);
    if (!p) return -1;
    c->p = p;
    c->cap = cap;
    return 0;
}

/* inline: a column value of a known size is then one store, not a call to memcpy */
static inline int col_push(Col *c, const void *v, size_t size) {
    if (c->n + size > c->cap && col_grow(c, size) < 0) return -1;
    memcpy(c->p + c->n, v, size);
    c->n += size;
    return 0;
}

/* ------------------------------------------------------------------ cut mode -- */

/* One (row, type) before the window: its last value (or, for a stacked type, its open
 * values), with the file order of the events, to be written at the window's start. */
typedef struct {
    uint64_t key; /* row << 32 | type, 0 = empty slot (type 0 is not an event type) */
    int64_t value, time;
    uint64_t seq;
    int64_t *stack; /* stacked types: values pushed and not popped, with seqs and times */
    uint64_t *stack_seq;
    int64_t *stack_time;
    int32_t n, cap;
    int32_t cpu;
} Carry;

typedef struct {
    int64_t from, to; /* [from, to) in trace time; output time = time - from */
    int64_t *appl_to; /* per application, its own end (<= to), or NULL: `to` for all */
    int64_t *stacked; /* sorted types whose values nest (0 ends the innermost) */
    Py_ssize_t nstacked;
    int64_t *attributes; /* sorted types that describe what starts with them (bytes, ids,
                            geometry): carried only with a value still open from their time */
    Py_ssize_t nattributes;
    Carry *slots;
    size_t nslots, used;
    uint64_t seq;
    /* per row: the state covering `from` */
    int64_t *st_end;
    int32_t *st_state, *st_cpu;
    int flushed;
    /* per row: its event line at 0 (what is open), held until the lines at `from` are read,
     * so that an event line of the same row at `from` joins it (one line per row and time) */
    Col *held;
    int holding;
} Cut;

enum { EV_ROW, EV_TIME, EV_TYPE, EV_VALUE, ST_ROW, ST_BEGIN, ST_END, ST_STATE, CM_SROW,
       CM_LSEND, CM_PSEND, CM_RROW, CM_LRECV, CM_PRECV, CM_SIZE, CM_TAG, NCOLS };

static const char *col_names[NCOLS] = {
    "ev_row", "ev_time", "ev_type", "ev_value", "st_row", "st_begin", "st_end", "st_state",
    "cm_send_row", "cm_lsend", "cm_psend", "cm_recv_row", "cm_lrecv", "cm_precv", "cm_size",
    "cm_tag"};

struct Scanner {
    PyObject_HEAD
    Col cols[NCOLS];
    int64_t *types; /* sorted; NULL = every type */
    Py_ssize_t ntypes;
    /* the same types as an open-addressing set (INT64_MIN: an empty slot), looked up for
     * every event: a binary search over tens of types was a fifth of the scan */
    int64_t *type_set;
    uint64_t type_mask;
    int type_shift;
    int32_t *task_rows;
    Py_ssize_t ntasks;
    int32_t *appl_offsets;
    Py_ssize_t nappl;
    uint8_t *state_mask; /* per row; NULL = every row */
    Py_ssize_t nrows;
    int comms;
    int distinct; /* only collect the distinct event types (no event columns) */
    int64_t *seen;
    Py_ssize_t nseen, seen_cap;
    int64_t *row_map; /* rewrite mode: per row, new cpu << 32 | new thread, or -1 to drop */
    Py_ssize_t nmap;
    Col out; /* rewrite and cut modes: the text not yet taken */
    Cut *cut; /* cut mode */
    int cut_done; /* past the window: the rest is skipped */
    char *rest; /* a line split between two blocks */
    size_t rest_n, rest_cap;
    long long bad, lines;
    int failed;
};

static void Scanner_dealloc(Scanner *s) {
    for (int i = 0; i < NCOLS; i++) free(s->cols[i].p);
    free(s->types);
    free(s->type_set);
    free(s->appl_offsets);
    free(s->state_mask);
    free(s->rest);
    free(s->seen);
    if (s->cut) {
        for (size_t i = 0; i < s->cut->nslots; i++) {
            free(s->cut->slots[i].stack);
            free(s->cut->slots[i].stack_seq);
            free(s->cut->slots[i].stack_time);
        }
        free(s->cut->slots);
        free(s->cut->stacked);
        free(s->cut->attributes);
        free(s->cut->appl_to);
        free(s->cut->st_end);
        free(s->cut->st_state);
        free(s->cut->st_cpu);
        if (s->cut->held) {
            int64_t nrows = s->task_rows[s->ntasks];
            for (int64_t r = 0; r < nrows; r++) free(s->cut->held[r].p);
            free(s->cut->held);
        }
        free(s->cut);
    }
    free(s->task_rows); /* after the cut's rows */
    free(s->row_map);
    free(s->out.p);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* A sequence of Python ints into a malloc'ed int64 array. */
static int64_t *ints_of(PyObject *seq, Py_ssize_t *n) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of integers");
    if (!fast) return NULL;
    *n = PySequence_Fast_GET_SIZE(fast);
    int64_t *out = malloc(sizeof(int64_t) * (*n ? *n : 1));
    if (!out) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        out[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            free(out);
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast);
    return out;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int Scanner_init(Scanner *s, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"task_rows", "appl_offsets", "types", "state_rows", "comms",
                             "distinct_types", "row_map", "cut", "stacked", "attributes",
                             NULL};
    PyObject *task_rows, *appl_offsets, *types = Py_None, *state_rows = Py_None;
    PyObject *row_map = Py_None, *cut = Py_None, *stacked = Py_None, *attributes = Py_None;
    int comms = 0, distinct = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOppOOOO", kwlist, &task_rows,
                                     &appl_offsets, &types, &state_rows, &comms, &distinct,
                                     &row_map, &cut, &stacked, &attributes))
        return -1;
    Py_ssize_t n;
    int64_t *v = ints_of(task_rows, &n);
    if (!v) return -1;
    if (n < 1) {
        free(v);
        PyErr_SetString(PyExc_ValueError, "task_rows needs the row count as its last entry");
        return -1;
    }
    s->ntasks = n - 1;
    s->task_rows = malloc(sizeof(int32_t) * (n ? n : 1));
    s->nrows = 0;
    for (Py_ssize_t i = 0; i < n; i++) s->task_rows[i] = (int32_t)v[i];
    free(v);
    v = ints_of(appl_offsets, &n);
    if (!v) return -1;
    s->nappl = n;
    s->appl_offsets = malloc(sizeof(int32_t) * (n ? n : 1));
    for (Py_ssize_t i = 0; i < n; i++) s->appl_offsets[i] = (int32_t)v[i];
    free(v);
    if (types != Py_None) {
        s->types = ints_of(types, &s->ntypes);
        if (!s->types) return -1;
        qsort(s->types, s->ntypes, sizeof(int64_t), cmp_i64);
        int bits = 4;
        while (((Py_ssize_t)1 << bits) < 2 * s->ntypes) bits++;
        s->type_set = malloc(sizeof(int64_t) << bits);
        if (!s->type_set) {
            PyErr_NoMemory();
            return -1;
        }
        s->type_mask = ((uint64_t)1 << bits) - 1;
        s->type_shift = 64 - bits;
        for (uint64_t i = 0; i <= s->type_mask; i++) s->type_set[i] = INT64_MIN;
        for (Py_ssize_t i = 0; i < s->ntypes; i++) {
            int64_t t = s->types[i];
            if (t == INT64_MIN) continue; /* no event has it (see wanted) */
            uint64_t h = ((uint64_t)t * 0x9E3779B97F4A7C15ULL) >> s->type_shift;
            while (s->type_set[h] != INT64_MIN && s->type_set[h] != t) h = (h + 1) & s->type_mask;
            s->type_set[h] = t;
        }
    }
    if (state_rows != Py_None) {
        /* bytes-like mask, one byte per row */
        Py_buffer view;
        if (PyObject_GetBuffer(state_rows, &view, PyBUF_SIMPLE) < 0) return -1;
        s->nrows = view.len;
        s->state_mask = malloc(view.len ? view.len : 1);
        memcpy(s->state_mask, view.buf, view.len);
        PyBuffer_Release(&view);
    }
    s->comms = comms;
    s->distinct = distinct;
    if (row_map != Py_None) {
        s->row_map = ints_of(row_map, &s->nmap);
        if (!s->row_map) return -1;
    }
    if (cut != Py_None) {
        long long from, to;
        PyObject *ends = Py_None;
        if (!PyArg_ParseTuple(cut, "LL|O", &from, &to, &ends)) return -1;
        Cut *c = calloc(1, sizeof(Cut));
        if (!c) {
            PyErr_NoMemory();
            return -1;
        }
        s->cut = c;
        c->from = from;
        c->to = to;
        if (ends != Py_None) { /* (from, to, ends): application a ends at ends[a-1] */
            Py_ssize_t nends;
            c->appl_to = ints_of(ends, &nends);
            if (!c->appl_to) return -1;
            if (nends != s->nappl) {
                PyErr_SetString(PyExc_ValueError, "cut: one end per application");
                return -1;
            }
            for (Py_ssize_t i = 0; i < nends; i++)
                if (c->appl_to[i] > c->to) c->appl_to[i] = c->to;
        }
        if (stacked != Py_None) {
            c->stacked = ints_of(stacked, &c->nstacked);
            if (!c->stacked) return -1;
            qsort(c->stacked, c->nstacked, sizeof(int64_t), cmp_i64);
        }
        if (attributes != Py_None) {
            c->attributes = ints_of(attributes, &c->nattributes);
            if (!c->attributes) return -1;
            qsort(c->attributes, c->nattributes, sizeof(int64_t), cmp_i64);
        }
        int64_t nrows = s->task_rows[s->ntasks];
        c->nslots = 1024;
        c->slots = calloc(c->nslots, sizeof(Carry));
        c->st_end = malloc(sizeof(int64_t) * (nrows ? nrows : 1));
        c->st_state = malloc(sizeof(int32_t) * (nrows ? nrows : 1));
        c->st_cpu = malloc(sizeof(int32_t) * (nrows ? nrows : 1));
        c->held = calloc(nrows ? nrows : 1, sizeof(Col));
        if (!c->slots || !c->st_end || !c->st_state || !c->st_cpu || !c->held) {
            PyErr_NoMemory();
            return -1;
        }
        for (int64_t r = 0; r < nrows; r++) c->st_end[r] = INT64_MIN;
    }
    return 0;
}

static inline int parse_i64(const char **pp, const char *end, int64_t *out) {
    const char *p = *pp;
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9') return -1;
    uint64_t v = 0;
    while (p < end && *p >= '0' && *p <= '9') v = v * 10 + (uint64_t)(*p++ - '0');
    *out = neg ? -(int64_t)v : (int64_t)v;
    *pp = p;
    return 0;
}

/* the next ':'-separated integer field */
static inline int field(const char **pp, const char *end, int64_t *out) {
    if (parse_i64(pp, end, out) < 0) return -1;
    if (*pp < end && **pp == ':') (*pp)++;
    return 0;
}

static inline int wanted(const Scanner *s, int64_t type) {
    if (!s->types) return 1;
    if (type == INT64_MIN) return 0; /* the empty slots' mark */
    uint64_t h = ((uint64_t)type * 0x9E3779B97F4A7C15ULL) >> s->type_shift;
    for (;;) {
        int64_t t = s->type_set[h];
        if (t == type) return 1;
        if (t == INT64_MIN) return 0;
        h = (h + 1) & s->type_mask;
    }
}

/* row of (appl, task, thread), or -1 */
static inline int64_t row_of(const Scanner *s, int64_t appl, int64_t task, int64_t thread) {
    if (appl < 1 || appl > s->nappl || task < 1 || thread < 1) return -1;
    int64_t first = s->appl_offsets[appl - 1];
    int64_t last = appl < s->nappl ? s->appl_offsets[appl] : s->ntasks;
    if (first + task - 1 >= last) return -1;
    int64_t base = s->task_rows[first + task - 1];
    if (base + thread - 1 >= s->task_rows[first + task]) return -1;
    return base + thread - 1;
}

/* add a type to the sorted set of distinct types */
static int see_type(Scanner *s, int64_t type) {
    Py_ssize_t lo = 0, hi = s->nseen;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (s->seen[mid] < type) lo = mid + 1;
        else hi = mid;
    }
    if (lo < s->nseen && s->seen[lo] == type) return 0;
    if (s->nseen == s->seen_cap) {
        Py_ssize_t cap = s->seen_cap ? s->seen_cap * 2 : 64;
        int64_t *q = realloc(s->seen, sizeof(int64_t) * cap);
        if (!q) return -2;
        s->seen = q;
        s->seen_cap = cap;
    }
    memmove(s->seen + lo + 1, s->seen + lo, sizeof(int64_t) * (s->nseen - lo));
    s->seen[lo] = type;
    s->nseen++;
    return 0;
}

#define PUSH(c, v)                                                  \
    do {                                                            \
        if (col_push(&s->cols[c], &(v), sizeof(v)) < 0) return -2;  \
    } while (0)

/* Rewrite mode: a state or event line keeps its text but for the cpu and thread ids of its
 * row (dropped when its row is not kept), a communication likewise for both ends (dropped
 * when either is not kept); other lines are copied. `nl` is the line's newline, if any. */
static int rewrite_line(Scanner *s, const char *p, const char *end, const char *nl) {
    const char *f[16], *line_end = nl ? nl + 1 : end;
    int n = 0;
    if (end - p >= 2 && p[1] == ':' && (p[0] == '1' || p[0] == '2' || p[0] == '3')) {
        f[n++] = p;
        for (const char *q = p; q < end && n < 16; q++)
            if (*q == ':') f[n++] = q + 1;
    }
    int ends = p[0] == '3' ? 2 : 1;
    if (n < (ends == 2 ? 15 : 6)) /* not a record: copied */
        return col_push(&s->out, p, line_end - p) < 0 ? -2 : 0;
    int64_t ids[2][3], mapped[2];
    for (int e = 0; e < ends; e++) {
        for (int k = 0; k < 3; k++) {
            const char *q = f[2 + 6 * e + k];
            if (parse_i64(&q, end, &ids[e][k]) < 0) return -1;
        }
        int64_t r = row_of(s, ids[e][0], ids[e][1], ids[e][2]);
        if (r < 0 || r >= s->nmap || s->row_map[r] < 0) return 0;
        mapped[e] = s->row_map[r];
    }
    char num[32];
    const char *from = p;
    for (int e = 0; e < ends; e++) {
        /* fields 1 (cpu) and 4 (thread) of this end, counted from its first field */
        int cpu = 1 + 6 * e, thread = 4 + 6 * e;
        int len = snprintf(num, sizeof num, "%lld", (long long)(mapped[e] >> 32));
        if (col_push(&s->out, from, f[cpu] - from) < 0 || col_push(&s->out, num, len) < 0)
            return -2;
        from = f[cpu + 1] - 1;
        len = snprintf(num, sizeof num, "%lld", (long long)(mapped[e] & 0xffffffff));
        if (col_push(&s->out, from, f[thread] - from) < 0 || col_push(&s->out, num, len) < 0)
            return -2;
        from = f[thread + 1] - 1;
    }
    return col_push(&s->out, from, line_end - from) < 0 ? -2 : 0;
}

/* What a record line ends in, shared by scanning its text (scan_line) and by the Merger
 * putting merged records in without text (Merger.scan, _scan.h). */

int64_t scanner_row(const Scanner *s, int64_t appl, int64_t task, int64_t thread) {
    return row_of(s, appl, task, thread);
}

int scanner_state(Scanner *s, int64_t r, int64_t begin, int64_t end, int64_t state) {
    if (s->state_mask && (r >= s->nrows || !s->state_mask[r])) return 0;
    int32_t row = (int32_t)r, st = (int32_t)state;
    PUSH(ST_ROW, row);
    PUSH(ST_BEGIN, begin);
    PUSH(ST_END, end);
    PUSH(ST_STATE, st);
    return 0;
}

int scanner_event(Scanner *s, int64_t r, int64_t time, int64_t type, int64_t value) {
    if (!wanted(s, type)) return 0;
    if (s->distinct) return see_type(s, type);
    int32_t row = (int32_t)r, ty = (int32_t)type;
    PUSH(EV_ROW, row);
    PUSH(EV_TIME, time);
    PUSH(EV_TYPE, ty);
    PUSH(EV_VALUE, value);
    return 0;
}

int scanner_pairs(Scanner *s, int64_t row, int64_t time, const char *p, const char *end) {
    while (p < end) {
        int64_t type, value;
        if (field(&p, end, &type) || field(&p, end, &value)) return -1;
        int rc = scanner_event(s, row, time, type, value);
        if (rc < 0) return rc;
    }
    return 0;
}

int scanner_wants_comms(const Scanner *s) { return s->comms; }

int scanner_comm(Scanner *s, int64_t send_row, int64_t lsend, int64_t psend, int64_t recv_row,
                 int64_t lrecv, int64_t precv, int64_t size, int64_t tag) {
    int32_t srow = (int32_t)send_row, rrow = (int32_t)recv_row;
    PUSH(CM_SROW, srow);
    PUSH(CM_LSEND, lsend);
    PUSH(CM_PSEND, psend);
    PUSH(CM_RROW, rrow);
    PUSH(CM_LRECV, lrecv);
    PUSH(CM_PRECV, precv);
    PUSH(CM_SIZE, size);
    PUSH(CM_TAG, tag);
    return 0;
}

void scanner_count(Scanner *s, long long lines, long long bad) {
    s->lines += lines;
    s->bad += bad;
}

/* one line without its newline; returns 0, -1 for a malformed line, -2 out of memory */
static int scan_line(Scanner *s, const char *p, const char *end) {
    if (end - p < 2 || p[1] != ':') return 0; /* header, comments, communicators */
    char kind = p[0];
    p += 2;
    int64_t cpu, appl, task, thread;
    if (kind == '1') {
        int64_t begin, stop, state;
        if (field(&p, end, &cpu) || field(&p, end, &appl) || field(&p, end, &task) ||
            field(&p, end, &thread) || field(&p, end, &begin) || field(&p, end, &stop) ||
            field(&p, end, &state))
            return -1;
        int64_t r = row_of(s, appl, task, thread);
        if (r < 0) return -1;
        return scanner_state(s, r, begin, stop, state);
    } else if (kind == '2') {
        int64_t time;
        if (field(&p, end, &cpu) || field(&p, end, &appl) || field(&p, end, &task) ||
            field(&p, end, &thread) || field(&p, end, &time))
            return -1;
        int64_t r = row_of(s, appl, task, thread);
        if (r < 0) return -1;
        return scanner_pairs(s, r, time, p, end);
    } else if (kind == '3' && s->comms) {
        int64_t a, b, c, d, ls, ps, lr, pr, size, tag;
        if (field(&p, end, &cpu) || field(&p, end, &a) || field(&p, end, &b) ||
            field(&p, end, &c) || field(&p, end, &ls) || field(&p, end, &ps) ||
            field(&p, end, &cpu) || field(&p, end, &d) || field(&p, end, &task) ||
            field(&p, end, &thread) || field(&p, end, &lr) || field(&p, end, &pr) ||
            field(&p, end, &size) || field(&p, end, &tag))
            return -1;
        int64_t rs = row_of(s, a, b, c), rr = row_of(s, d, task, thread);
        if (rs < 0 || rr < 0) return -1;
        return scanner_comm(s, rs, ls, ps, rr, lr, pr, size, tag);
    }
    return 0;
}

static int in_sorted(const int64_t *v, Py_ssize_t n, int64_t x) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (v[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && v[lo] == x;
}

static Carry *carry_slot(Cut *c, uint64_t key) {
    if (2 * (c->used + 1) > c->nslots) { /* grow: rehash */
        size_t n = c->nslots * 2;
        Carry *slots = calloc(n, sizeof(Carry));
        if (!slots) return NULL;
        for (size_t i = 0; i < c->nslots; i++) {
            if (!c->slots[i].key) continue;
            size_t j = (c->slots[i].key * 0x9E3779B97F4A7C15ull) >> 20 & (n - 1);
            while (slots[j].key) j = (j + 1) & (n - 1);
            slots[j] = c->slots[i];
        }
        free(c->slots);
        c->slots = slots;
        c->nslots = n;
    }
    size_t j = (key * 0x9E3779B97F4A7C15ull) >> 20 & (c->nslots - 1);
    while (c->slots[j].key && c->slots[j].key != key) j = (j + 1) & (c->nslots - 1);
    if (!c->slots[j].key) {
        c->slots[j].key = key;
        c->used++;
    }
    return &c->slots[j];
}

/* an event before the window: remember what it leaves open */
static int carry_event(Cut *c, int64_t row, int64_t cpu, int64_t time, int64_t type,
                       int64_t value) {
    Carry *e = carry_slot(c, ((uint64_t)row << 32) | (uint32_t)type);
    if (!e) return -2;
    e->cpu = (int32_t)cpu;
    if (c->stacked && in_sorted(c->stacked, c->nstacked, type)) {
        if (value == 0) {
            if (e->n) e->n--;
        } else {
            if (e->n == e->cap) {
                int32_t cap = e->cap ? e->cap * 2 : 4;
                int64_t *st = realloc(e->stack, sizeof(int64_t) * cap);
                if (!st) return -2;
                e->stack = st;
                uint64_t *sq = realloc(e->stack_seq, sizeof(uint64_t) * cap);
                if (!sq) return -2;
                e->stack_seq = sq;
                int64_t *tm = realloc(e->stack_time, sizeof(int64_t) * cap);
                if (!tm) return -2;
                e->stack_time = tm;
                e->cap = cap;
            }
            e->stack[e->n] = value;
            e->stack_time[e->n] = time;
            e->stack_seq[e->n++] = c->seq;
        }
    } else {
        e->value = value;
        e->time = time;
    }
    e->seq = c->seq++;
    return 0;
}

typedef struct {
    uint64_t seq;
    int64_t row, type, value, time;
    int32_t cpu, attribute;
} Out;

static int cmp_out(const void *a, const void *b) {
    const Out *x = a, *y = b;
    if (x->row != y->row) return x->row < y->row ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* the end of the window of application `appl` */
static inline int64_t cut_to(const Scanner *s, int64_t appl) {
    const Cut *c = s->cut;
    return c->appl_to && appl >= 1 && appl <= s->nappl ? c->appl_to[appl - 1] : c->to;
}

/* row -> appl, task, thread (1-based) */
static void ids_of_row(const Scanner *s, int64_t row, int64_t *appl, int64_t *task,
                       int64_t *thread) {
    Py_ssize_t lo = 0, hi = s->ntasks; /* last task whose first row <= row */
    while (hi - lo > 1) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (s->task_rows[mid] <= row) lo = mid;
        else hi = mid;
    }
    Py_ssize_t a = 0;
    while (a + 1 < s->nappl && s->appl_offsets[a + 1] <= lo) a++;
    *appl = a + 1;
    *task = lo - s->appl_offsets[a] + 1;
    *thread = row - s->task_rows[lo] + 1;
}

static int put_text(Scanner *s, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return col_push(&s->out, buf, (size_t)n) < 0 ? -2 : 0;
}

/* the window's start: the states that cross it, then what the events before it leave open,
 * row by row in file order, at time 0 */
static int cut_flush(Scanner *s) {
    Cut *c = s->cut;
    if (c->flushed) return 0;
    c->flushed = 1;
    size_t n = 0;
    for (size_t i = 0; i < c->nslots; i++)
        if (c->slots[i].key) n += c->slots[i].n ? (size_t)c->slots[i].n : 1;
    Out *out = malloc(sizeof(Out) * (n ? n : 1));
    if (!out) return -2;
    size_t k = 0;
    for (size_t i = 0; i < c->nslots; i++) {
        Carry *e = &c->slots[i];
        if (!e->key) continue;
        int64_t row = (int64_t)(e->key >> 32), type = (int64_t)(uint32_t)e->key;
        int attr = c->attributes && in_sorted(c->attributes, c->nattributes, type);
        if (e->stack) {
            for (int32_t j = 0; j < e->n; j++)
                out[k++] = (Out){e->stack_seq[j], row, type, e->stack[j], e->stack_time[j],
                                 e->cpu, 0};
        } else if (e->value != 0) {
            out[k++] = (Out){e->seq, row, type, e->value, e->time, e->cpu, attr};
        }
    }
    qsort(out, k, sizeof(Out), cmp_out);
    /* an attribute goes with what is still open: kept only at the time a value still open
     * on its row was written (the start line of a clipped kernel, call, copy, ...) */
    for (size_t i = 0; i < k;) { /* mark first (attribute = 2: dropped), then compact */
        size_t r_end = i;
        while (r_end < k && out[r_end].row == out[i].row) r_end++;
        for (size_t a = i; a < r_end; a++) {
            if (!out[a].attribute) continue;
            int keep = 0;
            for (size_t b = i; b < r_end && !keep; b++)
                keep = out[b].attribute != 1 && out[b].attribute != 2 &&
                       out[b].time == out[a].time;
            if (!keep) out[a].attribute = 2;
        }
        i = r_end;
    }
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
        if (out[i].attribute != 2) out[m++] = out[i];
    k = m;
    int64_t nrows = s->task_rows[s->ntasks];
    size_t j = 0;
    for (int64_t row = 0; row < nrows; row++) {
        int64_t appl, task, thread;
        int has_state = c->st_end[row] > c->from;
        if (!has_state && (j >= k || out[j].row != row)) continue;
        ids_of_row(s, row, &appl, &task, &thread);
        if (has_state) {
            int64_t to = cut_to(s, appl);
            int64_t end = c->st_end[row] < to ? c->st_end[row] : to;
            if (put_text(s, "1:%d:%lld:%lld:%lld:0:%lld:%d\n", c->st_cpu[row], (long long)appl,
                         (long long)task, (long long)thread, (long long)(end - c->from),
                         c->st_state[row]) < 0) {
                free(out);
                return -2;
            }
        }
        if (j < k && out[j].row == row) {
            char buf[96];
            Col *h = &c->held[row];
            int n = snprintf(buf, sizeof buf, "2:%d:%lld:%lld:%lld:0", out[j].cpu,
                             (long long)appl, (long long)task, (long long)thread);
            int rc = col_push(h, buf, (size_t)n);
            for (; j < k && out[j].row == row && rc == 0; j++) {
                n = snprintf(buf, sizeof buf, ":%lld:%lld", (long long)out[j].type,
                             (long long)out[j].value);
                rc = col_push(h, buf, (size_t)n);
            }
            if (rc < 0) {
                free(out);
                return -2;
            }
            c->holding = 1;
        }
    }
    free(out);
    return 0;
}

/* the held event lines at 0 of the rows that had none at `from` */
static int release_held(Scanner *s) {
    Cut *c = s->cut;
    if (!c->holding) return 0;
    c->holding = 0;
    int64_t nrows = s->task_rows[s->ntasks];
    for (int64_t r = 0; r < nrows; r++) {
        Col *h = &c->held[r];
        if (!h->n) continue;
        if (col_push(&s->out, h->p, h->n) < 0 || col_push(&s->out, "\n", 1) < 0) return -2;
        h->n = 0;
    }
    return 0;
}

/* Cut mode: the lines of [from, to), times moved by -from; what is open at `from` is
 * written at 0 (`cut_flush`), states are clipped at both edges, communications kept when
 * both their ends are inside. Returns 1 once past the window. */
static int cut_line(Scanner *s, const char *p, const char *end, const char *nl) {
    Cut *c = s->cut;
    const char *line_end = nl ? nl + 1 : end;
    if (end - p < 2 || p[1] != ':' || (p[0] != '1' && p[0] != '2' && p[0] != '3')) {
        if (!(end > p && p[0] == '#')) return 0; /* communicator lines etc.: dropped */
        return col_push(&s->out, p, line_end - p) < 0 ? -2 : 0;
    }
    char kind = p[0];
    const char *q = p + 2;
    int64_t cpu, appl, task, thread, t;
    if (field(&q, end, &cpu) || field(&q, end, &appl) || field(&q, end, &task) ||
        field(&q, end, &thread) || field(&q, end, &t))
        return -1;
    int64_t row = row_of(s, appl, task, thread);
    if (row < 0) return -1;
    if (t >= c->to) {
        int rc = cut_flush(s);
        if (rc == 0) rc = release_held(s);
        return rc < 0 ? rc : 1;
    }
    /* the lines at 0 come first: written (and the event lines held) at the first line of
     * the window, released before any line past its start */
    if (t >= c->from && cut_flush(s) < 0) return -2;
    if (t > c->from && c->holding && release_held(s) < 0) return -2;
    int64_t to = cut_to(s, appl); /* an application may end before the others */
    if (t >= to) return 0;
    if (kind == '1') {
        int64_t stop, state;
        if (field(&q, end, &stop) || field(&q, end, &state)) return -1;
        if (t < c->from) {
            if (stop > c->from && row < s->task_rows[s->ntasks]) {
                c->st_end[row] = stop;
                c->st_state[row] = (int32_t)state;
                c->st_cpu[row] = (int32_t)cpu;
            }
            return 0;
        }
        if (cut_flush(s) < 0) return -2;
        int64_t e = stop < to ? stop : to;
        return put_text(s, "1:%lld:%lld:%lld:%lld:%lld:%lld:%lld\n", (long long)cpu,
                        (long long)appl, (long long)task, (long long)thread,
                        (long long)(t - c->from), (long long)(e - c->from), (long long)state);
    }
    if (kind == '2') {
        if (t < c->from) {
            while (q < end) {
                int64_t type, value;
                if (field(&q, end, &type) || field(&q, end, &value)) return -1;
                if (carry_event(c, row, cpu, t, type, value) < 0) return -2;
            }
            return 0;
        }
        if (cut_flush(s) < 0) return -2;
        const char *rest = q - 1; /* from the ':' before the first type */
        Col *h = &c->held[row];
        if (t == c->from && h->n) { /* joins the row's line at 0 */
            int rc = col_push(&s->out, h->p, h->n);
            h->n = 0;
            return rc < 0 || col_push(&s->out, rest, line_end - rest) < 0 ? -2 : 0;
        }
        if (put_text(s, "2:%lld:%lld:%lld:%lld:%lld", (long long)cpu, (long long)appl,
                     (long long)task, (long long)thread, (long long)(t - c->from)) < 0)
            return -2;
        return col_push(&s->out, rest, line_end - rest) < 0 ? -2 : 0;
    }
    /* a communication: logical send t, physical send, then the receiver */
    int64_t psend, rcpu, rappl, rtask, rthread, lrecv, precv;
    if (field(&q, end, &psend) || field(&q, end, &rcpu) || field(&q, end, &rappl) ||
        field(&q, end, &rtask) || field(&q, end, &rthread) || field(&q, end, &lrecv) ||
        field(&q, end, &precv))
        return -1;
    /* every one of the four times inside: a receive may be posted (logical receive) before
     * the message is sent, so the earliest is not always the send's */
    int64_t lo = t, hi = t;
    const int64_t times[3] = {psend, lrecv, precv};
    for (int k = 0; k < 3; k++) {
        if (times[k] < lo) lo = times[k];
        if (times[k] > hi) hi = times[k];
    }
    if (lo < c->from || hi > to) return 0;
    if (cut_flush(s) < 0) return -2;
    return put_text(s, "3:%lld:%lld:%lld:%lld:%lld:%lld:%lld:%lld:%lld:%lld:%lld:%lld",
                    (long long)cpu, (long long)appl, (long long)task, (long long)thread,
                    (long long)(t - c->from), (long long)(psend - c->from), (long long)rcpu,
                    (long long)rappl, (long long)rtask, (long long)rthread,
                    (long long)(lrecv - c->from), (long long)(precv - c->from)) < 0 ? -2 :
           col_push(&s->out, q - 1, line_end - (q - 1)) < 0 ? -2 : 0;
}

static int scan_lines(Scanner *s, const char *p, const char *end) {
    while (p < end) {
        const char *nl = memchr(p, '\n', end - p);
        const char *stop = nl ? nl : end;
        const char *e = stop;
        if (e > p && e[-1] == '\r') e--;
        int rc = s->cut ? (s->cut_done ? 0 : cut_line(s, p, e, nl))
                 : s->row_map ? rewrite_line(s, p, e, nl) : scan_line(s, p, e);
        if (rc == 1) {
            s->cut_done = 1;
            rc = 0;
        }
        if (rc == -2) return -2;
        if (rc == -1) s->bad++;
        s->lines++;
        p = nl ? nl + 1 : end;
    }
    return 0;
}

static PyObject *Scanner_feed(Scanner *s, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    const char *p = view.buf, *end = p + view.len;
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS;
    if (s->rest_n) { /* complete the line left over from the previous block */
        const char *nl = memchr(p, '\n', end - p);
        size_t take = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p); /* with its newline */
        if (s->rest_n + take > s->rest_cap) {
            size_t cap = (s->rest_n + take) * 2;
            char *q = realloc(s->rest, cap);
            if (!q) rc = -2;
            else {
                s->rest = q;
                s->rest_cap = cap;
            }
        }
        if (!rc) {
            memcpy(s->rest + s->rest_n, p, take);
            s->rest_n += take;
            p += take;
            if (nl) {
                rc = scan_lines(s, s->rest, s->rest + s->rest_n);
                s->rest_n = 0;
            }
        }
    }
    if (!rc && p < end) {
        const char *last = end;
        while (last > p && last[-1] != '\n') last--;
        rc = scan_lines(s, p, last);
        if (!rc && last < end) {
            size_t n = end - last;
            if (n > s->rest_cap) {
                char *q = realloc(s->rest, n * 2);
                if (!q) rc = -2;
                else {
                    s->rest = q;
                    s->rest_cap = n * 2;
                }
            }
            if (!rc) {
                memcpy(s->rest, last, n);
                s->rest_n = n;
            }
        }
    }
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&view);
    if (rc == -2) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* take(final=False): the columns scanned so far (then emptied); with final, the last line
 * too, even without a newline */
static PyObject *Scanner_take(Scanner *s, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"final", NULL};
    int final = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p", kwlist, &final)) return NULL;
    if (final && s->rest_n) {
        int rc = scan_lines(s, s->rest, s->rest + s->rest_n);
        s->rest_n = 0;
        if (rc == -2) return PyErr_NoMemory();
    }
    if (final && s->cut && (cut_flush(s) < 0 || release_held(s) < 0)) return PyErr_NoMemory();
    PyObject *out = PyDict_New();
    if (!out) return NULL;
    for (int i = 0; i < NCOLS; i++) {
        PyObject *b = PyBytes_FromStringAndSize(s->cols[i].p ? s->cols[i].p : "",
                                                (Py_ssize_t)s->cols[i].n);
        free(s->cols[i].p);
        s->cols[i].p = NULL;
        s->cols[i].n = s->cols[i].cap = 0;
        if (!b || PyDict_SetItemString(out, col_names[i], b) < 0) {
            Py_XDECREF(b);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(b);
    }
    PyObject *text = PyBytes_FromStringAndSize(s->out.p ? s->out.p : "", (Py_ssize_t)s->out.n);
    s->out.n = 0; /* the buffer is kept for the next block */
    if (!text || PyDict_SetItemString(out, "text", text) < 0) {
        Py_XDECREF(text);
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(text);
    PyObject *bad = PyLong_FromLongLong(s->bad), *lines = PyLong_FromLongLong(s->lines);
    PyDict_SetItemString(out, "bad", bad);
    PyDict_SetItemString(out, "lines", lines);
    Py_XDECREF(bad);
    Py_XDECREF(lines);
    PyObject *seen = PyList_New(s->nseen);
    if (!seen) {
        Py_DECREF(out);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < s->nseen; i++)
        PyList_SET_ITEM(seen, i, PyLong_FromLongLong(s->seen[i]));
    PyDict_SetItemString(out, "types", seen);
    Py_DECREF(seen);
    return out;
}

static PyMethodDef Scanner_methods[] = {
    {"feed", (PyCFunction)Scanner_feed, METH_VARARGS,
     "feed(block): scan a block of trace text (lines may be split between blocks)"},
    {"take", (PyCFunction)(void (*)(void))Scanner_take, METH_VARARGS | METH_KEYWORDS,
     "take(final=False) -> dict of the column bytes scanned since the last take (ev_*, st_*, "
     "cm_*), the rewritten text (text, with row_map), counts so far (bad, lines) and the "
     "distinct event types (types, with distinct_types=True); final also scans a last line "
     "without a newline"},
    {NULL}};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nsys2prv.engine._engine.PrvScanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "one-pass reader of .prv text into compact columns",
    .tp_methods = Scanner_methods,
    .tp_init = (initproc)Scanner_init,
    .tp_new = PyType_GenericNew,
};

Scanner *scanner_for_records(PyObject *obj) {
    if (!PyObject_TypeCheck(obj, &ScannerType)) {
        PyErr_Format(PyExc_TypeError, "a PrvScanner is needed, not %.100s", Py_TYPE(obj)->tp_name);
        return NULL;
    }
    Scanner *s = (Scanner *)obj;
    if (s->cut || s->row_map) {
        PyErr_SetString(PyExc_ValueError, "a PrvScanner that cuts or rewrites works on the "
                                          "text: merged records go only into a reading one");
        return NULL;
    }
    if (s->rest_n) {
        PyErr_SetString(PyExc_ValueError, "the PrvScanner holds part of a line: records "
                                          "would come before its end");
        return NULL;
    }
    return s;
}

int scan_register(PyObject *m) {
    if (PyType_Ready(&ScannerType) < 0) return -1;
    Py_INCREF(&ScannerType);
    return PyModule_AddObject(m, "PrvScanner", (PyObject *)&ScannerType);
}
