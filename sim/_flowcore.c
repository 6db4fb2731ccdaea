/* sim._flowcore: the compiled flow-event core of sim.engine.
 *
 * run() replays a checked DAG of flows and computes, given as flat arrays
 * (sim/engine.py prepares them), and returns the release/drain/finish times,
 * the event log, the channels' busy seconds and (optionally) the rate log.
 * It is the pure-Python reference (sim/pycore.py: an agenda, a SimPy clock,
 * sim.sharing.LinkSharing) ported statement by statement onto a heap agenda
 * without SimPy: the same instants, handled in the same order, with the same
 * double arithmetic, so both give identical results (tests/sim/test_compiled.py).
 *
 * The top of the core's layers, each calling only the ones below it:
 *   _flowcore.c   this event loop and the Python module
 *   _flowshare.c  the sharing kept between events: the lazy update, and which
 *                 solver an update takes
 *   _flowclass.c  the solve by bottleneck classes  |  _flowwhole.c  the whole solve
 *   _flowclock.c  the classes' clocks              |  _flownet.h   the network
 *   _flowvec.c    containers: ivec, the changed set, the finish heap
 * Each header says what its unit offers (tests/test_layout.py checks the layers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_flowclock.h"
#include "_flownet.h"
#include "_flowshare.h"
#include "_flowvec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Bumped whenever run()'s signature or results change: sim/engine.py refuses
 * a stale build instead of misreading it. */
#define CORE_VERSION 3
#define FINISH_REL_TOL 1e-12
enum { RELEASE = 0, DRAIN = 1, DONE = 2 };

typedef struct {
    double t;
    int64_t seq;
    int action, node;
} agenda_item;

typedef struct {
    int n;
    /* the problem */
    const int *route_ptr, *child_ptr, *child_idx;
    const double *size, *duration;
    const char *is_flow;
    double *ready;
    int *waiting;
    double latency;
    /* the run */
    double now;
    int64_t seq;
    agenda_item *agenda;
    ptrdiff_t agenda_n, agenda_cap;
    ivec work, arrivals, spare, leaving, done;
    double *release_s, *drain_s, *finish_s;
    double *remaining, *updated, *predicted;
    int64_t *dseq;
    fheap_t fh; /* draining flows by (predicted finish, drain order), but by classes */
    share_t share;
    int nomem;
    /* the records */
    PyObject *ids, *events, *rate_log, *now_obj, *kinds[3];
    PyTypeObject *event_type; /* sim.records.Event: a tuple of three */
    int failed; /* a Python error is set */
} run_t;

/* -- the agenda: (time, seq, action, node), earliest first ------------------- */

static int agenda_less(const agenda_item *a, const agenda_item *b) {
    if (a->t != b->t) return a->t < b->t;
    return a->seq < b->seq;
}

static void at(run_t *r, double t, int action, int node) {
    if (r->agenda_n == r->agenda_cap) {
        ptrdiff_t cap = r->agenda_cap ? 2 * r->agenda_cap : 256;
        agenda_item *a = realloc(r->agenda, (size_t)cap * sizeof(agenda_item));
        if (a == NULL) {
            r->nomem = 1;
            return;
        }
        r->agenda = a;
        r->agenda_cap = cap;
    }
    agenda_item item = {t, ++r->seq, action, node};
    ptrdiff_t i = r->agenda_n++;
    while (i > 0) {
        ptrdiff_t parent = (i - 1) / 2;
        if (!agenda_less(&item, &r->agenda[parent])) break;
        r->agenda[i] = r->agenda[parent];
        i = parent;
    }
    r->agenda[i] = item;
}

static agenda_item agenda_pop(run_t *r) {
    agenda_item top = r->agenda[0];
    agenda_item last = r->agenda[--r->agenda_n];
    ptrdiff_t n = r->agenda_n, i = 0;
    while (1) {
        ptrdiff_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && agenda_less(&r->agenda[child + 1], &r->agenda[child])) child++;
        if (!agenda_less(&r->agenda[child], &last)) break;
        r->agenda[i] = r->agenda[child];
        i = child;
    }
    if (n > 0) r->agenda[i] = last;
    return top;
}

