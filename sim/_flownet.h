/* The network as every solver of the sharing reads and writes it: one layer
 * above the containers, types only (no functions).
 *
 * Offers:
 * - flow_share: one flow's rate and bottleneck (and the lazy update's marks);
 * - net_t: the links and routes, the draining flows, each flow's rate and
 *   each link's level, and the flows whose rate the last update changed.
 *
 * The sharing (_flowshare.c) owns a net_t and keeps the draining flows in it;
 * each solver below it -- the lazy update there, the whole solve
 * (_flowwhole.c), the solve by classes (_flowclass.c) -- writes the rates,
 * bottlenecks, levels and the changed set of one update into it.
 */
#ifndef SIM_FLOWNET_H
#define SIM_FLOWNET_H

#include <stdint.h>

#include "_flowvec.h"

/* One flow's sharing state, together: the filling reads all of it for every
 * flow on a link, and one cache line per flow beats five scattered arrays.
 * fixed, loose and new_rate are the lazy update's (_flowshare.c). */
typedef struct {
    int64_t fixed, loose; /* frozen / unfrozen in the update with this number */
    double rate, new_rate;
    int bottleneck; /* the link that sets its rate, -1: none */
} flow_share;

typedef struct {
    int m, n;                          /* links; nodes (a flow is a node) */
    double *capacity;                  /* per link: bytes per second */
    const int *route_ptr, *route_chan; /* flow f crosses route_chan[route_ptr[f]..] */
    int *users_n;                      /* per link: how many draining flows cross it */
    double *level;                     /* per link: its saturation level, INFINITY: none */
    flow_share *fs;                    /* per flow */
    int *d_prev, *d_next;              /* the draining flows, a list in arrival order */
    int d_head, d_tail, d_count;
    changed_set changed; /* the flows whose rate the last update changed, arrivals first */
    int nomem;           /* an allocation failed: the state is void */
} net_t;

#endif
