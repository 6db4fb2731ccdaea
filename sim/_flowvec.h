/* The compiled event core's containers: the bottom layer, calling nothing of the core.
 *
 * Offers:
 * - ivec: a growable array of ints (ivec_push, ivec_free);
 * - changed_set: the flows whose rate an update changed, with their old rates
 *   (changed_push, changed_free), which the event loop reads after each update;
 * - fheap_t: the event loop's draining flows by predicted finish, an indexed
 *   binary heap updated in place (fheap_set, fheap_pop).
 * The pushes and the heap are inline: every solver pushes in its inner loops
 * and the event loop (_flowcore.c) is the hottest code of the core. Only a
 * push that needs room calls out (ivec_grow, changed_grow).
 *
 * A failed allocation sets the caller's *nomem flag and drops the push: the
 * caller checks the flag once, after a whole update.
 */
#ifndef SIM_FLOWVEC_H
#define SIM_FLOWVEC_H

#include <stddef.h>
#include <stdint.h>

/* A growable array of ints; a failed allocation sets *nomem and drops the push. */
typedef struct {
    int *v;
    ptrdiff_t n, cap;
} ivec;

int ivec_grow(ivec *a, int *nomem); /* doubles the room: 0, or -1 (*nomem set) */
void ivec_free(ivec *a);

static inline int ivec_push(ivec *a, int x, int *nomem) {
    if (a->n == a->cap && ivec_grow(a, nomem) < 0) return -1;
    a->v[a->n++] = x;
    return 0;
}

/* Flows whose rate changed in one update (flows.v[i]), and each one's old rate
 * (old[i]; 0.0 for an arrival). */
typedef struct {
    ivec flows;
    double *old;
    ptrdiff_t old_cap;
} changed_set;

int changed_grow(changed_set *c, int *nomem); /* doubles old[]'s room: 0, or -1 */
void changed_free(changed_set *c);

static inline void changed_push(changed_set *c, int f, double old, int *nomem) {
    if (c->flows.n == c->old_cap && changed_grow(c, nomem) < 0) return;
    c->old[c->flows.n] = old;
    ivec_push(&c->flows, f, nomem);
}

/* The event loop's draining flows by (predicted[f], dseq[f]); pos[f]: f's
 * place, -1 when not in it. */
typedef struct {
    int *v, *pos, n;
    const double *predicted;
    const int64_t *dseq;
} fheap_t;

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

/* Insert f, or move it to its place after its predicted finish changed. */
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

#endif