/* -- the event log -------------------------------------------------------------- */

static void log_event(run_t *r, int kind, int i) {
    if (r->failed) return;
    /* An Event (a tuple subclass without extra fields), filled as tuple() fills one. */
    PyObject *item = r->event_type->tp_alloc(r->event_type, 3);
    if (item == NULL) {
        r->failed = 1;
        return;
    }
    PyObject *fields[3] = {r->now_obj, r->kinds[kind], PyList_GET_ITEM(r->ids, i)};
    for (int k = 0; k < 3; k++) {
        Py_INCREF(fields[k]);
        PyTuple_SET_ITEM(item, k, fields[k]);
    }
    if (PyList_Append(r->events, item) < 0) r->failed = 1;
    Py_DECREF(item);
}

static void set_now(run_t *r, double t) {
    r->now = t;
    PyObject *obj = PyFloat_FromDouble(t);
    if (obj == NULL) {
        r->failed = 1;
        return;
    }
    Py_XSETREF(r->now_obj, obj);
}

/* -- the DAG (sim.pycore._Run: _release, _drain, _finish, _run_work) ---------- */

static void finish(run_t *r, int i) {
    double now = r->now;
    r->finish_s[i] = now;
    log_event(r, DONE, i);
    for (int p = r->child_ptr[i]; p < r->child_ptr[i + 1]; p++) {
        int c = r->child_idx[p];
        r->waiting[c] -= 1;
        if (now > r->ready[c]) r->ready[c] = now;
        if (r->waiting[c] == 0) {
            if (r->ready[c] > now)
                at(r, r->ready[c], RELEASE, c);
            else
                ivec_push(&r->work, c, &r->nomem);
        }
    }
}

static void drain(run_t *r, int i) {
    r->drain_s[i] = r->now;
    log_event(r, DRAIN, i);
    if (r->size[i] == 0)
        finish(r, i);
    else
        ivec_push(&r->arrivals, i, &r->nomem);
}

static void release(run_t *r, int i) {
    double now = r->now;
    r->release_s[i] = now;
    log_event(r, RELEASE, i);
    if (!r->is_flow[i]) {
        if (r->duration[i] > 0)
            at(r, now + r->duration[i], DONE, i);
        else
            finish(r, i);
        return;
    }
    int hops = r->route_ptr[i + 1] - r->route_ptr[i];
    if (hops == 0) {
        r->drain_s[i] = now;
        finish(r, i);
    } else if (r->latency > 0) {
        at(r, now + (double)hops * r->latency, DRAIN, i);
    } else {
        drain(r, i);
    }
}

static void run_work(run_t *r) {
    for (ptrdiff_t k = 0; k < r->work.n; k++) /* releases may release more */
        release(r, r->work.v[k]);
    r->work.n = 0;
}

/* -- the network (sim.pycore._Run: _departures, _reshare) ----------------------- */

static int cmp_dseq_of(const void *a, const void *b, const int64_t *dseq) {
    int64_t x = dseq[*(const int *)a], y = dseq[*(const int *)b];
    return (x > y) - (x < y);
}

static void departures(run_t *r) {
    /* Pop the flows whose predicted finish is now, in drain order. */
    double limit = r->now * (1.0 + FINISH_REL_TOL);
    r->done.n = 0;
    if (r->share.cls != NULL) /* the classes keep the clocks */
        clocks_pop_due(&r->share.cls->clk, limit, &r->done, &r->nomem);
    while (r->fh.n && r->predicted[r->fh.v[0]] <= limit)
        ivec_push(&r->done, fheap_pop(&r->fh), &r->nomem);
    for (ptrdiff_t a = 1; a < r->done.n; a++) { /* insertion sort: a handful */
        int f = r->done.v[a];
        ptrdiff_t b = a;
        while (b > 0 && cmp_dseq_of(&r->done.v[b - 1], &f, r->dseq) > 0) {
            r->done.v[b] = r->done.v[b - 1];
            b--;
        }
        r->done.v[b] = f;
    }
}

