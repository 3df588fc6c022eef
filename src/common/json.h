/* json.h: the jansson helpers every JSON answer needs -- a string that
 * never fails on bad bytes (repaired to valid UTF-8 first), and compact
 * JSON text appended to a buffer. Used by the HTTP server's JSON errors
 * (src/net/http.c) and the server's answers (src/server/). */
#ifndef SONDE_COMMON_JSON_H
#define SONDE_COMMON_JSON_H

#include <jansson.h>

#include "common/sbuf.h"

/* A JSON string of s ("" for NULL), repaired first if it is not valid
 * UTF-8 (common/utf8.h); NULL on ENOMEM. */
json_t *json_string_lossy(const char *s);
/* Appends the compact JSON text of j (which it does not take; reals with
 * 12 significant digits); 0 or -ENOMEM with b as it was. */
int sbuf__json(struct sbuf *b, const json_t *j);

#endif
