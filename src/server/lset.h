/* lset.h: a label set as a request builds it -- the server's ingest turns
 * query arguments, Pyroscope names and sample labels into one, at most one
 * value per name, owning its strings, then checks it against the store's
 * limits (store.h) with a message that names the label at fault. Used by
 * parse.c, ingest.c and api_ingest.c, and fuzzed through them. */
#ifndef SONDE_SERVER_LSET_H
#define SONDE_SERVER_LSET_H

#include <stddef.h>

#include "store/store.h"

/* Zeroed is empty. v[0..n) can be handed to the store as they are. */
struct lset {
	struct store_label *v;
	size_t n, cap;
};

/* Sets name to value (replacing an earlier value); 0 or -ENOMEM. */
int lset__set(struct lset *ls, const char *name, const char *value);
int lset__setn(struct lset *ls, const char *name, const char *value, size_t vlen);
/* The value of name (borrowed until it is set again), or NULL. */
const char *lset__get(const struct lset *ls, const char *name);
/* Sets every label of src in dst; 0 or -ENOMEM. */
int lset__copy(struct lset *dst, const struct lset *src);
/* Sorts by name (for a canonical key). */
void lset__sort(struct lset *ls);
/* Checks the store's limits (count, names, value sizes, UTF-8): 0, or
 * -EINVAL with a message naming the label in err. */
int lset__check(const struct lset *ls, char *err, size_t errlen);
/* Frees the strings; ls is then empty. */
void lset__free(struct lset *ls);

#endif