static void snapshot(run_t *r) {
    if (r->failed) return;
    PyObject *rates = PyTuple_New(r->share.net.d_count);
    if (rates == NULL) {
        r->failed = 1;
        return;
    }
    Py_ssize_t k = 0;
    for (int f = r->share.net.d_head; f >= 0; f = r->share.net.d_next[f], k++) {
        PyObject *pair =
            Py_BuildValue("(Od)", PyList_GET_ITEM(r->ids, f), r->share.net.fs[f].rate);
        if (pair == NULL) {
            Py_DECREF(rates);
            r->failed = 1;
            return;
        }
        PyTuple_SET_ITEM(rates, k, pair);
    }
    PyObject *snap = PyTuple_Pack(2, r->now_obj, rates);
    Py_DECREF(rates);
    if (snap == NULL || PyList_Append(r->rate_log, snap) < 0) r->failed = 1;
    Py_XDECREF(snap);
}

static void reshare(run_t *r) {
    double now = r->now;
    ivec arriving = r->arrivals; /* swap: new arrivals go to the spare buffer */
    r->arrivals = r->spare;
    r->arrivals.n = 0;
    r->spare = arriving;
    for (ptrdiff_t k = 0; k < arriving.n; k++) {
        int i = arriving.v[k];
        r->dseq[i] = r->seq = r->seq + 1;
        r->remaining[i] = r->size[i];
        r->updated[i] = now;
    }
    int was = r->share.cls != NULL;
    if (share_update(&r->share, now, arriving.v, arriving.n, r->leaving.v, r->leaving.n) < 0) {
        r->nomem = 1;
        return;
    }
    const flow_share *fs = r->share.net.fs;
    ptrdiff_t nchanged = r->share.cls != NULL ? 0 : r->share.net.changed.flows.n;
    if (r->share.cls != NULL && !was) /* the classes' clocks take over */
        for (; r->fh.n; r->fh.n--) r->fh.pos[r->fh.v[r->fh.n - 1]] = -1;
    if (r->share.cls == NULL && was) { /* back: every flow's bytes left are as of now */
        r->share.net.changed.flows.n = 0;
        for (int f = r->share.net.d_head; f >= 0; f = r->share.net.d_next[f])
            changed_push(&r->share.net.changed, f, 0.0, &r->share.net.nomem);
        nchanged = r->share.net.changed.flows.n;
    }
    for (ptrdiff_t k = 0; k < nchanged; k++) {
        int f = r->share.net.changed.flows.v[k];
        double old = r->share.net.changed.old[k];
        if (old > 0.0) {
            r->remaining[f] -= old * (now - r->updated[f]);
            r->updated[f] = now;
        }
        double rf = fs[f].rate, left = r->remaining[f];
        r->predicted[f] = rf > 0.0 ? now + (left > 0.0 ? left : 0.0) / rf : INFINITY;
        fheap_set(&r->fh, f);
    }
    if (r->rate_log != NULL) snapshot(r);
}

/* -- the clock (sim.pycore._Run: _instant, _next_s, run) ------------------------ */

static void instant(run_t *r) {
    while (r->agenda_n && r->agenda[0].t <= r->now) {
        agenda_item it = agenda_pop(r);
        if (it.action == RELEASE)
            release(r, it.node);
        else if (it.action == DRAIN)
            drain(r, it.node);
        else
            finish(r, it.node);
        run_work(r);
    }
    r->leaving.n = 0;
    while (1) {
        departures(r);
        if (!r->done.n) break;
        for (ptrdiff_t k = 0; k < r->done.n; k++) ivec_push(&r->leaving, r->done.v[k], &r->nomem);
        for (ptrdiff_t k = 0; k < r->done.n; k++) finish(r, r->done.v[k]);
        run_work(r);
    }
    if (r->leaving.n || r->arrivals.n) reshare(r);
}

