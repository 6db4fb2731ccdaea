/* Max-min fair sharing over bottleneck classes, for dense traffic (_flowclass.h):
 * sim/classshare.py (ClassFilling) in C, method by method, with the same
 * operations in the same order on IEEE doubles, so that both event cores stay
 * bit-identical (tests/sim/test_dense.py). The algorithm and why it is exact
 * are in the docstring of sim/classshare.py.
 */
#include "_flowclass.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int pairs_grow(pair_list *p, int *nomem) {
    int cap = p->cap ? 2 * p->cap : 8;
    int *k = realloc(p->key, (size_t)cap * sizeof(int));
    if (k != NULL) p->key = k;
    int *c = k == NULL ? NULL : realloc(p->cnt, (size_t)cap * sizeof(int));
    if (c == NULL) {
        *nomem = 1;
        return -1;
    }
    p->cnt = c;
    p->cap = cap;
    return 0;
}

static int pairs_find(const pair_list *p, int key) {
    for (int i = 0; i < p->n; i++)
        if (p->key[i] == key) return i;
    return -1;
}

static void pairs_append(pair_list *p, int key, int cnt, int *nomem) {
    if (p->n == p->cap && pairs_grow(p, nomem) < 0) return;
    p->key[p->n] = key;
    p->cnt[p->n++] = cnt;
}

/* The last entry takes the place of the one dropped (as in the Python twin). */
static void pairs_drop(pair_list *p, int i) {
    p->n--;
    p->key[i] = p->key[p->n];
    p->cnt[i] = p->cnt[p->n];
}

/* -- the links by level: least keys per block of BLOCK links ---------------------
 *
 * The Python twin pushes (key, lk) on every change and skips stale entries
 * when popped; here key[] (padded with INFINITY to whole blocks) is scanned by
 * blocks: bmin[b] is the least key of block b, exact unless bdirty[b] (its
 * least key rose: a freeze raised it, or it saturated), then recomputed at the
 * next pop. Both pop the least (key, lk) among the current keys -- the first
 * block holding the least key, its first link with it -- so the filling goes
 * in the same order (INFINITY: saturated, or no flow left to freeze).
 * Why not a heap: a freeze raises ~10 keys, each a sift with unpredictable
 * branches; here it is a compare, and a pop scans m / BLOCK block minima and
 * the few blocks marked (simulate on the dense case, 224 links: 0.31 CPU s
 * against 0.44 with an indexed 8-ary heap; docs/simulator.md). */
#define BLOCK 16

/* The least of block b's keys, without a branch. */
static double block_min(const double *key, int b) {
    const double *k = key + BLOCK * b;
    double a[BLOCK / 2];
    for (int i = 0; i < BLOCK / 2; i++) a[i] = k[2 * i] < k[2 * i + 1] ? k[2 * i] : k[2 * i + 1];
    for (int w = BLOCK / 4; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) a[i] = a[i] < a[i + w] ? a[i] : a[i + w];
    return a[0];
}

/* key[lk] changed from was to y (lk unsaturated). */
static void set_key(classes_t *c, int lk, double was, double y) {
    int b = lk / BLOCK;
    c->key[lk] = y;
    if (c->bdirty[b]) return;
    if (y < c->bmin[b])
        c->bmin[b] = y;
    else if (was == c->bmin[b] && y != was)
        c->bdirty[b] = 1;
}

/* The unsaturated link with the least (key, lk), saturated now: its key goes
 * to INFINITY; -1 when every key is INFINITY. */
static int least_link(classes_t *c) {
    double best = INFINITY;
    int at = -1;
    for (int b = 0; b < c->nblk; b++) {
        if (c->bdirty[b]) {
            c->bmin[b] = block_min(c->key, b);
            c->bdirty[b] = 0;
        }
        if (c->bmin[b] < best) {
            best = c->bmin[b];
            at = b;
        }
    }
    if (at < 0) return -1;
    int lk = BLOCK * at;
    while (c->key[lk] != best) lk++;
    c->bdirty[at] = 1;
    return lk;
}

