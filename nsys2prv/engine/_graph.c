/*
 * The dependency graph of a run, evaluated in topological order (nsys2prv/analysis/
 * critical_path.py): one pass over the nodes, each a few array reads, without the GIL.
 *
 * Nodes 0..n-1 are given in topological order (every predecessor before its successor) with
 * their measured start and end (ns). Node i's predecessors are the previous node of its row,
 * row_prev[i] (-1: none; lag 0, edge kind 0: implicit, so that the most numerous edges cost
 * one int32 a node), and pred_node[pred_ptr[i] .. pred_ptr[i+1]), each of these edges with a
 * lag: the edge makes i ready at end[pred] + lag (a launch arrow that leaves from inside a
 * host node has a negative lag). An edge whose measured ready time is after the node's
 * measured start explained nothing in the run: it is ignored.
 *
 * graph_replay fills new_start, new_end and binding (the edge that set each node's start:
 * its index, -2 for the row's previous node, -1 for a root) for durations scaled by
 * scale[i] and the edges of the kinds kind_on[] allows:
 *
 *   slack[i]     = start[i] - max measured ready over its valid edges (the waiting no edge
 *                  explains, kept as it is: dependencies are fixed, durations scale)
 *   new_start[i] = max new ready over its valid, allowed edges + slack[i]; a root (no such
 *                  edge) keeps its measured start
 *   new_end[i]   = new_start[i] + round((end[i] - start[i]) * scale[i])
 *
 * With scale 1 and every kind allowed, new_start == start and new_end == end.
 *
 * graph_path walks the binding edges back from a node and writes the nodes it passes
 * (latest first) while their end is after stop_time.
 *
 * Each takes an optional last argument `first`: nodes 0..first-1 are given, not computed
 * (a slab of the graph evaluated after the slabs before it: those of its predecessors that
 * are in earlier slabs come first, with their times as evaluated there). graph_replay keeps
 * their new_start and new_end, graph_float only lowers their latest end (what the slab
 * asks of them), graph_path stops before them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_views.h"

/* The buffers of the objects `o` (an entry NULL: none), with their item sizes, whether
 * written, and their names for errors; on failure every buffer taken is released. */
static int get_all(PyObject **o, View *b, int count, const Py_ssize_t *size,
                   const int *writable, const char *const *names) {
    memset(b, 0, sizeof(View) * (size_t)count);
    for (int i = 0; i < count; i++)
        if (o[i] != NULL && view_get(o[i], &b[i], size[i], writable[i], names[i]) < 0) {
            views_release(b, count);
            return -1;
        }
    return 0;
}

/* The graph's buffers, the first seven of graph_replay and graph_float (start end pred_ptr
 * pred_node pred_lag edge_kind kind_on): their node and edge counts, or -1 when their
 * lengths do not agree. */
static int graph_sizes(const View *b, Py_ssize_t *n, Py_ssize_t *m) {
    *n = b[0].view.len / 8;
    *m = b[3].view.len / 4;
    return (b[1].view.len / 8 != *n || b[2].view.len / 8 != *n + 1 ||
            b[4].view.len / 8 != *m || b[5].view.len != *m || b[6].view.len < 256) ? -1 : 0;
}

#define NBUF 12
#define ORDER_EDGE (-2) /* binding: the previous node of the row */

