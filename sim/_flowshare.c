/* Max-min fair link sharing, kept between events: sim/sharing.py in C.
 *
 * Every function below is a statement-by-statement port of the method of
 * sim.sharing.LinkSharing (or sim.maxmin.max_min_rates) with the same name,
 * with the same operations in the same order on IEEE doubles, so that the
 * compiled engine and the pure-Python reference agree bit for bit
 * (tests/sim/test_compiled.py). The algorithm and its proof are in the
 * docstring of sim/sharing.py.
 */
#include "_flowcore.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-12
#define SATURATE 0
#define CHECK 1

int ivec_push(ivec *a, int x, int *nomem) {
    if (a->n == a->cap) {
        ptrdiff_t cap = a->cap ? 2 * a->cap : 16;
        int *v = realloc(a->v, (size_t)cap * sizeof(int));
        if (v == NULL) {
            *nomem = 1;
            return -1;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

void ivec_free(ivec *a) {
    free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

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
            s->nomem = 1;
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
               const int *route_chan, long batch_pairs) {
    memset(s, 0, sizeof(*s));
    s->m = m;
    s->n = n;
    s->route_ptr = route_ptr;
    s->route_chan = route_chan;
    s->batch_pairs = batch_pairs;
    s->d_head = s->d_tail = -1;
    size_t M = (size_t)(m > 0 ? m : 1), N = (size_t)(n > 0 ? n : 1);
    s->capacity = malloc(M * sizeof(double));
    s->users = calloc(M, sizeof(int *));
    s->users_n = calloc(M, sizeof(int));
    s->upair = calloc(M, sizeof(int *));
    s->cache = calloc(M, sizeof(int64_t));
    s->c_cap = calloc(M, sizeof(double));
    s->c_unf = calloc(M, sizeof(int));
    s->h_rate = calloc(M, sizeof(double *));
    s->h_pair = calloc(M, sizeof(int *));
    s->h_n = calloc(M, sizeof(int));
    s->h_cap = calloc(M, sizeof(int));
    s->h_pos = calloc((size_t)(n > 0 && route_ptr[n] > 0 ? route_ptr[n] : 1), sizeof(int));
    s->users_cap = calloc(M, sizeof(int));
    s->level = malloc(M * sizeof(double));
    s->busy_s = calloc(M, sizeof(double));
    s->since = calloc(M, sizeof(double));
    s->dirty = calloc(M, sizeof(int64_t));
    s->done = calloc(M, sizeof(int64_t));
    s->queued = calloc(M, sizeof(int64_t));
    s->exact = calloc(M, sizeof(int64_t));
    s->key = malloc(M * sizeof(double));
    s->fs = calloc(N, sizeof(flow_share));
    s->d_prev = malloc(N * sizeof(int));
    s->d_next = malloc(N * sizeof(int));
    if (!s->upair || !s->cache || !s->c_cap || !s->c_unf || !s->h_rate || !s->h_pair || !s->h_n ||
        !s->h_cap || !s->h_pos)
        return -1;
    if (!s->capacity || !s->users || !s->users_n || !s->users_cap || !s->level || !s->busy_s ||
        !s->since || !s->dirty || !s->done || !s->queued || !s->exact || !s->key || !s->fs ||
        !s->d_prev || !s->d_next)
        return -1;
    for (int l = 0; l < m; l++) {
        s->capacity[l] = capacity[l];
        s->level[l] = INFINITY;
        s->key[l] = INFINITY;
    }
    for (int f = 0; f < n; f++) s->fs[f].bottleneck = -1;
    return 0;
}

void share_free(share_t *s) {
    for (int l = 0; l < s->m; l++) {
        if (s->users) free(s->users[l]);
        if (s->upair) free(s->upair[l]);
        if (s->h_rate) free(s->h_rate[l]);
        if (s->h_pair) free(s->h_pair[l]);
    }
    free(s->upair);
    free(s->cache);
    free(s->c_cap);
    free(s->c_unf);
    free(s->h_rate);
    free(s->h_pair);
    free(s->h_n);
    free(s->h_cap);
    free(s->h_pos);
    free(s->capacity);
    free(s->users);
    free(s->users_n);
    free(s->users_cap);
    free(s->level);
    free(s->busy_s);
    free(s->since);
    free(s->dirty);
    free(s->done);
    free(s->queued);
    free(s->exact);
    free(s->key);
    free(s->fs);
    free(s->d_prev);
    free(s->d_next);
    free(s->heap);
    free(s->held);
    free(s->changed_old);
    ivec_free(&s->stale);
    ivec_free(&s->dirty_links);
    ivec_free(&s->frozen);
    ivec_free(&s->changed);
    memset(s, 0, sizeof(*s));
}

void share_close(share_t *s, double now) {
    for (int l = 0; l < s->m; l++) {
        if (s->users_n[l]) {
            s->busy_s[l] += now - s->since[l];
            s->since[l] = now;
        }
    }
}

/* -- bookkeeping: users, the draining list, the changed list ---------------- */

static void users_append(share_t *s, int lk, int f, int p) {
    if (s->users_n[lk] == s->users_cap[lk]) {
        int cap = s->users_cap[lk] ? 2 * s->users_cap[lk] : 4;
        int *v = realloc(s->users[lk], (size_t)cap * sizeof(int));
        if (v != NULL) s->users[lk] = v;
        int *w = v == NULL ? NULL : realloc(s->upair[lk], (size_t)cap * sizeof(int));
        if (w == NULL) {
            s->nomem = 1;
            return;
        }
        s->upair[lk] = w;
        s->users_cap[lk] = cap;
    }
    s->upair[lk][s->users_n[lk]] = p;
    s->users[lk][s->users_n[lk]++] = f;
}

static void users_remove(share_t *s, int lk, int f) {
    /* list.remove: the first occurrence, order kept. */
    int *u = s->users[lk];
    int k = s->users_n[lk];
    for (int i = 0; i < k; i++) {
        if (u[i] == f) {
            memmove(u + i, u + i + 1, (size_t)(k - i - 1) * sizeof(int));
            int *q = s->upair[lk];
            memmove(q + i, q + i + 1, (size_t)(k - i - 1) * sizeof(int));
            s->users_n[lk] = k - 1;
            return;
        }
    }
}

static void draining_add(share_t *s, int f) {
    s->d_prev[f] = s->d_tail;
    s->d_next[f] = -1;
    if (s->d_tail >= 0)
        s->d_next[s->d_tail] = f;
    else
        s->d_head = f;
    s->d_tail = f;
    s->d_count++;
}

static void draining_remove(share_t *s, int f) {
    int p = s->d_prev[f], q = s->d_next[f];
    if (p >= 0)
        s->d_next[p] = q;
    else
        s->d_head = q;
    if (q >= 0)
        s->d_prev[q] = p;
    else
        s->d_tail = p;
    s->d_count--;
}

void changed_push(share_t *s, int f, double old) {
    if (s->changed.n == s->changed_old_cap) {
        ptrdiff_t cap = s->changed_old_cap ? 2 * s->changed_old_cap : 64;
        double *v = realloc(s->changed_old, (size_t)cap * sizeof(double));
        if (v == NULL) {
            s->nomem = 1;
            return;
        }
        s->changed_old = v;
        s->changed_old_cap = cap;
    }
    s->changed_old[s->changed.n] = old;
    ivec_push(&s->changed, f, &s->nomem);
}

/* -- marking links dirty ----------------------------------------------------- */

static void first_dirty(share_t *s, int lk) {
    s->dirty[lk] = s->epoch;
    ivec_push(&s->dirty_links, lk, &s->nomem);
    double old = s->level[lk];
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
        ivec_push(&s->stale, lk, &s->nomem);
    }
}

/* -- the filling -------------------------------------------------------------- */

/* A link's flows as the filling stands, kept from its first solve in an
 * update (sim/sharing.py, _cache_build): its capacity less the rates frozen
 * in this update, how many flows are unfrozen, and the rates of the others
 * (held at their old rates elsewhere). Freezing or loosening one of its flows
 * updates these (cache_unhold and saturate, release), so a second solve of
 * the link reads them instead of every flow on it. */
static void cache_build(share_t *s, int lk) {
    int64_t epoch = s->epoch;
    int k = s->users_n[lk];
    if (s->h_cap[lk] < k) {
        double *v = realloc(s->h_rate[lk], (size_t)k * sizeof(double));
        if (v != NULL) s->h_rate[lk] = v;
        int *w = v == NULL ? NULL : realloc(s->h_pair[lk], (size_t)k * sizeof(int));
        if (w == NULL) {
            s->nomem = 1;
            return;
        }
        s->h_pair[lk] = w;
        s->h_cap[lk] = k;
    }
    double cap = s->capacity[lk];
    int unfrozen = 0, nheld = 0;
    const int *u = s->users[lk], *pair = s->upair[lk];
    double *rate = s->h_rate[lk];
    int *hp = s->h_pair[lk];
    for (int i = 0; i < k; i++) {
        const flow_share *q = &s->fs[u[i]];
        if (q->fixed == epoch) {
            cap -= q->new_rate;
        } else if (q->loose == epoch || q->bottleneck == lk) {
            unfrozen += 1;
        } else {
            rate[nheld] = q->rate;
            hp[nheld] = pair[i];
            s->h_pos[pair[i]] = nheld;
            nheld++;
        }
    }
    s->c_cap[lk] = cap;
    s->c_unf[lk] = unfrozen;
    s->h_n[lk] = nheld;
    s->cache[lk] = epoch;
}

/* The flow crossing lk as route position p is no longer held there: the
 * last held entry takes its place (the Python twin moves the same one). */
static void cache_unhold(share_t *s, int lk, int p) {
    int k = s->h_pos[p], last = --s->h_n[lk];
    if (k != last) {
        int q = s->h_pair[lk][last];
        s->h_rate[lk][k] = s->h_rate[lk][last];
        s->h_pair[lk][k] = q;
        s->h_pos[q] = k;
    }
}

static double level_of(share_t *s, int lk) {
    if (s->cache[lk] != s->epoch) cache_build(s, lk);
    if (s->nomem) return INFINITY;
    double cap = s->c_cap[lk];
    int unfrozen = s->c_unf[lk];
    ptrdiff_t nheld = 0;
    int k = s->h_n[lk];
    if (s->held_cap < k) {
        double *h = realloc(s->held, (size_t)k * sizeof(double));
        if (h == NULL) {
            s->nomem = 1;
            return INFINITY;
        }
        s->held = h;
        s->held_cap = k;
    }
    /* A flow held below the fill level reached is frozen already: it only
     * takes capacity. */
    double at = s->at;
    const double *rate = s->h_rate[lk];
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

static void saturate(share_t *s, int lk, double x) {
    int64_t epoch = s->epoch;
    s->done[lk] = epoch;
    s->level[lk] = x;
    double above = x * (1.0 + REL_TOL);
    double below = x * (1.0 - REL_TOL);
    const int *u = s->users[lk];
    int k = s->users_n[lk];
    for (int i = 0; i < k; i++) {
        int f = u[i];
        if (s->fs[f].fixed == epoch) continue;
        int was = s->fs[f].bottleneck;
        double old = s->fs[f].rate;
        int unfrozen = s->fs[f].loose == epoch;
        if (!unfrozen && was != lk && old < below) continue;
        s->fs[f].fixed = epoch;
        s->fs[f].new_rate = x;
        s->fs[f].bottleneck = lk;
        ivec_push(&s->frozen, f, &s->nomem);
        for (int p = s->route_ptr[f]; p < s->route_ptr[f + 1]; p++) {
            int m = s->route_chan[p];
            if (m == lk) continue;
            if (s->cache[m] == epoch) {
                if (unfrozen || was == m)
                    s->c_unf[m] -= 1;
                else
                    cache_unhold(s, m, p);
                s->c_cap[m] -= x;
            }
            if (unfrozen || was == m || old > above)
                raised(s, m);
            else if (old < below)
                lowered(s, m);
            else
                s->exact[m] = 0; /* the same rate to 1e-12, but not the same double */
        }
    }
}

static void release(share_t *s, int lk) {
    int64_t epoch = s->epoch;
    const int *u = s->users[lk];
    int k = s->users_n[lk];
    for (int i = 0; i < k; i++) {
        int f = u[i];
        if (s->fs[f].fixed != epoch && s->fs[f].loose != epoch && s->fs[f].bottleneck == lk) {
            s->fs[f].loose = epoch;
            for (int p = s->route_ptr[f]; p < s->route_ptr[f + 1]; p++) {
                int m = s->route_chan[p];
                if (m == lk) continue;
                if (s->cache[m] == epoch) { /* held there (bottlenecked at lk): now unfrozen */
                    cache_unhold(s, m, p);
                    s->c_unf[m] += 1;
                }
                lowered(s, m);
            }
        }
    }
}

static void fill(share_t *s) {
    int64_t epoch = s->epoch;
    while (!s->nomem) {
        if (s->stale.n) resolve(s);
        if (!s->heap_n) break;
        fill_item it = heap_pop(s);
        int lk = it.lk;
        if (s->done[lk] == epoch) continue;
        if (it.kind == CHECK) {
            double old = s->level[lk];
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
        if (s->done[lk] != epoch) s->level[lk] = INFINITY;
    }
    s->dirty_links.n = 0;
    for (ptrdiff_t i = 0; i < num_arrivals; i++) changed_push(s, arrivals[i], 0.0);
    for (ptrdiff_t i = 0; i < s->frozen.n; i++) {
        int f = s->frozen.v[i];
        double r = s->fs[f].new_rate;
        double old = s->fs[f].rate;
        if (old == 0.0) {
            s->fs[f].rate = r;
        } else if (s->fs[f].loose == epoch || fabs(r - old) > REL_TOL * r) {
            s->fs[f].rate = r;
            changed_push(s, f, old);
        }
    }
    s->frozen.n = 0;
}

/* -- one update ---------------------------------------------------------------- */

int share_update(share_t *s, double now, const int *arrivals, ptrdiff_t num_arrivals,
                 const int *departures, ptrdiff_t num_departures) {
    int64_t epoch = ++s->epoch;
    s->at = 0.0;
    s->changed.n = 0;
    long pairs = 0;
    for (ptrdiff_t i = 0; i < num_departures; i++) {
        int f = departures[i];
        pairs += s->route_ptr[f + 1] - s->route_ptr[f];
    }
    for (ptrdiff_t i = 0; i < num_arrivals; i++) {
        int f = arrivals[i];
        pairs += s->route_ptr[f + 1] - s->route_ptr[f];
    }
    int whole = pairs > s->batch_pairs;
    for (ptrdiff_t i = 0; i < num_departures; i++) {
        int f = departures[i];
        draining_remove(s, f);
        for (int p = s->route_ptr[f]; p < s->route_ptr[f + 1]; p++) {
            int lk = s->route_chan[p];
            users_remove(s, lk, f);
            if (!s->users_n[lk]) s->busy_s[lk] += now - s->since[lk];
            if (!whole) raised(s, lk);
        }
        s->fs[f].rate = 0.0;
        s->fs[f].bottleneck = -1;
    }
    for (ptrdiff_t i = 0; i < num_arrivals; i++) {
        int f = arrivals[i];
        draining_add(s, f);
        s->fs[f].loose = epoch;
        for (int p = s->route_ptr[f]; p < s->route_ptr[f + 1]; p++) {
            int lk = s->route_chan[p];
            if (!s->users_n[lk]) s->since[lk] = now;
            users_append(s, lk, f, p);
        }
    }
    if (whole) {
        if (solve_all(s, arrivals, num_arrivals) < 0) s->nomem = 1;
        return s->nomem ? -1 : 0;
    }
    for (ptrdiff_t i = 0; i < num_arrivals; i++) {
        int f = arrivals[i];
        for (int p = s->route_ptr[f]; p < s->route_ptr[f + 1]; p++) lowered(s, s->route_chan[p]);
    }
    fill(s);
    commit(s, arrivals, num_arrivals);
    return s->nomem ? -1 : 0;
}
