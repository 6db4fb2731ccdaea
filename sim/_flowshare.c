/* Max-min fair link sharing, kept between events (_flowshare.h): sim/sharing.py in C.
 *
 * Every function below is a statement-by-statement port of the method of
 * sim.sharing.LinkSharing with the same name, with the same operations in the
 * same order on IEEE doubles, so that the compiled engine and the pure-Python
 * reference agree bit for bit (tests/sim/test_compiled.py). The algorithm and
 * its proof are in the docstring of sim/sharing.py. The two other solvers it
 * drives are _flowwhole.c (a big batch) and _flowclass.c (dense traffic).
 */
#include "_flowshare.h"

#include "_flowclass.h"
#include "_flowclock.h"
#include "_flownet.h"
#include "_flowvec.h"
#include "_flowwhole.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-12
#define SATURATE 0
#define CHECK 1

/* -- the filling heap: a binary min-heap of (key, kind, lk) ------------------ */

static int item_less(const fill_item *a, const fill_item *b) {
    if (a->key != b->key) return a->key < b->key;
    if (a->kind != b->kind) return a->kind < b->kind;
    return a->lk < b->lk;
}

static void heap_push(share_t *s, double key, int kind, int lk) {
    if (s->heap_n == s->heap_cap) {
        ptrdiff_t cap = s->heap_cap ? 2 * s->heap_cap : 64;
        fill_item *h = realloc(s->heap, (size_t)cap * sizeof(fill_item));
        if (h == NULL) {
            s->net.nomem = 1;
            return;
        }
        s->heap = h;
        s->heap_cap = cap;
    }
    fill_item item = {key, kind, lk};
    ptrdiff_t i = s->heap_n++;
    while (i > 0) {
        ptrdiff_t parent = (i - 1) / 2;
        if (!item_less(&item, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = item;
}

static fill_item heap_pop(share_t *s) {
    fill_item top = s->heap[0];
    fill_item last = s->heap[--s->heap_n];
    ptrdiff_t n = s->heap_n, i = 0;
    while (1) {
        ptrdiff_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && item_less(&s->heap[child + 1], &s->heap[child])) child++;
        if (!item_less(&s->heap[child], &last)) break;
        s->heap[i] = s->heap[child];
        i = child;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

/* -- set-up ------------------------------------------------------------------ */

int share_init(share_t *s, int m, const double *capacity, int n, const int *route_ptr,
               const int *route_chan, long batch_pairs, long class_load) {
    memset(s, 0, sizeof(*s));
    s->class_load = class_load;
    s->track_rates = 1;
    s->net.m = m;
    s->net.n = n;
    s->net.route_ptr = route_ptr;
    s->net.route_chan = route_chan;
    s->batch_pairs = batch_pairs;
    s->net.d_head = s->net.d_tail = -1;
    size_t M = (size_t)(m > 0 ? m : 1), N = (size_t)(n > 0 ? n : 1);
    s->net.capacity = malloc(M * sizeof(double));
    s->users = calloc(M, sizeof(int *));
    s->net.users_n = calloc(M, sizeof(int));
    s->upair = calloc(M, sizeof(int *));
    s->lc = calloc(M, sizeof(link_cache));
    s->h_pos = calloc((size_t)(n > 0 && route_ptr[n] > 0 ? route_ptr[n] : 1), sizeof(int));
    s->users_cap = calloc(M, sizeof(int));
    s->net.level = malloc(M * sizeof(double));
    s->busy_s = calloc(M, sizeof(double));
    s->since = calloc(M, sizeof(double));
    s->dirty = calloc(M, sizeof(int64_t));
    s->done = calloc(M, sizeof(int64_t));
    s->queued = calloc(M, sizeof(int64_t));
    s->exact = calloc(M, sizeof(int64_t));
    s->key = malloc(M * sizeof(double));
    s->net.fs = calloc(N, sizeof(flow_share));
    s->net.d_prev = malloc(N * sizeof(int));
    s->net.d_next = malloc(N * sizeof(int));
    if (!s->upair || !s->lc || !s->h_pos) return -1;
    if (!s->net.capacity || !s->users || !s->net.users_n || !s->users_cap || !s->net.level ||
        !s->busy_s || !s->since || !s->dirty || !s->done || !s->queued || !s->exact || !s->key ||
        !s->net.fs || !s->net.d_prev || !s->net.d_next)
        return -1;
    for (int l = 0; l < m; l++) {
        s->net.capacity[l] = capacity[l];
        s->net.level[l] = INFINITY;
        s->key[l] = INFINITY;
    }
    for (int f = 0; f < n; f++) s->net.fs[f].bottleneck = -1;
    return 0;
}

void share_free(share_t *s) {
    classes_free(s->cls);
    for (int l = 0; l < s->net.m; l++) {
        if (s->users) free(s->users[l]);
        if (s->upair) free(s->upair[l]);
        if (s->lc) free(s->lc[l].rate);
        if (s->lc) free(s->lc[l].ints);
    }
    free(s->upair);
    free(s->lc);
    free(s->h_pos);
    free(s->net.capacity);
    free(s->users);
    free(s->net.users_n);
    free(s->users_cap);
    free(s->net.level);
    free(s->busy_s);
    free(s->since);
    free(s->dirty);
    free(s->done);
    free(s->queued);
    free(s->exact);
    free(s->key);
    free(s->net.fs);
    free(s->net.d_prev);
    free(s->net.d_next);
    free(s->heap);
    free(s->held);
    ivec_free(&s->stale);
    ivec_free(&s->dirty_links);
    ivec_free(&s->frozen);
    changed_free(&s->net.changed);
    memset(s, 0, sizeof(*s));
}

void share_close(share_t *s, double now) {
    for (int l = 0; l < s->net.m; l++) {
        if (s->net.users_n[l]) {
            s->busy_s[l] += now - s->since[l];
            s->since[l] = now;
        }
    }
}

/* -- bookkeeping: users, the draining list ---------------- */

static void users_append(share_t *s, int lk, int f, int p) {
    if (s->net.users_n[lk] == s->users_cap[lk]) {
        int cap = s->users_cap[lk] ? 2 * s->users_cap[lk] : 4;
        int *v = realloc(s->users[lk], (size_t)cap * sizeof(int));
        if (v != NULL) s->users[lk] = v;
        int *w = v == NULL ? NULL : realloc(s->upair[lk], (size_t)cap * sizeof(int));
        if (w == NULL) {
            s->net.nomem = 1;
            return;
        }
        s->upair[lk] = w;
        s->users_cap[lk] = cap;
    }
    s->upair[lk][s->net.users_n[lk]] = p;
    s->users[lk][s->net.users_n[lk]++] = f;
}

static void users_remove(share_t *s, int lk, int f) {
    /* list.remove: the first occurrence, order kept. */
    int *u = s->users[lk];
    int k = s->net.users_n[lk];
    for (int i = 0; i < k; i++) {
        if (u[i] == f) {
            memmove(u + i, u + i + 1, (size_t)(k - i - 1) * sizeof(int));
            int *q = s->upair[lk];
            memmove(q + i, q + i + 1, (size_t)(k - i - 1) * sizeof(int));
            s->net.users_n[lk] = k - 1;
            return;
        }
    }
}

static void draining_add(share_t *s, int f) {
    s->net.d_prev[f] = s->net.d_tail;
    s->net.d_next[f] = -1;
    if (s->net.d_tail >= 0)
        s->net.d_next[s->net.d_tail] = f;
    else
        s->net.d_head = f;
    s->net.d_tail = f;
    s->net.d_count++;
}

static void draining_remove(share_t *s, int f) {
    int p = s->net.d_prev[f], q = s->net.d_next[f];
    if (p >= 0)
        s->net.d_next[p] = q;
    else
        s->net.d_head = q;
    if (q >= 0)
        s->net.d_prev[q] = p;
    else
        s->net.d_tail = p;
    s->net.d_count--;
}

/* -- marking links dirty ----------------------------------------------------- */

static void first_dirty(share_t *s, int lk) {
    s->dirty[lk] = s->epoch;
    ivec_push(&s->dirty_links, lk, &s->net.nomem);
    double old = s->net.level[lk];
    s->key[lk] = old;
    if (old < INFINITY) {
        heap_push(s, old, SATURATE, lk);
        heap_push(s, old * (1.0 + REL_TOL), CHECK, lk);
    }
}

static void raised(share_t *s, int lk) {
    s->exact[lk] = 0;
    if (s->done[lk] != s->epoch && s->dirty[lk] != s->epoch) first_dirty(s, lk);
}

static void lowered(share_t *s, int lk) {
    int64_t epoch = s->epoch;
    if (s->done[lk] == epoch) return;
    s->exact[lk] = 0;
    if (s->dirty[lk] != epoch) first_dirty(s, lk);
    if (s->queued[lk] != epoch) {
        s->queued[lk] = epoch;
        ivec_push(&s->stale, lk, &s->net.nomem);
    }
}

/* -- the filling -------------------------------------------------------------- */

/* A link's flows as the filling stands, kept from its first solve in an
 * update (sim/sharing.py, _cache_build): its capacity less the rates frozen
 * in this update, its unfrozen flows, and its held flows with their old rates.
 * Freezing or loosening one of its flows moves it (saturate, release), so a
 * second solve, a saturation and a release read these lists instead of every
 * flow on the link. Lists lose an entry by moving the last one into its place,
 * as the Python twin's do. */
static link_cache *cache_build(share_t *s, int lk) {
    int64_t epoch = s->epoch;
    link_cache *c = &s->lc[lk];
    int k = s->net.users_n[lk];
    if (c->room < k) {
        double *v = realloc(c->rate, (size_t)k * sizeof(double));
        if (v != NULL) c->rate = v;
        int *w = v == NULL ? NULL : realloc(c->ints, (size_t)k * 4 * sizeof(int));
        if (w == NULL) {
            s->net.nomem = 1;
            return c;
        }
        c->ints = w;
        c->room = k;
    }
    c->hflow = c->ints;
    c->hpair = c->ints + k;
    c->uflow = c->ints + 2 * k;
    c->upair = c->ints + 3 * k;
    double cap = s->net.capacity[lk];
    int nunf = 0, nheld = 0;
    const int *u = s->users[lk], *pair = s->upair[lk];
    for (int i = 0; i < k; i++) {
        const flow_share *q = &s->net.fs[u[i]];
        if (q->fixed == epoch) {
            cap -= q->new_rate;
        } else if (q->loose == epoch || q->bottleneck == lk) {
            c->uflow[nunf] = u[i];
            c->upair[nunf] = pair[i];
            s->h_pos[pair[i]] = nunf++;
        } else {
            c->rate[nheld] = q->rate;
            c->hflow[nheld] = u[i];
            c->hpair[nheld] = pair[i];
            s->h_pos[pair[i]] = nheld++;
        }
    }
    c->cap = cap;
    c->nunf = nunf;
    c->nheld = nheld;
    c->epoch = epoch;
    return c;
}

static link_cache *cache_of(share_t *s, int lk) {
    link_cache *c = &s->lc[lk];
    return c->epoch == s->epoch ? c : cache_build(s, lk);
}

/* Route position p's flow leaves lk's held or unfrozen list. */
static void cache_unhold(share_t *s, link_cache *c, int p) {
    int k = s->h_pos[p], last = --c->nheld;
    if (k != last) {
        int q = c->hpair[last];
        c->rate[k] = c->rate[last];
        c->hflow[k] = c->hflow[last];
        c->hpair[k] = q;
        s->h_pos[q] = k;
    }
}

static void cache_unfree(share_t *s, link_cache *c, int p) {
    int k = s->h_pos[p], last = --c->nunf;
    if (k != last) {
        int q = c->upair[last];
        c->uflow[k] = c->uflow[last];
        c->upair[k] = q;
        s->h_pos[q] = k;
    }
}

static double level_of(share_t *s, int lk) {
    const link_cache *c = cache_of(s, lk);
    if (s->net.nomem) return INFINITY;
    double cap = c->cap;
    int unfrozen = c->nunf;
    ptrdiff_t nheld = 0;
    int k = c->nheld;
    if (s->held_cap < k) {
        double *h = realloc(s->held, (size_t)k * sizeof(double));
        if (h == NULL) {
            s->net.nomem = 1;
            return INFINITY;
        }
        s->held = h;
        s->held_cap = k;
    }
    /* A flow held below the fill level reached is frozen already: it only
     * takes capacity. */
    double at = s->at;
    const double *rate = c->rate;
    for (int i = 0; i < k; i++) {
        double r = rate[i];
        if (r < at)
            cap -= r;
        else
            s->held[nheld++] = r;
    }
    /* Water-filling without sorting (sim/sharing.py: the same passes, in the
     * held list's order): a held flow below the level of the rest is below the
     * final level too, so each pass takes all such flows out until one takes none. */
    double *h = s->held;
    while (nheld) {
        double x = cap / (double)(unfrozen + nheld);
        ptrdiff_t kept = 0;
        for (ptrdiff_t i = 0; i < nheld; i++) {
            if (h[i] < x)
                cap -= h[i];
            else
                h[kept++] = h[i];
        }
        if (kept == nheld) return x > at ? x : at;
        nheld = kept;
    }
    if (unfrozen == 0) return INFINITY;
    double x = cap / (double)unfrozen;
    return x > at ? x : at;
}

static void resolve(share_t *s) {
    int64_t epoch = s->epoch;
    for (ptrdiff_t i = 0; i < s->stale.n; i++) {
        int lk = s->stale.v[i];
        s->queued[lk] = 0;
        if (s->done[lk] != epoch) {
            double x = level_of(s, lk);
            s->key[lk] = x;
            s->exact[lk] = epoch;
            if (x < INFINITY) heap_push(s, x, SATURATE, lk);
        }
    }
    s->stale.n = 0;
}

/* Freeze f at lk's level x (sim/sharing.py, _freeze): its other links' lists
 * and keys learn what changed in their equations. */
static void freeze(share_t *s, int lk, int f, double x, double above, double below) {
    int64_t epoch = s->epoch;
    flow_share *q = &s->net.fs[f];
    int was = q->bottleneck;
    double old = q->rate;
    int unfrozen = q->loose == epoch;
    q->fixed = epoch;
    q->new_rate = x;
    q->bottleneck = lk;
    ivec_push(&s->frozen, f, &s->net.nomem);
    for (int p = s->net.route_ptr[f]; p < s->net.route_ptr[f + 1]; p++) {
        int m = s->net.route_chan[p];
        if (m == lk) continue;
        link_cache *c = &s->lc[m];
        if (c->epoch == epoch) {
            if (unfrozen || was == m)
                cache_unfree(s, c, p);
            else
                cache_unhold(s, c, p);
            c->cap -= x;
        }
        /* In m's equation f counted as unfrozen (loose, or bottlenecked at m)
         * or as held at its old rate; now it takes exactly x. */
        if (unfrozen || was == m || old > above)
            raised(s, m);
        else if (old < below)
            lowered(s, m);
        else
            s->exact[m] = 0; /* the same rate to 1e-12, but not the same double */
    }
}

/* lk saturates at x: its unfrozen flows freeze there, and so do the flows
 * held at old rates not below x (frozen earlier below x, a flow keeps its
 * old rate and bottleneck). */
static void saturate(share_t *s, int lk, double x) {
    s->done[lk] = s->epoch;
    s->net.level[lk] = x;
    double above = x * (1.0 + REL_TOL);
    double below = x * (1.0 - REL_TOL);
    const link_cache *c = cache_of(s, lk);
    if (s->net.nomem) return;
    for (int i = 0; i < c->nunf; i++) freeze(s, lk, c->uflow[i], x, above, below);
    for (int i = 0; i < c->nheld; i++)
        if (!(c->rate[i] < below)) freeze(s, lk, c->hflow[i], x, above, below);
}

/* The filling passed lk's old level and lk did not saturate there: its
 * bottlenecked flows are unfrozen everywhere. */
static void release(share_t *s, int lk) {
    int64_t epoch = s->epoch;
    const link_cache *c = cache_of(s, lk);
    if (s->net.nomem) return;
    for (int i = 0; i < c->nunf; i++) {
        int f = c->uflow[i];
        if (s->net.fs[f].loose == epoch || s->net.fs[f].bottleneck != lk) continue;
        s->net.fs[f].loose = epoch;
        for (int p = s->net.route_ptr[f]; p < s->net.route_ptr[f + 1]; p++) {
            int m = s->net.route_chan[p];
            if (m == lk) continue;
            link_cache *d = &s->lc[m];
            if (d->epoch == epoch) { /* held there (bottlenecked at lk): now unfrozen */
                cache_unhold(s, d, p);
                d->uflow[d->nunf] = f;
                d->upair[d->nunf] = p;
                s->h_pos[p] = d->nunf++;
            }
            lowered(s, m);
        }
    }
}

static void fill(share_t *s) {
    int64_t epoch = s->epoch;
    while (!s->net.nomem) {
        if (s->stale.n) resolve(s);
        if (!s->heap_n) break;
        fill_item it = heap_pop(s);
        int lk = it.lk;
        if (s->done[lk] == epoch) continue;
        if (it.kind == CHECK) {
            double old = s->net.level[lk];
            if (old > s->at) s->at = old;
            release(s, lk);
        } else if (it.key == s->key[lk]) {
            /* An exact key was solved from the link's flows as they still are. */
            double x = s->exact[lk] == epoch ? it.key : level_of(s, lk);
            if (x > it.key * (1.0 + REL_TOL)) {
                s->key[lk] = x;
                s->exact[lk] = epoch;
                if (x < INFINITY) heap_push(s, x, SATURATE, lk);
            } else {
                s->at = x;
                saturate(s, lk, x);
            }
        }
    }
}

static void commit(share_t *s, const int *arrivals, ptrdiff_t num_arrivals) {
    int64_t epoch = s->epoch;
    for (ptrdiff_t i = 0; i < s->dirty_links.n; i++) {
        int lk = s->dirty_links.v[i];
        if (s->done[lk] != epoch) s->net.level[lk] = INFINITY;
    }
    s->dirty_links.n = 0;
    for (ptrdiff_t i = 0; i < num_arrivals; i++)
        changed_push(&s->net.changed, arrivals[i], 0.0, &s->net.nomem);
    for (ptrdiff_t i = 0; i < s->frozen.n; i++) {
        int f = s->frozen.v[i];
        double r = s->net.fs[f].new_rate;
        double old = s->net.fs[f].rate;
        if (old == 0.0) {
            s->net.fs[f].rate = r;
        } else if (s->net.fs[f].loose == epoch || fabs(r - old) > REL_TOL * r) {
            s->net.fs[f].rate = r;
            changed_push(&s->net.changed, f, old, &s->net.nomem);
        }
    }
    s->frozen.n = 0;
}

/* -- one update ---------------------------------------------------------------- */

/* Whether an update at `now` leaving `pairs` (flow, link) pairs draining solves
 * by classes (sim/sharing.py, _class_mode); ends the classes when it does not.
 * Floor division as Python's: need is never below -m. */
static int class_mode(share_t *s, long pairs, double now) {
    long need = s->class_load * (long)s->net.m;
    long half = need >= 0 ? need / 2 : -((-need + 1) / 2);
    if (s->cls != NULL) {
        clocks_begin(&s->cls->clk, now);
        if (pairs < half) {
            /* The lazy update goes on from the exact state left, the per-flow
             * clocks from the bytes left now. */
            if (!s->cls->per_flow) classes_sync(s->cls, s->net.fs);
            classes_materialize(s->cls, s->remaining, s->updated);
            classes_free(s->cls);
            s->cls = NULL;
        }
    }
    if (s->cls != NULL) return 1;
    return 0 <= need && need <= pairs;
}

int share_update(share_t *s, double now, const int *arrivals, ptrdiff_t num_arrivals,
                 const int *departures, ptrdiff_t num_departures) {
    int64_t epoch = ++s->epoch;
    s->at = 0.0;
    s->net.changed.flows.n = 0;
    long pairs_out = 0, pairs_in = 0;
    for (ptrdiff_t i = 0; i < num_departures; i++) {
        int f = departures[i];
        pairs_out += s->net.route_ptr[f + 1] - s->net.route_ptr[f];
    }
    for (ptrdiff_t i = 0; i < num_arrivals; i++) {
        int f = arrivals[i];
        pairs_in += s->net.route_ptr[f + 1] - s->net.route_ptr[f];
    }
    int whole = pairs_out + pairs_in > s->batch_pairs;
    s->pairs += pairs_in - pairs_out;
    int classes = class_mode(s, s->pairs, now);
    int quiet = whole || classes; /* the lazy update's marks are not needed */
    for (ptrdiff_t i = 0; i < num_departures; i++) {
        int f = departures[i];
        if (s->cls != NULL) classes_leave(s->cls, f);
        draining_remove(s, f);
        for (int p = s->net.route_ptr[f]; p < s->net.route_ptr[f + 1]; p++) {
            int lk = s->net.route_chan[p];
            users_remove(s, lk, f);
            if (!s->net.users_n[lk]) s->busy_s[lk] += now - s->since[lk];
            if (!quiet) raised(s, lk);
        }
        s->net.fs[f].rate = 0.0;
        s->net.fs[f].bottleneck = -1;
    }
    for (ptrdiff_t i = 0; i < num_arrivals; i++) {
        int f = arrivals[i];
        draining_add(s, f);
        s->net.fs[f].loose = epoch;
        for (int p = s->net.route_ptr[f]; p < s->net.route_ptr[f + 1]; p++) {
            int lk = s->net.route_chan[p];
            if (!s->net.users_n[lk]) s->since[lk] = now;
            users_append(s, lk, f, p);
        }
        if (s->cls != NULL) classes_arrive(s->cls, f);
    }
    if (classes) {
        if (s->cls == NULL &&
            (s->cls = classes_build(&s->net, now, s->track_rates, s->remaining, s->updated,
                                    s->dseq)) == NULL)
            s->net.nomem = 1;
        if (s->net.nomem || classes_solve(s->cls, &s->net, arrivals, num_arrivals) < 0)
            s->net.nomem = 1;
        return s->net.nomem ? -1 : 0;
    }
    if (whole) {
        if (whole_solve(&s->net, arrivals, num_arrivals) < 0) s->net.nomem = 1;
        return s->net.nomem ? -1 : 0;
    }
    for (ptrdiff_t i = 0; i < num_arrivals; i++) {
        int f = arrivals[i];
        for (int p = s->net.route_ptr[f]; p < s->net.route_ptr[f + 1]; p++)
            lowered(s, s->net.route_chan[p]);
    }
    fill(s);
    commit(s, arrivals, num_arrivals);
    return s->net.nomem ? -1 : 0;
}