static PyObject *graph_replay(PyObject *self, PyObject *args) {
    PyObject *o[NBUF];
    Py_ssize_t first = 0;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOO|n", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7], &o[8], &o[9], &o[10], &o[11], &first))
        return NULL;
    /* start end pred_ptr pred_node pred_lag edge_kind kind_on scale new_start new_end
     * binding row_prev */
    static const Py_ssize_t size[NBUF] = {8, 8, 8, 4, 8, 1, 1, 8, 8, 8, 8, 4};
    static const int writable[NBUF] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0};
    static const char *const names[NBUF] = {
        "start", "end", "pred_ptr", "pred_node", "pred_lag", "edge_kind", "kind_on", "scale",
        "new_start", "new_end", "binding", "row_prev"};
    View b[NBUF];
    if (get_all(o, b, NBUF, size, writable, names) < 0) return NULL;
    Py_ssize_t n, m;
    if (graph_sizes(b, &n, &m) < 0 || b[7].view.len / 8 != n || b[8].view.len / 8 != n ||
        b[9].view.len / 8 != n || b[10].view.len / 8 != n || b[11].view.len / 4 != n) {
        views_release(b, NBUF);
        PyErr_SetString(PyExc_ValueError, "graph_replay: array lengths do not match");
        return NULL;
    }
    const int64_t *start = b[0].view.buf, *end = b[1].view.buf, *ptr = b[2].view.buf;
    const int32_t *pred = b[3].view.buf;
    const int64_t *lag = b[4].view.buf;
    const uint8_t *kind = b[5].view.buf, *on = b[6].view.buf;
    const double *scale = b[7].view.buf;
    int64_t *new_start = b[8].view.buf, *new_end = b[9].view.buf, *binding = b[10].view.buf;
    const int32_t *row_prev = b[11].view.buf;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = first < 0 ? 0 : first; i < n && !bad; i++) {
        int64_t lo = ptr[i], hi = ptr[i + 1];
        if (lo < 0 || hi < lo || hi > m) {
            bad = 1;
            break;
        }
        int64_t measured = INT64_MIN, ready = INT64_MIN, best = -1, best_r0 = INT64_MIN;
        int32_t q = row_prev[i];
        if (q >= 0 && q < i && end[q] <= start[i]) { /* the row's order: lag 0, kind 0 */
            measured = end[q];
            if (on[0]) {
                ready = new_end[q];
                best = ORDER_EDGE;
                best_r0 = end[q];
            }
        }
        for (int64_t e = lo; e < hi; e++) {
            int32_t p = pred[e];
            if (p < 0 || p >= i) continue; /* not before it: no edge of a topological order */
            int64_t r0 = end[p] + lag[e];
            if (r0 > start[i]) continue; /* explained nothing in the run */
            if (r0 > measured) measured = r0;
            if (!on[kind[e]]) continue;
            int64_t r = new_end[p] + lag[e];
            if (r > ready || (r == ready && best != -1 && r0 > best_r0)) {
                ready = r;
                best = e;
                best_r0 = r0;
            }
        }
        int64_t s;
        if (best == -1) {
            s = start[i]; /* a root, or every edge switched off: where it was */
        } else {
            s = ready + (start[i] - measured);
        }
        double d = (double)(end[i] - start[i]) * scale[i];
        new_start[i] = s;
        new_end[i] = s + (int64_t)llround(d);
        binding[i] = best;
    }
    Py_END_ALLOW_THREADS
    views_release(b, NBUF);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "graph_replay: pred_ptr is not increasing");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *graph_path(PyObject *self, PyObject *args) {
    PyObject *o_bind, *o_pred, *o_end, *o_out, *o_prev;
    long long from, stop;
    Py_ssize_t first = 0;
    if (!PyArg_ParseTuple(args, "OOOLLOO|n", &o_bind, &o_pred, &o_end, &from, &stop, &o_out,
                          &o_prev, &first))
        return NULL;
    View b[5];
    memset(b, 0, sizeof b);
    if (view_get(o_bind, &b[0], 8, 0, "binding") < 0 ||
        view_get(o_pred, &b[1], 4, 0, "pred_node") < 0 ||
        view_get(o_end, &b[2], 8, 0, "new_end") < 0 || view_get(o_out, &b[3], 8, 1, "out") < 0 ||
        view_get(o_prev, &b[4], 4, 0, "row_prev") < 0) {
        views_release(b, 5);
        return NULL;
    }
    const int64_t *binding = b[0].view.buf, *end = b[2].view.buf;
    const int32_t *pred = b[1].view.buf, *row_prev = b[4].view.buf;
    int64_t *out = b[3].view.buf;
    Py_ssize_t n = b[0].view.len / 8, m = b[1].view.len / 4, cap = b[3].view.len / 8;
    if (b[4].view.len / 4 != n) {
        views_release(b, 5);
        PyErr_SetString(PyExc_ValueError, "graph_path: row_prev has one entry a node");
        return NULL;
    }
    Py_ssize_t k = 0;
    int64_t i = from;
    Py_BEGIN_ALLOW_THREADS
    while (i >= first && i >= 0 && i < n && k < cap && end[i] > stop) {
        out[k++] = i;
        int64_t e = binding[i], p;
        if (e == ORDER_EDGE)
            p = row_prev[i];
        else if (e >= 0 && e < m)
            p = pred[e];
        else
            break;
        if (p < 0 || p >= i) break; /* never forward: the order is topological */
        i = p;
    }
    Py_END_ALLOW_THREADS
    views_release(b, 5);
    return PyLong_FromSsize_t(k);
}