/* -- the classes (ClassFilling: _count, _join, _drop, _release, _split, _merge) -- */

static void count_add(classes_t *c, int k, int lk, int d) {
    pair_list *fp = &c->fp[k], *lc = &c->lc[lk];
    int i = pairs_find(fp, lk);
    if (i < 0) {
        pairs_append(fp, lk, d, &c->nomem);
        pairs_append(lc, k, d, &c->nomem);
        return;
    }
    int n = fp->cnt[i] + d;
    int j = pairs_find(lc, k);
    if (n) {
        fp->cnt[i] = n;
        lc->cnt[j] = n;
        return;
    }
    pairs_drop(fp, i);
    pairs_drop(lc, j);
}

/* f (its goal set against k's clock) joins class k. */
static void join(classes_t *c, int f, int k) {
    c->cls[f] = k;
    c->mem_pos[f] = (int)c->members[k].n;
    ivec_push(&c->members[k], f, &c->nomem);
    for (int p = c->route_ptr[f]; p < c->route_ptr[f + 1]; p++) count_add(c, k, c->route_chan[p], 1);
    clock_join(&c->clk, f, k);
}

static void release_id(classes_t *c, int k) {
    clock_release(&c->clk, k);
    c->old_rate[k] = NAN;
    c->old_at[k] = -1;
    c->free_ids[c->nfree++] = k;
}

static void drop(classes_t *c, int f) {
    int k = c->cls[f];
    ivec *mem = &c->members[k];
    int i = c->mem_pos[f];
    int last = mem->v[--mem->n];
    if (last != f) {
        mem->v[i] = last;
        c->mem_pos[last] = i;
    }
    for (int p = c->route_ptr[f]; p < c->route_ptr[f + 1]; p++)
        count_add(c, k, c->route_chan[p], -1);
    c->cls[f] = -1;
    clock_drop(&c->clk, f, k);
    if (!mem->n) release_id(c, k);
}

/* A class id off the stack, its clock at 0 bytes now, stopped. */
static int fresh(classes_t *c) {
    int k = c->free_ids[--c->nfree];
    clock_fresh(&c->clk, k);
    return k;
}

void classes_arrive(classes_t *c, int f) {
    c->clk.goal[f] = c->remaining[f];
    join(c, f, fresh(c));
}

void classes_leave(classes_t *c, int f) { drop(c, f); }

static int crosses(const classes_t *c, int f, int lk) {
    for (int p = c->route_ptr[f]; p < c->route_ptr[f + 1]; p++)
        if (c->route_chan[p] == lk) return 1;
    return 0;
}

static int split(classes_t *c, int k, int lk) {
    int new = fresh(c);
    clock_advance(&c->clk, k);
    double served = c->clk.served[k];
    c->scratch.n = 0;
    for (ptrdiff_t i = 0; i < c->members[k].n; i++)
        ivec_push(&c->scratch, c->members[k].v[i], &c->nomem);
    if (c->nomem) return new;
    for (ptrdiff_t i = 0; i < c->scratch.n; i++) {
        int f = c->scratch.v[i];
        if (crosses(c, f, lk)) {
            drop(c, f);
            c->clk.goal[f] = c->clk.goal[f] - served; /* bytes left, on the new clock (at 0) */
            join(c, f, new);
        }
    }
    return new;
}

static void merge(classes_t *c, int src, int dst) {
    pair_list *fp = &c->fp[src];
    for (int i = 0; i < fp->n; i++) {
        int lk = fp->key[i];
        pair_list *lc = &c->lc[lk];
        pairs_drop(lc, pairs_find(lc, src));
        count_add(c, dst, lk, fp->cnt[i]);
    }
    fp->n = 0;
    clock_advance(&c->clk, src);
    clock_advance(&c->clk, dst);
    double gap = c->clk.served[dst] - c->clk.served[src];
    ivec *mem = &c->members[dst], *from = &c->members[src];
    for (ptrdiff_t i = 0; i < from->n; i++) {
        int f = from->v[i];
        c->cls[f] = dst;
        c->mem_pos[f] = (int)mem->n;
        ivec_push(mem, f, &c->nomem);
        c->clk.goal[f] = c->clk.goal[f] + gap;
        clock_join(&c->clk, f, dst);
    }
    from->n = 0;
    c->clk.mh[src].n = 0;
    clock_touch(&c->clk, src);
    clock_touch(&c->clk, dst);
    release_id(c, src);
}

