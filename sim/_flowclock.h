/* The clocks of the bottleneck classes: one layer above the containers, below
 * the classes that keep them (_flowclass.c) and the event loop that reads them.
 *
 * A class drains all its members at one rate, so it keeps one clock: the
 * bytes served to each member, as of `since`, at `crate` since then; a member
 * finishes when its class's clock reaches its `goal`. A class id is an index
 * 0..n-1; which flows form a class is the classes' business, not the clocks'.
 *
 * Offers:
 * - clocks_t and clocks_alloc / clocks_free;
 * - for the classes: clock_fresh (a class id starts at 0 bytes, stopped),
 *   clock_join / clock_drop (a member's goal enters or leaves its class's
 *   heap), clock_advance (bring served up to now), clock_touch (mark for
 *   rescheduling), clock_schedule (a class's next finish into the heap of
 *   classes), clock_release (a class id leaves it);
 * - for the sharing and the event loop: clocks_begin (a new instant),
 *   clocks_next_due, clocks_pop_due (the members whose goal is reached).
 */
#ifndef SIM_FLOWCLOCK_H
#define SIM_FLOWCLOCK_H

#include <stdint.h>

#include "_flowvec.h"

typedef struct {
    int n;                                /* class ids and flows: 0..n-1 */
    double now;
    double *served, *since, *crate, *nxt; /* per class: served as of since, rate, next finish */
    double *goal;                         /* per flow: served bytes at which it is done */
    const int64_t *dseq;                  /* the event loop's drain order */
    ivec *mh;                             /* per class: its members by goal */
    int *mpos;                            /* per flow: its place there, -1: none */
    int *cheap, *cpos, cheap_n;           /* the classes by next finish */
    int64_t stamp, *touched_at;
    ivec touched; /* the classes touched since clocks_begin, to reschedule */
    int *nomem;   /* the owner's flag: set when an allocation fails */
} clocks_t;

/* n clocks and n flows' goals; 0, or -1 when out of memory (clocks_free then). */
int clocks_alloc(clocks_t *k, int n, const int64_t *dseq, int *nomem);
void clocks_free(clocks_t *k);
void clock_fresh(clocks_t *k, int c);
void clock_join(clocks_t *k, int f, int c);
void clock_drop(clocks_t *k, int f, int c);
void clock_advance(clocks_t *k, int c);
void clock_touch(clocks_t *k, int c);
void clock_schedule(clocks_t *k, int c);
void clock_release(clocks_t *k, int c);
void clocks_begin(clocks_t *k, double now);
double clocks_next_due(const clocks_t *k);
/* Pop (into out) each member whose class's clock reaches its goal by `limit`. */
void clocks_pop_due(clocks_t *k, double limit, ivec *out, int *nomem);

#endif