static double next_s(const run_t *r) {
    if (r->arrivals.n) return r->now; /* released and draining at once: now */
    double t = r->agenda_n ? r->agenda[0].t : INFINITY;
    if (r->fh.n && r->predicted[r->fh.v[0]] < t) t = r->predicted[r->fh.v[0]];
    double due = r->share.cls != NULL ? clocks_next_due(&r->share.cls->clk) : INFINITY;
    if (due < t) t = due;
    return t;
}

static void clock_run(run_t *r) {
    for (int i = 0; i < r->n; i++) {
        if (r->waiting[i] == 0) {
            if (r->ready[i] > 0)
                at(r, r->ready[i], RELEASE, i);
            else
                ivec_push(&r->work, i, &r->nomem);
        }
    }
    run_work(r);
    unsigned long steps = 0;
    while (!r->nomem && !r->failed) {
        /* A long run still answers Ctrl-C / SIGTERM: Python's handlers run here (and
           may raise), every 16 instants: a cheap check of a flag. */
        if ((++steps & 15u) == 0 && PyErr_CheckSignals() < 0) {
            r->failed = 1;
            break;
        }
        double t = next_s(r);
        if (t == INFINITY) break;
        if (t > r->now) set_now(r, t);
        instant(r);
    }
    share_close(&r->share, r->now);
}

/* -- the Python module ----------------------------------------------------------- */