/* -- set-up -------------------------------------------------------------------- */

classes_t *classes_build(const net_t *net, double now, int per_flow, double *remaining,
                         double *updated, const int64_t *dseq) {
    classes_t *c = calloc(1, sizeof(classes_t));
    if (c == NULL) return NULL;
    int n = net->n, m = net->m;
    size_t N = (size_t)(n > 0 ? n : 1), M = (size_t)(m > 0 ? m : 1);
    c->n = n;
    c->m = m;
    c->capacity = net->capacity;
    c->route_ptr = net->route_ptr;
    c->route_chan = net->route_chan;
    c->cls = malloc(N * sizeof(int));
    c->mem_pos = calloc(N, sizeof(int));
    c->members = calloc(N, sizeof(ivec));
    c->fp = calloc(N, sizeof(pair_list));
    c->lc = calloc(M, sizeof(pair_list));
    c->free_ids = malloc(N * sizeof(int));
    c->old_rate = malloc(N * sizeof(double));
    c->old_at = malloc(N * sizeof(int));
    c->frozen = calloc(N, sizeof(int64_t));
    c->new_rate = calloc(N, sizeof(double));
    c->new_at = calloc(N, sizeof(int));
    c->done = calloc(M, sizeof(int64_t));
    c->canon = calloc(M, sizeof(int));
    c->canon_at = calloc(M, sizeof(int64_t));
    c->res = calloc(M, sizeof(double));
    c->nun = calloc(M, sizeof(int));
    c->nblk = (int)((M + BLOCK - 1) / BLOCK);
    c->key = malloc((size_t)c->nblk * BLOCK * sizeof(double));
    c->lev = calloc(M, sizeof(double));
    c->bmin = malloc((size_t)c->nblk * sizeof(double));
    c->bdirty = calloc((size_t)c->nblk, 1);
    int *of_link = malloc(M * sizeof(int));
    if (clocks_alloc(&c->clk, n, dseq, &c->nomem) < 0 || !c->cls || !c->members || !c->fp ||
        !c->lc || !c->free_ids || !c->old_rate || !c->old_at || !c->frozen || !c->new_rate ||
        !c->new_at || !c->done || !c->canon || !c->canon_at || !c->res || !c->nun || !c->key ||
        !c->lev || !of_link || !c->mem_pos || !c->bmin || !c->bdirty) {
        free(of_link);
        classes_free(c);
        return NULL;
    }
    for (int f = 0; f < n; f++) {
        c->cls[f] = -1;
        c->free_ids[f] = n - 1 - f; /* a stack: 0 first */
        c->old_rate[f] = NAN;
        c->old_at[f] = -1;
    }
    c->nfree = n;
    for (int l = 0; l < m; l++) {
        c->key[l] = INFINITY;
        of_link[l] = -1;
    }
    c->clk.now = now;
    c->per_flow = per_flow;
    c->remaining = remaining;
    c->updated = updated;
    for (int f = net->d_head; f >= 0; f = net->d_next[f]) {
        int b = net->fs[f].bottleneck;
        int k = b >= 0 ? of_link[b] : -1;
        if (k < 0) {
            k = fresh(c);
            if (b >= 0) of_link[b] = k;
        }
        /* The per-flow clock's bytes left now (as the event loop computes them). */
        c->clk.goal[f] = remaining[f] - net->fs[f].rate * (now - updated[f]);
        join(c, f, k);
    }
    free(of_link);
    if (c->nomem) {
        classes_free(c);
        return NULL;
    }
    return c;
}