/* graph_float(start, end, pred_ptr, pred_node, pred_lag, edge_kind, kind_on, until,
 * latest_end): the latest each node may end without moving any work past `until`, every
 * node keeping its measured slack (the backward pass of the same graph, as measured). */
static PyObject *graph_float(PyObject *self, PyObject *args) {
    PyObject *o[10];
    long long until;
    Py_ssize_t first = 0;
    int capped = 0; /* latest_end holds, on entry, a cap on each node's (later slabs' asks) */
    if (!PyArg_ParseTuple(args, "OOOOOOOLOO|np", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &until, &o[8], &o[9], &first, &capped))
        return NULL;
    o[7] = NULL; /* (no scale: the float is of the graph as measured) */
    static const Py_ssize_t size[10] = {8, 8, 8, 4, 8, 1, 1, 0, 8, 4};
    static const int writable[10] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 0};
    static const char *const names[10] = {"start", "end", "pred_ptr", "pred_node", "pred_lag",
                                          "edge_kind", "kind_on", "", "latest_end",
                                          "row_prev"};
    View b[10];
    if (get_all(o, b, 10, size, writable, names) < 0) return NULL;
    Py_ssize_t n, m;
    if (graph_sizes(b, &n, &m) < 0 || b[8].view.len / 8 != n || b[9].view.len / 4 != n) {
        views_release(b, 10);
        PyErr_SetString(PyExc_ValueError, "graph_float: array lengths do not match");
        return NULL;
    }
    const int64_t *start = b[0].view.buf, *end = b[1].view.buf, *ptr = b[2].view.buf;
    const int32_t *pred = b[3].view.buf;
    const int64_t *lag = b[4].view.buf;
    const uint8_t *kind = b[5].view.buf, *on = b[6].view.buf;
    int64_t *latest = b[8].view.buf;
    const int32_t *row_prev = b[9].view.buf;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t v = until > end[i] ? until : end[i];
        latest[i] = capped && latest[i] < v ? latest[i] : v;
    }
    for (Py_ssize_t i = n - 1; i >= (first < 0 ? 0 : first) && !bad; i--) {
        int64_t lo = ptr[i], hi = ptr[i + 1];
        if (lo < 0 || hi < lo || hi > m) {
            bad = 1;
            break;
        }
        int64_t measured = INT64_MIN;
        int32_t q = row_prev[i];
        int order = q >= 0 && q < i && end[q] <= start[i];
        if (order) measured = end[q];
        for (int64_t e = lo; e < hi; e++) {
            int32_t p = pred[e];
            if (p < 0 || p >= i) continue;
            int64_t r0 = end[p] + lag[e];
            if (r0 <= start[i] && r0 > measured) measured = r0;
        }
        if (measured == INT64_MIN) continue; /* a root: nothing before it to delay */
        int64_t latest_start = latest[i] - (end[i] - start[i]);
        int64_t latest_ready = latest_start - (start[i] - measured);
        if (order && on[0] && latest_ready < latest[q]) latest[q] = latest_ready;
        for (int64_t e = lo; e < hi; e++) {
            int32_t p = pred[e];
            if (p < 0 || p >= i || !on[kind[e]]) continue;
            if (end[p] + lag[e] > start[i]) continue;
            int64_t l = latest_ready - lag[e];
            if (l < latest[p]) latest[p] = l;
        }
    }
    Py_END_ALLOW_THREADS
    views_release(b, 10);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "graph_float: pred_ptr is not increasing");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef graph_methods[] = {
    {"graph_float", graph_float, METH_VARARGS,
     "graph_float(start, end, pred_ptr, pred_node, pred_lag, edge_kind, kind_on, until, "
     "latest_end, row_prev[, first, capped]): the latest end of each node that delays "
     "nothing past `until` (capped: latest_end holds caps on entry)"},
    {"graph_replay", graph_replay, METH_VARARGS,
     "graph_replay(start, end, pred_ptr, pred_node, pred_lag, edge_kind, kind_on, scale, "
     "new_start, new_end, binding, row_prev[, first]): evaluate the graph (see _graph.c)"},
    {"graph_path", graph_path, METH_VARARGS,
     "graph_path(binding, pred_node, new_end, from, stop_time, out, row_prev[, first]) -> count of "
     "nodes written to out, walking the binding edges back from node `from`"},
    {NULL, NULL, 0, NULL},
};

int graph_register(PyObject *m) { return PyModule_AddFunctions(m, graph_methods); }
