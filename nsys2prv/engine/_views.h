/*
 * The buffers of the arrays Python hands the engine's functions (numpy arrays, bytes),
 * borrowed for the length of a call: shared by _graph.c and _timeline.c.
 */
#ifndef NSYS2PRV_VIEWS_H
#define NSYS2PRV_VIEWS_H

#include <Python.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    int held; /* 0: nothing to release (None was given, or taking it failed) */
} View;

/* The C-contiguous buffer of `obj`, items of `itemsize` bytes, `writable` for an output;
 * None gives an empty view, not held. On failure: an exception set, -1 (release the views
 * taken so far with views_release). */
static inline int view_get(PyObject *obj, View *b, Py_ssize_t itemsize, int writable,
                           const char *name) {
    memset(b, 0, sizeof *b);
    if (obj == Py_None) return 0;
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &b->view, flags) < 0) return -1;
    b->held = 1;
    if (b->view.itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: items of %zd bytes expected, got %zd", name,
                     itemsize, b->view.itemsize);
        return -1;
    }
    return 0;
}

static inline void views_release(View *b, int n) {
    for (int i = 0; i < n; i++)
        if (b[i].held) PyBuffer_Release(&b[i].view);
}

/* items in a view (0 for None) */
static inline Py_ssize_t view_len(const View *b) {
    return b->held ? b->view.len / b->view.itemsize : 0;
}

#endif
