/* Max-min fair sharing kept between events (sim.sharing.LinkSharing): the
 * layer that drives the solvers, above the containers, the network
 * (_flownet.h), the whole solve (_flowwhole.h) and the classes
 * (_flowclass.h); below the event loop (_flowcore.c).
 *
 * Each update applies arrivals and departures to the draining flows and
 * solves by one of three: the lazy update (here: re-solve only the links the
 * changes reach), the whole solve of a big batch, or the classes while
 * thousands of flows drain (sim/sharing.py: _class_mode).
 *
 * Offers:
 * - share_t and share_init / share_free;
 * - share_update: one update at `now`; the rates, bottlenecks, levels and the
 *   changed set are in s->net afterwards;
 * - share_close: the links' busy seconds up to the end.
 */
#ifndef SIM_FLOWSHARE_H
#define SIM_FLOWSHARE_H

#include <stddef.h>
#include <stdint.h>

#include "_flowclass.h"
#include "_flownet.h"
#include "_flowvec.h"

/* One entry of the filling heap: ordered by (key, kind, lk), like the Python tuples. */
typedef struct {
    double key;
    int kind;
    int lk;
} fill_item;

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

typedef struct {
    net_t net;          /* what every solver reads and writes */
    int **users;        /* users[l]: draining flows on l, in arrival order */
    int *users_cap;     /* (their number is net.users_n[l]) */
    int **upair; /* upair[l][i]: the route position (pair) of users[l][i] */
    link_cache *lc; /* per link, kept from its first solve in an update */
    int *h_pos;     /* per route position: its index in its link's held or unfrozen list */
    double *busy_s, *since;
    int64_t epoch;
    int64_t *dirty, *done, *queued;
    int64_t *exact; /* key[l] is l's level as its flows stand, solved in this update */
    double *key;
    fill_item *heap;
    ptrdiff_t heap_n, heap_cap;
    ivec stale, dirty_links, frozen;
    double at;
    long batch_pairs, class_load; /* the switches of sim/sharing.py */
    long pairs;                   /* (flow, link) pairs of the draining flows */
    int track_rates; /* 0: by classes, per-flow rates only when the classes end */
    classes_t *cls; /* while solving by classes, else NULL */
    double *remaining, *updated; /* the event loop's per-flow clocks (classes_build) */
    const int64_t *dseq;
    double *held;
    ptrdiff_t held_cap;
} share_t;

/* 0, or -1 when out of memory (share_free then). */
int share_init(share_t *s, int m, const double *capacity, int n, const int *route_ptr,
               const int *route_chan, long batch_pairs, long class_load);
void share_free(share_t *s);
/* Apply arrivals and departures at `now`; fills s->net.changed. 0 or -1. */
int share_update(share_t *s, double now, const int *arrivals, ptrdiff_t num_arrivals,
                 const int *departures, ptrdiff_t num_departures);
void share_close(share_t *s, double now);

#endif
