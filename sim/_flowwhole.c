/* The whole solve of a big batch (_flowwhole.h): sim.maxmin.max_min_rates and
 * sim.sharing.LinkSharing._solve_all in C, statement by statement (see
 * _flowshare.c for the lazy update and the rules both files keep).
 */
#include "_flowwhole.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-12

/* -- the whole solve (sim.maxmin.max_min_rates and LinkSharing._solve_all) --- */

#define SHARE_REL_TOL 1e-9

/* Progressive filling freezing every local bottleneck per round; pf/pl are
 * consumed (compacted in place). rate[F] out. Scratch: 5 arrays of m, 2 of F. */
static void max_min_rates(int F, ptrdiff_t P, int *pf, int *pl, int m, const double *capacity,
                          double *rate, double *scratch_m, double *scratch_f, char *flags_m,
                          char *flags_f) {
    double *cap = scratch_m, *count = scratch_m + m, *share = scratch_m + 2 * m;
    double *link_min = scratch_m + 3 * m, *gone = scratch_m + 4 * m;
    double *flow_min = scratch_f;
    char *local = flags_m, *frozen = flags_f;
    for (int f = 0; f < F; f++) rate[f] = 0.0;
    if (F == 0) return;
    for (int l = 0; l < m; l++) {
        cap[l] = capacity[l];
        count[l] = 0.0;
    }
    for (ptrdiff_t k = 0; k < P; k++) count[pl[k]] += 1.0;
    for (int round = 0; round < F && P > 0; round++) {
        for (int l = 0; l < m; l++) {
            double v = count[l] > 0 ? cap[l] / count[l] : INFINITY;
            share[l] = v < 0.0 ? 0.0 : v;
            link_min[l] = INFINITY;
        }
        for (int f = 0; f < F; f++) flow_min[f] = INFINITY;
        for (ptrdiff_t k = 0; k < P; k++)
            if (share[pl[k]] < flow_min[pf[k]]) flow_min[pf[k]] = share[pl[k]];
        for (ptrdiff_t k = 0; k < P; k++)
            if (flow_min[pf[k]] < link_min[pl[k]]) link_min[pl[k]] = flow_min[pf[k]];
        for (int l = 0; l < m; l++)
            local[l] = count[l] > 0 && share[l] <= link_min[l] * (1.0 + SHARE_REL_TOL);
        memset(frozen, 0, (size_t)F);
        for (ptrdiff_t k = 0; k < P; k++)
            if (local[pl[k]]) frozen[pf[k]] = 1;
        for (int f = 0; f < F; f++)
            if (frozen[f]) rate[f] = flow_min[f];
        for (int l = 0; l < m; l++) gone[l] = 0.0;
        for (ptrdiff_t k = 0; k < P; k++)
            if (frozen[pf[k]]) gone[pl[k]] += rate[pf[k]];
        for (int l = 0; l < m; l++) cap[l] -= gone[l];
        for (ptrdiff_t k = 0; k < P; k++)
            if (frozen[pf[k]]) count[pl[k]] -= 1.0;
        ptrdiff_t kept = 0;
        for (ptrdiff_t k = 0; k < P; k++) {
            if (!frozen[pf[k]]) {
                pf[kept] = pf[k];
                pl[kept] = pl[k];
                kept++;
            }
        }
        P = kept;
    }
}

/* Levels and bottlenecks from solved rates; then the changed list. */
static void adopt_solution(net_t *s, int F, ptrdiff_t P, const int *flows, const int *pf,
                           const int *pl, const double *solved, const int *arrivals,
                           ptrdiff_t num_arrivals, double *load, char *full, int *first) {
    int m = s->m;
    for (int l = 0; l < m; l++) {
        load[l] = 0.0;
        s->level[l] = -INFINITY;
    }
    for (ptrdiff_t k = 0; k < P; k++) {
        double r = solved[pf[k]];
        load[pl[k]] += r;
        if (r > s->level[pl[k]]) s->level[pl[k]] = r;
    }
    for (int l = 0; l < m; l++) {
        full[l] = load[l] >= s->capacity[l] * (1.0 - SHARE_REL_TOL);
        if (!full[l]) s->level[l] = INFINITY;
    }
    for (int f = 0; f < F; f++) first[f] = -1;
    for (ptrdiff_t k = 0; k < P; k++) {
        int lk = pl[k];
        if (first[pf[k]] < 0 && full[lk] && solved[pf[k]] >= s->level[lk] * (1.0 - SHARE_REL_TOL))
            first[pf[k]] = lk;
    }
    for (ptrdiff_t i = 0; i < num_arrivals; i++)
        changed_push(&s->changed, arrivals[i], 0.0, &s->nomem);
    for (int j = 0; j < F; j++) {
        int f = flows[j];
        double r = solved[j];
        s->fs[f].bottleneck = first[j];
        double old = s->fs[f].rate;
        if (old == 0.0) {
            s->fs[f].rate = r;
        } else if (fabs(r - old) > REL_TOL * r) {
            s->fs[f].rate = r;
            changed_push(&s->changed, f, old, &s->nomem);
        }
    }
}

int whole_solve(net_t *s, const int *arrivals, ptrdiff_t num_arrivals) {
    int F = s->d_count, m = s->m;
    ptrdiff_t P = 0;
    for (int f = s->d_head; f >= 0; f = s->d_next[f]) P += s->route_ptr[f + 1] - s->route_ptr[f];
    size_t Fs = (size_t)(F > 0 ? F : 1), Ps = (size_t)(P > 0 ? P : 1), Ms = (size_t)m + 1;
    int *flows = malloc(Fs * sizeof(int)), *first = malloc(Fs * sizeof(int));
    int *pf = malloc(2 * Ps * sizeof(int)), *pl = malloc(2 * Ps * sizeof(int));
    double *solved = malloc(Fs * sizeof(double)), *scratch_f = malloc(Fs * sizeof(double));
    double *scratch_m = malloc(6 * Ms * sizeof(double));
    char *flags = malloc(2 * Ms + Fs);
    int rc = -1;
    if (flows && first && pf && pl && solved && scratch_f && scratch_m && flags) {
        ptrdiff_t k = 0;
        int j = 0;
        for (int f = s->d_head; f >= 0; f = s->d_next[f], j++) {
            flows[j] = f;
            for (int p = s->route_ptr[f]; p < s->route_ptr[f + 1]; p++, k++) {
                pf[k] = pf[Ps + k] = j;
                pl[k] = pl[Ps + k] = s->route_chan[p];
            }
        }
        /* max_min_rates consumes the second copy; the first keeps every pair. */
        max_min_rates(F, P, pf + Ps, pl + Ps, m, s->capacity, solved, scratch_m, scratch_f,
                      flags, flags + 2 * Ms);
        adopt_solution(s, F, P, flows, pf, pl, solved, arrivals, num_arrivals,
                       scratch_m + 5 * Ms, flags + Ms, first);
        rc = 0;
    }
    free(flows);
    free(first);
    free(pf);
    free(pl);
    free(solved);
    free(scratch_f);
    free(scratch_m);
    free(flags);
    return rc;
}
