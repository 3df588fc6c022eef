/* util.h: small helpers the server's modules share -- a growable byte
 * buffer for answers, UTF-8 checks and repair (labels must be valid UTF-8;
 * function names from outside may not be, and JSON must be), jansson
 * helpers that never fail on bad bytes, and label sets. Used by
 * every file of src/server/ and their tests. */
#ifndef SONDE_SERVER_UTIL_H
#define SONDE_SERVER_UTIL_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

/* A growable buffer; NUL-terminated after every append. Appends return 0
 * or -ENOMEM (the buffer then stays as it was). */
struct sbuf {
	char *buf;
	size_t len, cap;
};

int sbuf__reserve(struct sbuf *b, size_t more);
int sbuf__add(struct sbuf *b, const void *data, size_t n);
int sbuf__puts(struct sbuf *b, const char *s);
int sbuf__printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends the compact JSON text of j (which it does not take). */
int sbuf__json(struct sbuf *b, const json_t *j);
/* Hands the bytes to the caller (free() them); b is then empty. */
char *sbuf__steal(struct sbuf *b, size_t *len);
void sbuf__free(struct sbuf *b);

/* Whether s[0..n) is valid UTF-8 (no overlong forms, no surrogates). */
bool utf8_valid(const char *s, size_t n);
/* A malloc()ed copy of s[0..n) with each invalid byte replaced by U+FFFD
 * and NUL bytes dropped; NULL on ENOMEM. */
char *utf8_repair(const char *s, size_t n);
/* A JSON string of s, repaired first if it is not valid UTF-8; NULL on
 * ENOMEM. */
json_t *json_string_lossy(const char *s);

/* Whether s is [A-Za-z_][A-Za-z0-9_]* of at most STORE_MAX_LABEL_NAME bytes. */
bool label_name_valid(const char *s);

/* A set of labels owning its strings, at most one per name. */
struct lset {
	struct store_label *v;
	size_t n, cap;
};

/* Sets name to value (replacing an earlier value); 0 or -ENOMEM. */
int lset__set(struct lset *ls, const char *name, const char *value);
int lset__setn(struct lset *ls, const char *name, const char *value, size_t vlen);
/* The value of name, or NULL. */
const char *lset__get(const struct lset *ls, const char *name);
int lset__copy(struct lset *dst, const struct lset *src);
/* Sorts by name (for a canonical key). */
void lset__sort(struct lset *ls);
/* Checks the store's limits: 0, or -EINVAL with a message naming the
 * label in err. */
int lset__check(const struct lset *ls, char *err, size_t errlen);
void lset__free(struct lset *ls);

#endif
