/* The clocks of the bottleneck classes (_flowclock.h): sim/classshare.py's
 * "the clocks" section (ClassFilling: begin, _touch, _advance, _top_member,
 * _schedule, next_due, pop_due) in C, with the same doubles.
 *
 * A level change moves one clock and one entry of the heap of classes, not
 * one finish per member; a flow's bytes left are read off its clock only when
 * it changes class. The Python twin keeps heapq lists and skips stale
 * entries; here each member sits once in its class's heap and each class once
 * in the heap of classes, moved in place: both hold the same live entries, so
 * both pop the same least one (members by goal, drain order, flow; classes by
 * next finish, class id).
 */
#include "_flowclock.h"

#include <math.h>
#include <stdlib.h>

/* -- a class's members, by (goal, drain order, flow) ---------------------------- */

static int mh_less(const clocks_t *k, int a, int b) {
    if (k->goal[a] != k->goal[b]) return k->goal[a] < k->goal[b];
    if (k->dseq[a] != k->dseq[b]) return k->dseq[a] < k->dseq[b];
    return a < b;
}

static void mh_sift(clocks_t *k, ivec *h, int i) {
    int f = h->v[i], start = i;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!mh_less(k, f, h->v[parent])) break;
        h->v[i] = h->v[parent];
        k->mpos[h->v[i]] = i;
        i = parent;
    }
    while (i == start) {
        int child = 2 * i + 1;
        if (child >= h->n) break;
        if (child + 1 < h->n && mh_less(k, h->v[child + 1], h->v[child])) child++;
        if (!mh_less(k, h->v[child], f)) break;
        h->v[i] = h->v[child];
        k->mpos[h->v[i]] = i;
        i = start = child;
    }
    h->v[i] = f;
    k->mpos[f] = i;
}

void clock_join(clocks_t *k, int f, int c) {
    ivec *h = &k->mh[c];
    if (ivec_push(h, f, k->nomem) < 0) return;
    mh_sift(k, h, (int)h->n - 1);
    clock_touch(k, c);
}

static void mh_remove(clocks_t *k, int f, int c) {
    ivec *h = &k->mh[c];
    int i = k->mpos[f];
    k->mpos[f] = -1;
    if (i >= 0) {
        int last = h->v[--h->n];
        if (i < h->n) {
            h->v[i] = last;
            k->mpos[last] = i;
            mh_sift(k, h, i);
        }
    }
}

void clock_drop(clocks_t *k, int f, int c) {
    mh_remove(k, f, c);
    clock_touch(k, c);
}

/* -- the classes, by (next finish, class) ---------------------------------------- */

static int ch_less(const clocks_t *k, int a, int b) {
    if (k->nxt[a] != k->nxt[b]) return k->nxt[a] < k->nxt[b];
    return a < b;
}

static void ch_sift(clocks_t *k, int i) {
    int c = k->cheap[i], start = i;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!ch_less(k, c, k->cheap[parent])) break;
        k->cheap[i] = k->cheap[parent];
        k->cpos[k->cheap[i]] = i;
        i = parent;
    }
    while (i == start) {
        int child = 2 * i + 1;
        if (child >= k->cheap_n) break;
        if (child + 1 < k->cheap_n && ch_less(k, k->cheap[child + 1], k->cheap[child])) child++;
        if (!ch_less(k, k->cheap[child], c)) break;
        k->cheap[i] = k->cheap[child];
        k->cpos[k->cheap[i]] = i;
        i = start = child;
    }
    k->cheap[i] = c;
    k->cpos[c] = i;
}

/* Class c leaves the heap of classes (Python: its entries go stale). */
void clock_release(clocks_t *k, int c) {
    int i = k->cpos[c];
    if (i < 0) return;
    k->cpos[c] = -1;
    int last = k->cheap[--k->cheap_n];
    if (i < k->cheap_n) {
        k->cheap[i] = last;
        k->cpos[last] = i;
        ch_sift(k, i);
    }
}

/* Called for a class with members only (the classes check; a member popped as
 * due stays one until it leaves): its least goal, if any is left, sets its
 * next finish. */
void clock_schedule(clocks_t *k, int c) {
    int f = k->mh[c].n ? k->mh[c].v[0] : -1;
    double r = k->crate[c];
    if (f < 0 || !(r > 0.0)) {
        clock_release(k, c);
        return;
    }
    double left = k->goal[f] - k->served[c];
    k->nxt[c] = k->since[c] + (left > 0.0 ? left : 0.0) / r;
    if (k->cpos[c] < 0) {
        k->cpos[c] = k->cheap_n;
        k->cheap[k->cheap_n++] = c;
    }
    ch_sift(k, k->cpos[c]);
}

/* -- the clocks ------------------------------------------------------------------- */

void clocks_begin(clocks_t *k, double now) {
    k->now = now;
    k->stamp++;
}

void clock_touch(clocks_t *k, int c) {
    if (k->touched_at[c] != k->stamp) {
        k->touched_at[c] = k->stamp;
        ivec_push(&k->touched, c, k->nomem);
    }
}

void clock_advance(clocks_t *k, int c) {
    if (k->since[c] != k->now) {
        k->served[c] += k->crate[c] * (k->now - k->since[c]);
        k->since[c] = k->now;
        clock_touch(k, c);
    }
}

void clock_fresh(clocks_t *k, int c) {
    k->served[c] = 0.0;
    k->since[c] = k->now;
    k->crate[c] = 0.0;
    k->mh[c].n = 0;
}

double clocks_next_due(const clocks_t *k) {
    return k->cheap_n ? k->nxt[k->cheap[0]] : INFINITY;
}

void clocks_pop_due(clocks_t *k, double limit, ivec *out, int *nomem) {
    while (k->cheap_n && k->nxt[k->cheap[0]] <= limit) {
        int c = k->cheap[0];
        int f = k->mh[c].v[0];
        mh_remove(k, f, c);
        ivec_push(out, f, nomem);
        clock_schedule(k, c); /* f is still a member of c: it leaves at the next update */
    }
}

int clocks_alloc(clocks_t *k, int n, const int64_t *dseq, int *nomem) {
    size_t N = (size_t)(n > 0 ? n : 1);
    k->n = n;
    k->dseq = dseq;
    k->nomem = nomem;
    k->served = calloc(N, sizeof(double));
    k->since = calloc(N, sizeof(double));
    k->crate = calloc(N, sizeof(double));
    k->nxt = calloc(N, sizeof(double));
    k->goal = calloc(N, sizeof(double));
    k->mh = calloc(N, sizeof(ivec));
    k->mpos = malloc(N * sizeof(int));
    k->cheap = malloc(N * sizeof(int));
    k->cpos = malloc(N * sizeof(int));
    k->touched_at = calloc(N, sizeof(int64_t));
    if (!k->served || !k->since || !k->crate || !k->nxt || !k->goal || !k->mh || !k->mpos ||
        !k->cheap || !k->cpos || !k->touched_at)
        return -1;
    for (int i = 0; i < n; i++) k->mpos[i] = k->cpos[i] = -1;
    k->stamp = 1;
    return 0;
}

void clocks_free(clocks_t *k) {
    for (int c = 0; k->mh && c < k->n; c++) ivec_free(&k->mh[c]);
    free(k->served);
    free(k->since);
    free(k->crate);
    free(k->nxt);
    free(k->goal);
    free(k->mh);
    free(k->mpos);
    free(k->cheap);
    free(k->cpos);
    free(k->touched_at);
    ivec_free(&k->touched);
}