static void *as_array(PyObject *obj, Py_ssize_t expected, int is_double, const char *name) {
    PyObject *seq = PySequence_Fast(obj, name);
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (expected >= 0 && n != expected) {
        PyErr_Format(PyExc_ValueError, "%s has %zd entries, expected %zd", name, n, expected);
        Py_DECREF(seq);
        return NULL;
    }
    size_t width = is_double ? sizeof(double) : sizeof(int);
    void *out = malloc((size_t)(n > 0 ? n : 1) * width);
    if (out == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t k = 0; k < n; k++) {
        if (is_double) {
            ((double *)out)[k] = PyFloat_AsDouble(items[k]);
        } else {
            long v = PyLong_AsLong(items[k]);
            if (v < INT32_MIN || v > INT32_MAX) {
                PyErr_Format(PyExc_OverflowError, "%s[%zd] is out of range", name, k);
            }
            ((int *)out)[k] = (int)v;
        }
        if (PyErr_Occurred()) {
            free(out);
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    return out;
}

static PyObject *double_list(const double *v, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    if (list == NULL) return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *x = PyFloat_FromDouble(v[k]);
        if (x == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, k, x);
    }
    return list;
}

static int check_indices(const int *ptr, const int *idx, int n, int bound, const char *what) {
    if (ptr[0] != 0) goto bad;
    for (int i = 0; i < n; i++)
        if (ptr[i + 1] < ptr[i]) goto bad;
    for (int p = 0; p < ptr[n]; p++)
        if (idx[p] < 0 || idx[p] >= bound) goto bad;
    return 0;
bad:
    PyErr_Format(PyExc_ValueError, "inconsistent %s arrays", what);
    return -1;
}

typedef struct {
    double *capacity, *size, *duration, *ready;
    int *route_ptr, *route_chan, *is_flow_int, *waiting, *child_ptr, *child_idx;
    char *is_flow;
} inputs_t;

static void inputs_free(inputs_t *in) {
    free(in->capacity);
    free(in->size);
    free(in->duration);
    free(in->ready);
    free(in->route_ptr);
    free(in->route_chan);
    free(in->is_flow_int);
    free(in->waiting);
    free(in->child_ptr);
    free(in->child_idx);
    free(in->is_flow);
}

static int alloc_run(run_t *r, int n) {
    size_t N = (size_t)(n > 0 ? n : 1);
    r->release_s = malloc(N * sizeof(double));
    r->drain_s = malloc(N * sizeof(double));
    r->finish_s = malloc(N * sizeof(double));
    r->remaining = calloc(N, sizeof(double));
    r->updated = calloc(N, sizeof(double));
    r->predicted = malloc(N * sizeof(double));
    r->dseq = calloc(N, sizeof(int64_t));
    r->fh.v = malloc(N * sizeof(int));
    r->fh.pos = malloc(N * sizeof(int));
    r->fh.predicted = r->predicted;
    r->fh.dseq = r->dseq;
    if (!r->release_s || !r->drain_s || !r->finish_s || !r->remaining || !r->updated ||
        !r->predicted || !r->dseq || !r->fh.v || !r->fh.pos)
        return -1;
    for (int i = 0; i < n; i++) {
        r->release_s[i] = r->drain_s[i] = r->finish_s[i] = NAN;
        r->predicted[i] = INFINITY;
        r->fh.pos[i] = -1;
    }
    return 0;
}

static void free_run(run_t *r) {
    free(r->agenda);
    ivec_free(&r->work);
    ivec_free(&r->arrivals);
    ivec_free(&r->spare);
    ivec_free(&r->leaving);
    ivec_free(&r->done);
    free(r->release_s);
    free(r->drain_s);
    free(r->finish_s);
    free(r->remaining);
    free(r->updated);
    free(r->predicted);
    free(r->dseq);
    free(r->fh.v);
    free(r->fh.pos);
    share_free(&r->share);
    Py_XDECREF(r->now_obj);
    Py_XDECREF(r->events);
    Py_XDECREF(r->rate_log);
}

static int read_inputs(PyObject *const *a, int n, int m, inputs_t *in) {
    if (!(in->capacity = as_array(a[0], m, 1, "capacity")) ||
        !(in->route_ptr = as_array(a[1], n + 1, 0, "route_ptr")) ||
        !(in->route_chan = as_array(a[2], -1, 0, "route_chan")) ||
        !(in->size = as_array(a[3], n, 1, "size_bytes")) ||
        !(in->duration = as_array(a[4], n, 1, "duration_s")) ||
        !(in->is_flow_int = as_array(a[5], n, 0, "is_flow")) ||
        !(in->ready = as_array(a[6], n, 1, "ready_s")) ||
        !(in->waiting = as_array(a[7], n, 0, "waiting")) ||
        !(in->child_ptr = as_array(a[8], n + 1, 0, "child_ptr")) ||
        !(in->child_idx = as_array(a[9], -1, 0, "child_idx")))
        return -1;
    if (PySequence_Size(a[2]) != in->route_ptr[n] || PySequence_Size(a[9]) != in->child_ptr[n]) {
        PyErr_SetString(PyExc_ValueError, "route_chan or child_idx does not match its pointers");
        return -1;
    }
    if (check_indices(in->route_ptr, in->route_chan, n, m, "route") < 0 ||
        check_indices(in->child_ptr, in->child_idx, n, n, "child"))
        return -1;
    in->is_flow = malloc((size_t)(n > 0 ? n : 1));
    if (in->is_flow == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < n; i++) in->is_flow[i] = (char)(in->is_flow_int[i] != 0);
    return 0;
}

static PyObject *results(run_t *r, int m) {
    int n = r->n;
    PyObject *rel = double_list(r->release_s, n), *dr = double_list(r->drain_s, n);
    PyObject *fin = double_list(r->finish_s, n), *busy = double_list(r->share.busy_s, m);
    PyObject *out = NULL;
    if (rel && dr && fin && busy)
        out = PyTuple_Pack(6, rel, dr, fin, r->events, busy,
                           r->rate_log != NULL ? r->rate_log : Py_None);
    Py_XDECREF(rel);
    Py_XDECREF(dr);
    Py_XDECREF(fin);
    Py_XDECREF(busy);
    return out;
}

PyDoc_STRVAR(run_doc,
             "run(capacity, route_ptr, route_chan, size_bytes, duration_s, is_flow, ready_s,\n"
             "    waiting, child_ptr, child_idx, ids, hop_latency_s, batch_pairs, class_load,\n"
             "    record_rates, event_type)\n"
             "--\n\n"
             "Replay a checked DAG (sim/engine.py builds the arrays). Returns (release_s,\n"
             "drain_s, finish_s, events, busy_s per channel, rate_log or None).");

static PyObject *core_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 16) {
        PyErr_Format(PyExc_TypeError, "run() takes 16 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *event_type = args[15];
    if (!PyType_Check(event_type) ||
        !PyType_IsSubtype((PyTypeObject *)event_type, &PyTuple_Type) ||
        ((PyTypeObject *)event_type)->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "event_type must be a tuple subclass without slots");
        return NULL;
    }
    PyObject *ids = args[10];
    if (!PyList_Check(ids)) {
        PyErr_SetString(PyExc_TypeError, "ids must be a list of str");
        return NULL;
    }
    Py_ssize_t n_ = PyList_GET_SIZE(ids), m_ = PySequence_Size(args[0]);
    double latency = PyFloat_AsDouble(args[11]);
    long batch_pairs = PyLong_AsLong(args[12]);
    long class_load = PyLong_AsLong(args[13]);
    int record = PyObject_IsTrue(args[14]);
    if (m_ < 0 || PyErr_Occurred() || record < 0) return NULL;
    if (n_ >= INT32_MAX / 2 || m_ >= INT32_MAX / 2) {
        PyErr_SetString(PyExc_OverflowError, "too many nodes or links");
        return NULL;
    }
    int n = (int)n_, m = (int)m_;
    inputs_t in = {0};
    run_t r = {0};
    PyObject *out = NULL;
    if (read_inputs(args, n, m, &in) < 0) goto done;
    r.n = n;
    r.route_ptr = in.route_ptr;
    r.child_ptr = in.child_ptr;
    r.child_idx = in.child_idx;
    r.size = in.size;
    r.duration = in.duration;
    r.is_flow = in.is_flow;
    r.ready = in.ready;
    r.waiting = in.waiting;
    r.latency = latency;
    r.ids = ids;
    r.event_type = (PyTypeObject *)event_type;
    r.kinds[RELEASE] = PyUnicode_InternFromString("release");
    r.kinds[DRAIN] = PyUnicode_InternFromString("drain");
    r.kinds[DONE] = PyUnicode_InternFromString("finish");
    r.events = PyList_New(0);
    r.rate_log = record ? PyList_New(0) : NULL;
    r.now_obj = PyFloat_FromDouble(0.0);
    if (!r.kinds[0] || !r.kinds[1] || !r.kinds[2] || !r.events || (record && !r.rate_log) ||
        !r.now_obj)
        goto done;
    if (alloc_run(&r, n) < 0 ||
        share_init(&r.share, m, in.capacity, n, in.route_ptr, in.route_chan, batch_pairs,
                   class_load) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    r.share.track_rates = record; /* else the classes' clocks alone (sim/classshare.py) */
    r.share.remaining = r.remaining; /* the classes' clocks start from and end in these */
    r.share.updated = r.updated;
    r.share.dseq = r.dseq;
    clock_run(&r);
    if (r.nomem)
        PyErr_NoMemory();
    else if (!r.failed)
        out = results(&r, m);
done:
    for (int k = 0; k < 3; k++) Py_XDECREF(r.kinds[k]);
    free_run(&r);
    inputs_free(&in);
    return out;
}

static PyMethodDef core_methods[] = {
    {"run", (PyCFunction)(void (*)(void))core_run, METH_FASTCALL, run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "_flowcore",
    "The compiled flow-event core of sim.engine (see sim/_flowcore.c).", -1, core_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__flowcore(void) {
    PyObject *mod = PyModule_Create(&core_module);
    if (mod != NULL && PyModule_AddIntConstant(mod, "VERSION", CORE_VERSION) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
