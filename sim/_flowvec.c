/* The containers of the compiled event core (_flowvec.h): their slow paths, growing. */
#include "_flowvec.h"

#include <stdlib.h>

int ivec_grow(ivec *a, int *nomem) {
    ptrdiff_t cap = a->cap ? 2 * a->cap : 16;
    int *v = realloc(a->v, (size_t)cap * sizeof(int));
    if (v == NULL) {
        *nomem = 1;
        return -1;
    }
    a->v = v;
    a->cap = cap;
    return 0;
}

void ivec_free(ivec *a) {
    free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

int changed_grow(changed_set *c, int *nomem) {
    ptrdiff_t cap = c->old_cap ? 2 * c->old_cap : 64;
    double *v = realloc(c->old, (size_t)cap * sizeof(double));
    if (v == NULL) {
        *nomem = 1;
        return -1;
    }
    c->old = v;
    c->old_cap = cap;
    return 0;
}

void changed_free(changed_set *c) {
    free(c->old);
    c->old = NULL;
    c->old_cap = 0;
    ivec_free(&c->flows);
}
