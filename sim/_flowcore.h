/* The compiled flow-event core of sim.engine: shared types and prototypes.
 *
 * Three parts, one per file:
 * - _flowshare.c: LinkSharing (sim/sharing.py) ported statement by
 *   statement, so every rate, level and bottleneck is the same double as the
 *   Python reference computes; _flowwhole.c: its whole solve of big batches
 *   (max_min_rates of sim/maxmin.py), likewise;
 * - _flowclass.c: the solve by bottleneck classes (sim/classshare.py) that
 *   replaces the lazy update while thousands of flows drain, and
 *   _flowclock.c: the classes' clocks, which replace the flows' finish heap;
 * - _flowcore.c: the engine's event loop (sim/pycore.py) over a heap agenda,
 *   and the Python module sim._flowcore.
 *
 * Plain C99 and IEEE doubles: build without -ffast-math and without FP
 * contraction, or the results stop matching the Python reference bit for bit.
 */
#ifndef SIM_FLOWCORE_H
#define SIM_FLOWCORE_H

#include <stddef.h>
#include <stdint.h>

/* A growable array of ints; a failed allocation sets *nomem and drops the push. */
typedef struct {
    int *v;
    ptrdiff_t n, cap;
} ivec;

int ivec_push(ivec *a, int x, int *nomem);
void ivec_free(ivec *a);

/* One entry of the filling heap: ordered by (key, kind, lk), like the Python tuples. */
typedef struct {
    double key;
    int kind;
    int lk;
} fill_item;

/* One flow's sharing state, together: the filling reads all of it for every
 * flow on a link, and one cache line per flow beats five scattered arrays. */
typedef struct {
    int64_t fixed, loose; /* frozen / unfrozen in the update with this number */
    double rate, new_rate;
    int bottleneck;
} flow_share;

/* A link's flows as one update's filling stands (valid while epoch is the
 * update's): capacity less the rates frozen, the unfrozen flows, and the held
 * flows with their old rates; flows and route positions ("pairs"). */
typedef struct {
    int64_t epoch;
    double cap;
    int nheld, nunf, room;
    double *rate;
    int *ints; /* one allocation: hflow, hpair, uflow, upair, room each */
    int *hflow, *hpair, *uflow, *upair;
} link_cache;

/* The event loop's draining flows by (predicted[f], dseq[f]); pos[f]: f's
 * place, -1 when not in it. */
typedef struct {
    int *v, *pos, n;
    const double *predicted;
    const int64_t *dseq;
} fheap_t;

/* The finish heap, one entry per draining flow, updated in place: here, to be
 * inlined into the event loop (_flowcore.c), its hottest caller. */

static inline int finish_less(const fheap_t *h, int a, int b) {
    double ta = h->predicted[a], tb = h->predicted[b];
    if (ta != tb) return ta < tb;
    return h->dseq[a] < h->dseq[b];
}

static inline void fheap_place(fheap_t *h, int i, int f) {
    h->v[i] = f;
    h->pos[f] = i;
}

static inline void fheap_sift(fheap_t *h, int i) {
    int f = h->v[i];
    while (i > 0) { /* up */
        int parent = (i - 1) / 2;
        if (!finish_less(h, f, h->v[parent])) break;
        fheap_place(h, i, h->v[parent]);
        i = parent;
    }
    while (1) { /* down */
        int child = 2 * i + 1;
        if (child >= h->n) break;
        if (child + 1 < h->n && finish_less(h, h->v[child + 1], h->v[child])) child++;
        if (!finish_less(h, h->v[child], f)) break;
        fheap_place(h, i, h->v[child]);
        i = child;
    }
    fheap_place(h, i, f);
}

static inline void fheap_set(fheap_t *h, int f) {
    if (h->pos[f] < 0) {
        h->pos[f] = h->n;
        h->v[h->n++] = f;
    }
    fheap_sift(h, h->pos[f]);
}

static inline int fheap_pop(fheap_t *h) {
    int top = h->v[0];
    h->pos[top] = -1;
    int last = h->v[--h->n];
    if (h->n > 0) {
        fheap_place(h, 0, last);
        fheap_sift(h, 0);
    }
    return top;
}


/* (link or class, count) pairs of a class's footprint or a link's classes. */
typedef struct {
    int *key, *cnt;
    int n, cap;
} pair_list;

