/*
 * What the Merger (_engine.c) uses of a PrvScanner (_scan.c) to put merged records straight
 * into its columns (Merger.scan), without formatting them as text and scanning it back: the
 * functions that scanning a line ends in, so that both give the same columns.
 *
 * The push functions return 0, -1 where scanning the text would find the line malformed
 * (the caller counts it in `bad`), -2 when out of memory. They take no Python object and
 * may run without the GIL.
 */
#ifndef NSYS2PRV_SCAN_H
#define NSYS2PRV_SCAN_H

#include <Python.h>
#include <stdint.h>

typedef struct Scanner Scanner;

/* `obj` as a scanner that reads records into columns (borrowed), or NULL with TypeError (not
 * a PrvScanner) or ValueError (cut or rewrite mode, which need the text; part of a line
 * still pending) */
Scanner *scanner_for_records(PyObject *obj);

/* the row of a line's (appl, task, thread) ids, or -1 when the header has none (bad line) */
int64_t scanner_row(const Scanner *s, int64_t appl, int64_t task, int64_t thread);

/* a state line (kept if the row's states are asked for) */
int scanner_state(Scanner *s, int64_t row, int64_t begin, int64_t end, int64_t state);

/* one type:value pair of an event line */
int scanner_event(Scanner *s, int64_t row, int64_t time, int64_t type, int64_t value);

/* the "type:value[:type:value...]" text of an event line (after its time's ':') */
int scanner_pairs(Scanner *s, int64_t row, int64_t time, const char *p, const char *end);

/* whether communication lines are read at all (else they are skipped, malformed or not) */
int scanner_wants_comms(const Scanner *s);

/* a communication line */
int scanner_comm(Scanner *s, int64_t send_row, int64_t lsend, int64_t psend, int64_t recv_row,
                 int64_t lrecv, int64_t precv, int64_t size, int64_t tag);

/* lines read, and how many of them were malformed, without their text */
void scanner_count(Scanner *s, long long lines, long long bad);

#endif
