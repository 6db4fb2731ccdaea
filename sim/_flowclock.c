/* The clocks of the bottleneck classes: sim/classshare.py's "the clocks"
 * section (ClassFilling: begin, _touch, _advance, _top_member, _schedule,
 * next_due, pop_due, materialize) in C, with the same doubles.
 *
 * A class drains all its members at one rate, so it keeps one clock: the
 * bytes served to each member, as of `since`, at `crate` since then; a member
 * finishes when its class's clock reaches its `goal`. A level change then
 * moves one clock and one entry of the heap of classes, not one finish per
 * member; a flow's bytes left are read off its clock only when it changes
 * class. The Python twin keeps heapq lists and skips stale entries; here each
 * member sits once in its class's heap and each class once in the heap of
 * classes, moved in place: both hold the same live entries, so both pop the
 * same least one (members by goal, drain order, flow; classes by next finish,
 * class id).
 */
#include "_flowcore.h"

#include <math.h>
#include <stdlib.h>

/* -- a class's members, by (goal, drain order, flow) ---------------------------- */

static int mh_less(const classes_t *c, int a, int b) {
    if (c->goal[a] != c->goal[b]) return c->goal[a] < c->goal[b];
    if (c->dseq[a] != c->dseq[b]) return c->dseq[a] < c->dseq[b];
    return a < b;
}

static void mh_sift(classes_t *c, ivec *h, int i) {
    int f = h->v[i], start = i;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!mh_less(c, f, h->v[parent])) break;
        h->v[i] = h->v[parent];
        c->mpos[h->v[i]] = i;
        i = parent;
    }
    while (i == start) {
        int child = 2 * i + 1;
        if (child >= h->n) break;
        if (child + 1 < h->n && mh_less(c, h->v[child + 1], h->v[child])) child++;
        if (!mh_less(c, h->v[child], f)) break;
        h->v[i] = h->v[child];
        c->mpos[h->v[i]] = i;
        i = start = child;
    }
    h->v[i] = f;
    c->mpos[f] = i;
}

void clock_join(classes_t *c, int f, int k) {
    ivec *h = &c->mh[k];
    if (ivec_push(h, f, &c->nomem) < 0) return;
    mh_sift(c, h, (int)h->n - 1);
    clock_touch(c, k);
}

static void mh_remove(classes_t *c, int f, int k) {
    ivec *h = &c->mh[k];
    int i = c->mpos[f];
    c->mpos[f] = -1;
    if (i >= 0) {
        int last = h->v[--h->n];
        if (i < h->n) {
            h->v[i] = last;
            c->mpos[last] = i;
            mh_sift(c, h, i);
        }
    }
}

void clock_drop(classes_t *c, int f, int k) {
    mh_remove(c, f, k);
    clock_touch(c, k);
}

/* -- the classes, by (next finish, class) ---------------------------------------- */

static int ch_less(const classes_t *c, int a, int b) {
    if (c->nxt[a] != c->nxt[b]) return c->nxt[a] < c->nxt[b];
    return a < b;
}

static void ch_sift(classes_t *c, int i) {
    int k = c->cheap[i], start = i;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!ch_less(c, k, c->cheap[parent])) break;
        c->cheap[i] = c->cheap[parent];
        c->cpos[c->cheap[i]] = i;
        i = parent;
    }
    while (i == start) {
        int child = 2 * i + 1;
        if (child >= c->cheap_n) break;
        if (child + 1 < c->cheap_n && ch_less(c, c->cheap[child + 1], c->cheap[child])) child++;
        if (!ch_less(c, c->cheap[child], k)) break;
        c->cheap[i] = c->cheap[child];
        c->cpos[c->cheap[i]] = i;
        i = start = child;
    }
    c->cheap[i] = k;
    c->cpos[k] = i;
}

/* Class k leaves the heap of classes (Python: its entries go stale). */
void clock_release(classes_t *c, int k) {
    int i = c->cpos[k];
    if (i < 0) return;
    c->cpos[k] = -1;
    int last = c->cheap[--c->cheap_n];
    if (i < c->cheap_n) {
        c->cheap[i] = last;
        c->cpos[last] = i;
        ch_sift(c, i);
    }
}