/* The draining flows in bottleneck classes (sim.classshare.ClassFilling). */
typedef struct {
    int n, m;
    const double *capacity;
    const int *route_ptr, *route_chan;
    int *cls, *mem_pos; /* per flow: its class, its place in the member list */
    ivec *members;      /* per class */
    pair_list *fp;      /* per class: links and how many members cross each */
    pair_list *lc;      /* per link: classes and how many of their members cross it */
    int *free_ids, nfree;
    double *old_rate, *new_rate;
    int *old_at, *new_at;
    int64_t *frozen, epoch;
    int64_t *done, *canon_at;
    int *canon, *nun;
    double *res, *key, *lev;
    int nblk;               /* key[] in blocks of links (_flowclass.c: BLOCK) ... */
    double *bmin;           /* ... each one's least key ... */
    unsigned char *bdirty;  /* ... unless marked: recomputed at the next pop */
    int *lk_cls, *lk_cnt, lk_room; /* a copy of one link's classes */
    ivec scratch, order;
    int nomem;
    int per_flow; /* write members' rates at every solve, else in classes_sync */
    /* the clocks (_flowclock.c) */
    double now;
    double *served, *since, *crate, *nxt; /* per class: bytes served as of since, rate */
    double *goal;                         /* per flow: served bytes at which it is done */
    double *remaining, *updated;          /* the event loop's per-flow clocks */
    const int64_t *dseq;                  /* the event loop's drain order */
    ivec *mh;                             /* per class: its members by goal */
    int *mpos;                            /* per flow: its place there, -1: none */
    int *cheap, *cpos, cheap_n;           /* the classes by next finish */
    int64_t stamp, *touched_at;
    ivec touched;
} classes_t;

/* Max-min fair sharing kept between events (sim.sharing.LinkSharing). */
typedef struct share_s {
    int m, n;
    double *capacity;
    int **users;        /* users[l]: draining flows on l, in arrival order */
    int *users_n, *users_cap;
    int **upair; /* upair[l][i]: the route position (pair) of users[l][i] */
    link_cache *lc; /* per link, kept from its first solve in an update */
    int *h_pos;     /* per route position: its index in its link's held or unfrozen list */
    double *level, *busy_s, *since;
    const int *route_ptr, *route_chan; /* flow f crosses route_chan[route_ptr[f]..] */
    flow_share *fs; /* per flow: rate, bottleneck, this update's marks */
    int64_t epoch;
    int64_t *dirty, *done, *queued;
    int64_t *exact; /* key[l] is l's level as its flows stand, solved in this update */
    double *key;
    fill_item *heap;
    ptrdiff_t heap_n, heap_cap;
    ivec stale, dirty_links, frozen;
    double at;
    int *d_prev, *d_next; /* the draining flows, a list in arrival order */
    int d_head, d_tail, d_count;
    long batch_pairs, class_load; /* the switches of sim/sharing.py */
    long pairs;                   /* (flow, link) pairs of the draining flows */
    int track_rates; /* 0: by classes, per-flow rates only when the classes end */
    classes_t *cls; /* while solving by classes, else NULL */
    double *remaining, *updated; /* the event loop's per-flow clocks (classes_build) */
    const int64_t *dseq;
    double *held;
    ptrdiff_t held_cap;
    ivec changed;         /* flows whose rate changed in the last update ... */
    double *changed_old;  /* ... and their old rates */
    ptrdiff_t changed_old_cap;
    int nomem;
} share_t;

int share_init(share_t *s, int m, const double *capacity, int n, const int *route_ptr,
               const int *route_chan, long batch_pairs, long class_load);
void share_free(share_t *s);
/* Apply arrivals and departures at `now`; fills s->changed / s->changed_old. 0 or -1. */
int share_update(share_t *s, double now, const int *arrivals, ptrdiff_t num_arrivals,
                 const int *departures, ptrdiff_t num_departures);
void share_close(share_t *s, double now);
/* Internal to the two sharing files: record a changed rate; solve every draining flow. */
void changed_push(share_t *s, int f, double old);
int solve_all(share_t *s, const int *arrivals, ptrdiff_t num_arrivals);
/* The classes (_flowclass.c): built over the draining flows, kept up to date, solved. */
classes_t *classes_build(const share_t *s, double now);
void classes_free(classes_t *c);
void classes_arrive(classes_t *c, int f);
void classes_leave(classes_t *c, int f);
int classes_solve(share_t *s, const int *arrivals, ptrdiff_t num_arrivals);
/* The classes' clocks (_flowclock.c): for _flowclass.c ... */
int clocks_alloc(classes_t *c);
void clocks_free(classes_t *c);
void clock_touch(classes_t *c, int k);
void clock_advance(classes_t *c, int k);
void clock_fresh(classes_t *c, int k);
void clock_join(classes_t *c, int f, int k);
void clock_drop(classes_t *c, int f, int k);
void clock_release(classes_t *c, int k);
void clock_schedule(classes_t *c, int k);
/* ... and for the event loop. */
void classes_begin(classes_t *c, double now);
double classes_next_due(const classes_t *c);
void classes_pop_due(classes_t *c, double limit, ivec *out, int *nomem);
void classes_materialize(classes_t *c, double *remaining, double *updated);
void classes_sync(const classes_t *c, flow_share *fs); /* members' rates, bottlenecks */

#endif