void classes_free(classes_t *c) {
    if (c == NULL) return;
    clocks_free(&c->clk);
    for (int k = 0; k < c->n; k++) {
        if (c->members) ivec_free(&c->members[k]);
        if (c->fp) free(c->fp[k].key), free(c->fp[k].cnt);
    }
    for (int l = 0; l < c->m; l++)
        if (c->lc) free(c->lc[l].key), free(c->lc[l].cnt);
    free(c->cls);
    free(c->mem_pos);
    free(c->members);
    free(c->fp);
    free(c->lc);
    free(c->free_ids);
    free(c->old_rate);
    free(c->old_at);
    free(c->frozen);
    free(c->new_rate);
    free(c->new_at);
    free(c->done);
    free(c->canon);
    free(c->canon_at);
    free(c->res);
    free(c->nun);
    free(c->key);
    free(c->lev);
    free(c->bmin);
    free(c->bdirty);
    free(c->lk_cls);
    free(c->lk_cnt);
    ivec_free(&c->scratch);
    ivec_free(&c->order);
    free(c);
}

/* -- the filling (ClassFilling: _freeze, _fill, solve) -------------------------- */

static void freeze(classes_t *c, int k, int lk, double x) {
    c->frozen[k] = c->epoch;
    c->new_rate[k] = x;
    c->new_at[k] = lk;
    const pair_list *fp = &c->fp[k];
    for (int i = 0; i < fp->n; i++) {
        int m = fp->key[i], n = fp->cnt[i];
        if (m == lk) continue;
        double r = c->res[m] - (double)n * x;
        c->res[m] = r;
        int u = c->nun[m] - n;
        c->nun[m] = u;
        /* nun 0: every flow on m froze elsewhere, m never saturates (INFINITY). */
        double y = u > 0 ? r / (double)u : INFINITY, was = c->key[m];
        set_key(c, m, was, y);
    }
}

/* Saturate lk at x: each unfrozen class on it freezes whole, split first if
 * some of its members do not cross lk. Iterates a copy of lk's classes: a
 * split changes them. */
static void saturate_classes(classes_t *c, int lk, double x) {
    const pair_list *lc = &c->lc[lk];
    if (c->lk_room < lc->n) {
        int room = 2 * lc->n;
        int *a = realloc(c->lk_cls, (size_t)room * sizeof(int));
        if (a != NULL) c->lk_cls = a;
        int *b = a == NULL ? NULL : realloc(c->lk_cnt, (size_t)room * sizeof(int));
        if (b == NULL) {
            c->nomem = 1;
            return;
        }
        c->lk_cnt = b;
        c->lk_room = room;
    }
    int n = lc->n;
    memcpy(c->lk_cls, lc->key, (size_t)n * sizeof(int));
    memcpy(c->lk_cnt, lc->cnt, (size_t)n * sizeof(int));
    int left = c->nun[lk]; /* unfrozen flows on lk: none left, no class to find */
    for (int i = 0; i < n && left > 0 && !c->nomem; i++) {
        int k = c->lk_cls[i];
        if (c->frozen[k] == c->epoch) continue;
        if (c->lk_cnt[i] != c->members[k].n) k = split(c, k, lk);
        freeze(c, k, lk, x);
        ivec_push(&c->order, k, &c->nomem);
        left -= c->lk_cnt[i];
    }
}

static void fill_classes(classes_t *c, const int *users_n) {
    int64_t epoch = ++c->epoch;
    c->order.n = 0;
    for (int lk = 0; lk < c->nblk * BLOCK; lk++) {
        int on = lk < c->m ? users_n[lk] : 0;
        c->key[lk] = INFINITY; /* no flow: never saturates */
        if (on) {
            double cap = c->capacity[lk];
            c->res[lk] = cap;
            c->nun[lk] = on;
            c->key[lk] = cap / (double)on;
        }
    }
    for (int b = 0; b < c->nblk; b++) {
        c->bmin[b] = block_min(c->key, b);
        c->bdirty[b] = 0;
    }
    double at = 0.0;
    for (int lk; !c->nomem && (lk = least_link(c)) >= 0;) {
        double y = c->key[lk];
        c->key[lk] = INFINITY;
        /* Rounding can put a level a hair below the fill level reached. */
        double x = y > at ? y : at;
        at = x;
        c->done[lk] = epoch;
        c->lev[lk] = x;
        saturate_classes(c, lk, x);
    }
}