void clock_schedule(classes_t *c, int k) {
    int f = c->members[k].n && c->mh[k].n ? c->mh[k].v[0] : -1;
    double r = c->crate[k];
    if (f < 0 || !(r > 0.0)) {
        clock_release(c, k);
        return;
    }
    double left = c->goal[f] - c->served[k];
    c->nxt[k] = c->since[k] + (left > 0.0 ? left : 0.0) / r;
    if (c->cpos[k] < 0) {
        c->cpos[k] = c->cheap_n;
        c->cheap[c->cheap_n++] = k;
    }
    ch_sift(c, c->cpos[k]);
}

/* -- the clocks ------------------------------------------------------------------- */

void classes_begin(classes_t *c, double now) {
    c->now = now;
    c->stamp++;
}

void clock_touch(classes_t *c, int k) {
    if (c->touched_at[k] != c->stamp) {
        c->touched_at[k] = c->stamp;
        ivec_push(&c->touched, k, &c->nomem);
    }
}

void clock_advance(classes_t *c, int k) {
    if (c->since[k] != c->now) {
        c->served[k] += c->crate[k] * (c->now - c->since[k]);
        c->since[k] = c->now;
        clock_touch(c, k);
    }
}

void clock_fresh(classes_t *c, int k) {
    c->served[k] = 0.0;
    c->since[k] = c->now;
    c->crate[k] = 0.0;
    c->mh[k].n = 0;
}

double classes_next_due(const classes_t *c) {
    return c->cheap_n ? c->nxt[c->cheap[0]] : INFINITY;
}

void classes_pop_due(classes_t *c, double limit, ivec *out, int *nomem) {
    while (c->cheap_n && c->nxt[c->cheap[0]] <= limit) {
        int k = c->cheap[0];
        int f = c->mh[k].v[0];
        mh_remove(c, f, k);
        ivec_push(out, f, nomem);
        clock_schedule(c, k);
    }
}

void classes_sync(const classes_t *c, flow_share *fs) {
    for (int k = 0; k < c->n; k++) {
        const ivec *mem = &c->members[k];
        for (ptrdiff_t i = 0; i < mem->n; i++) {
            fs[mem->v[i]].rate = c->crate[k];
            fs[mem->v[i]].bottleneck = c->new_at[k];
        }
    }
}

void classes_materialize(classes_t *c, double *remaining, double *updated) {
    for (int k = 0; k < c->n; k++) {
        const ivec *mem = &c->members[k];
        if (!mem->n) continue;
        clock_advance(c, k);
        for (ptrdiff_t i = 0; i < mem->n; i++) {
            int f = mem->v[i];
            remaining[f] = c->goal[f] - c->served[k];
            updated[f] = c->now;
        }
    }
}

int clocks_alloc(classes_t *c) {
    size_t N = (size_t)(c->n > 0 ? c->n : 1);
    c->served = calloc(N, sizeof(double));
    c->since = calloc(N, sizeof(double));
    c->crate = calloc(N, sizeof(double));
    c->nxt = calloc(N, sizeof(double));
    c->goal = calloc(N, sizeof(double));
    c->mh = calloc(N, sizeof(ivec));
    c->mpos = malloc(N * sizeof(int));
    c->cheap = malloc(N * sizeof(int));
    c->cpos = malloc(N * sizeof(int));
    c->touched_at = calloc(N, sizeof(int64_t));
    if (!c->served || !c->since || !c->crate || !c->nxt || !c->goal || !c->mh || !c->mpos ||
        !c->cheap || !c->cpos || !c->touched_at)
        return -1;
    for (int i = 0; i < c->n; i++) c->mpos[i] = c->cpos[i] = -1;
    c->stamp = 1;
    return 0;
}

void clocks_free(classes_t *c) {
    for (int k = 0; c->mh && k < c->n; k++) ivec_free(&c->mh[k]);
    free(c->served);
    free(c->since);
    free(c->crate);
    free(c->nxt);
    free(c->goal);
    free(c->mh);
    free(c->mpos);
    free(c->cheap);
    free(c->cpos);
    free(c->touched_at);
    ivec_free(&c->touched);
}
