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
 * Rows are numbered as in the header: row = task_rows[appl_offsets[appl-1] + task-1] +
 * thread-1; task_rows has one more entry than there are tasks (the row count). Lines whose ids fall outside the header are counted in `bad` and skipped
 * (nsys2prv check reports them; the analysis only reads).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *p;
    size_t n, cap; /* in bytes */
} Col;

static int col_push(Col *c, const void *v, size_t size) {
    if (c->n + size > c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 1 << 16;
        while (cap < c->n + size) cap *= 2;
        char *p = realloc(c->p, cap);
        if (!p) return -1;
        c->p = p;
        c->cap = cap;
    }
    memcpy(c->p + c->n, v, size);
    c->n += size;
    return 0;
}

enum { EV_ROW, EV_TIME, EV_TYPE, EV_VALUE, ST_ROW, ST_BEGIN, ST_END, ST_STATE, CM_SROW,
       CM_LSEND, CM_PSEND, CM_RROW, CM_LRECV, CM_PRECV, CM_SIZE, CM_TAG, NCOLS };

static const char *col_names[NCOLS] = {
    "ev_row", "ev_time", "ev_type", "ev_value", "st_row", "st_begin", "st_end", "st_state",
    "cm_send_row", "cm_lsend", "cm_psend", "cm_recv_row", "cm_lrecv", "cm_precv", "cm_size",
    "cm_tag"};

typedef struct {
    PyObject_HEAD
    Col cols[NCOLS];
    int64_t *types; /* sorted; NULL = every type */
    Py_ssize_t ntypes;
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
    Col out; /* rewrite mode: the rewritten text not yet taken */
    char *rest; /* a line split between two blocks */
    size_t rest_n, rest_cap;
    long long bad, lines;
    int failed;
} Scanner;

static void Scanner_dealloc(Scanner *s) {
    for (int i = 0; i < NCOLS; i++) free(s->cols[i].p);
    free(s->types);
    free(s->task_rows);
    free(s->appl_offsets);
    free(s->state_mask);
    free(s->rest);
    free(s->seen);
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
                             "distinct_types", "row_map", NULL};
    PyObject *task_rows, *appl_offsets, *types = Py_None, *state_rows = Py_None;
    PyObject *row_map = Py_None;
    int comms = 0, distinct = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOppO", kwlist, &task_rows, &appl_offsets,
                                     &types, &state_rows, &comms, &distinct, &row_map))
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
    Py_ssize_t lo = 0, hi = s->ntypes;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (s->types[mid] < type) lo = mid + 1;
        else hi = mid;
    }
    return lo < s->ntypes && s->types[lo] == type;
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
        if (s->state_mask && (r >= s->nrows || !s->state_mask[r])) return 0;
        int32_t row = (int32_t)r, st = (int32_t)state;
        PUSH(ST_ROW, row);
        PUSH(ST_BEGIN, begin);
        PUSH(ST_END, stop);
        PUSH(ST_STATE, st);
    } else if (kind == '2') {
        int64_t time;
        if (field(&p, end, &cpu) || field(&p, end, &appl) || field(&p, end, &task) ||
            field(&p, end, &thread) || field(&p, end, &time))
            return -1;
        int64_t r = row_of(s, appl, task, thread);
        if (r < 0) return -1;
        int32_t row = (int32_t)r;
        while (p < end) {
            int64_t type, value;
            if (field(&p, end, &type) || field(&p, end, &value)) return -1;
            if (!wanted(s, type)) continue;
            if (s->distinct) {
                if (see_type(s, type) < 0) return -2;
                continue;
            }
            int32_t ty = (int32_t)type;
            PUSH(EV_ROW, row);
            PUSH(EV_TIME, time);
            PUSH(EV_TYPE, ty);
            PUSH(EV_VALUE, value);
        }
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
        int32_t srow = (int32_t)rs, rrow = (int32_t)rr;
        PUSH(CM_SROW, srow);
        PUSH(CM_LSEND, ls);
        PUSH(CM_PSEND, ps);
        PUSH(CM_RROW, rrow);
        PUSH(CM_LRECV, lr);
        PUSH(CM_PRECV, pr);
        PUSH(CM_SIZE, size);
        PUSH(CM_TAG, tag);
    }
    return 0;
}

static int scan_lines(Scanner *s, const char *p, const char *end) {
    while (p < end) {
        const char *nl = memchr(p, '\n', end - p);
        const char *stop = nl ? nl : end;
        const char *e = stop;
        if (e > p && e[-1] == '\r') e--;
        int rc = s->row_map ? rewrite_line(s, p, e, nl) : scan_line(s, p, e);
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

int scan_register(PyObject *m) {
    if (PyType_Ready(&ScannerType) < 0) return -1;
    Py_INCREF(&ScannerType);
    return PyModule_AddObject(m, "PrvScanner", (PyObject *)&ScannerType);
}
