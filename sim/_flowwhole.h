/* The whole solve of a big batch (sim.maxmin.max_min_rates and
 * sim.sharing.LinkSharing._solve_all): a solver, above the containers and the
 * network (_flownet.h), below the sharing (_flowshare.c) that calls it when
 * an update's batch is too big for the lazy update.
 *
 * Offers whole_solve: every draining flow's rate and bottleneck, every link's
 * level, and the changed set (arrivals first), into the net_t.
 */
#ifndef SIM_FLOWWHOLE_H
#define SIM_FLOWWHOLE_H

#include <stddef.h>

#include "_flownet.h"

/* 0, or -1 when out of memory. */
int whole_solve(net_t *net, const int *arrivals, ptrdiff_t num_arrivals);

#endif
