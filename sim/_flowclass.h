/* Max-min fair sharing over bottleneck classes, for dense traffic
 * (sim.classshare.ClassFilling): a solver, above the containers, the network
 * (_flownet.h) and the clocks it keeps one per class (_flowclock.h); below
 * the sharing (_flowshare.c) that builds, updates and ends it.
 *
 * Offers:
 * - classes_t and classes_build (over the draining flows of a net_t, their
 *   bytes left from the event loop's per-flow clocks) / classes_free;
 * - classes_arrive / classes_leave: a flow starts or stops draining;
 * - classes_solve: one update's rates, bottlenecks and levels into the net_t;
 * - classes_sync / classes_materialize: when the classes end, the members'
 *   rates and bottlenecks, and their bytes left, back into per-flow state.
 * The event loop reads the classes' clocks (c->clk) through _flowclock.h.
 */
#ifndef SIM_FLOWCLASS_H
#define SIM_FLOWCLASS_H

#include <stddef.h>
#include <stdint.h>

#include "_flowclock.h"
#include "_flownet.h"
#include "_flowvec.h"

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
    int nblk;              /* key[] in blocks of links (_flowclass.c: BLOCK) ... */
    double *bmin;          /* ... each one's least key ... */
    unsigned char *bdirty; /* ... unless marked: recomputed at the next pop */
    int *lk_cls, *lk_cnt, lk_room; /* a copy of one link's classes */
    ivec scratch, order;
    int nomem;
    int per_flow;                 /* write members' rates at every solve, else in classes_sync */
    double *remaining, *updated; /* the event loop's per-flow clocks */
    clocks_t clk;                /* one clock per class */
} classes_t;

/* NULL when out of memory. per_flow: see classes_t. */
classes_t *classes_build(const net_t *net, double now, int per_flow, double *remaining,
                         double *updated, const int64_t *dseq);
void classes_free(classes_t *c);
void classes_arrive(classes_t *c, int f);
void classes_leave(classes_t *c, int f);
/* Re-solve every class (0, or -1 when out of memory). */
int classes_solve(classes_t *c, net_t *net, const int *arrivals, ptrdiff_t num_arrivals);
void classes_sync(const classes_t *c, flow_share *fs); /* members' rates, bottlenecks */
void classes_materialize(classes_t *c, double *remaining, double *updated);

#endif