/* Re-solve every class; write each link's level into net and, per_flow, each
 * flow's rate and bottleneck, the changed flows into net->changed (arrivals
 * first). */
int classes_solve(classes_t *c, net_t *net, const int *arrivals, ptrdiff_t num_arrivals) {
    fill_classes(c, net->users_n);
    if (c->nomem) return -1;
    int64_t epoch = c->epoch;
    for (int lk = 0; lk < c->m; lk++)
        net->level[lk] = c->done[lk] == epoch ? c->lev[lk] : INFINITY;
    for (ptrdiff_t i = 0; c->per_flow && i < num_arrivals; i++)
        changed_push(&net->changed, arrivals[i], 0.0, &net->nomem);
    for (ptrdiff_t o = 0; o < c->order.n; o++) {
        int k = c->order.v[o];
        double x = c->new_rate[k];
        int lk = c->new_at[k];
        if (x != c->clk.crate[k]) {
            clock_advance(&c->clk, k); /* served so far at the old rate */
            c->clk.crate[k] = x;
            clock_touch(&c->clk, k);
        }
        if (c->per_flow && (x != c->old_rate[k] || lk != c->old_at[k])) {
            const ivec *mem = &c->members[k];
            for (ptrdiff_t i = 0; i < mem->n; i++) {
                flow_share *q = &net->fs[mem->v[i]];
                double old = q->rate;
                q->bottleneck = lk;
                if (old == 0.0) {
                    q->rate = x; /* an arrival, listed already */
                } else if (old != x) {
                    q->rate = x;
                    changed_push(&net->changed, mem->v[i], old, &net->nomem);
                }
            }
            c->old_rate[k] = x;
            c->old_at[k] = lk;
        }
    }
    for (ptrdiff_t o = 0; o < c->order.n; o++) {
        int k = c->order.v[o];
        int lk = c->new_at[k];
        if (c->canon_at[lk] != epoch) {
            c->canon_at[lk] = epoch;
            c->canon[lk] = k;
            continue;
        }
        int dst = c->canon[lk];
        if (c->members[k].n > c->members[dst].n) {
            int t = k;
            k = dst;
            dst = t;
        }
        merge(c, k, dst);
        c->canon[lk] = dst;
    }
    for (ptrdiff_t i = 0; i < c->clk.touched.n; i++) {
        int k = c->clk.touched.v[i];
        if (c->members[k].n) clock_schedule(&c->clk, k);
    }
    c->clk.touched.n = 0;
    return c->nomem || net->nomem ? -1 : 0;
}

/* -- the classes end (ClassFilling: rates, materialize) -------------------------- */

void classes_sync(const classes_t *c, flow_share *fs) {
    for (int k = 0; k < c->n; k++) {
        const ivec *mem = &c->members[k];
        for (ptrdiff_t i = 0; i < mem->n; i++) {
            fs[mem->v[i]].rate = c->clk.crate[k];
            fs[mem->v[i]].bottleneck = c->new_at[k];
        }
    }
}

void classes_materialize(classes_t *c, double *remaining, double *updated) {
    for (int k = 0; k < c->n; k++) {
        const ivec *mem = &c->members[k];
        if (!mem->n) continue;
        clock_advance(&c->clk, k);
        for (ptrdiff_t i = 0; i < mem->n; i++) {
            int f = mem->v[i];
            remaining[f] = c->clk.goal[f] - c->clk.served[k];
            updated[f] = c->clk.now;
        }
    }
}
