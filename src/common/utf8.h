/* utf8.h: strict UTF-8 -- the check that label values, types and keys
 * from requests must pass, and the repair that makes any bytes (function
 * names from a sender's binaries) safe to put in JSON. Used by the server
 * (src/server/) and common/json.c. */
#ifndef SONDE_COMMON_UTF8_H
#define SONDE_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Whether s[0..n) is valid UTF-8: no overlong forms, no surrogates,
 * nothing past U+10FFFF, no truncated sequence. */
bool utf8_valid(const char *s, size_t n);
/* A malloc()ed copy of s[0..n) with each byte that starts no valid
 * sequence replaced by U+FFFD and NUL bytes dropped; NULL on ENOMEM. */
char *utf8_repair(const char *s, size_t n);

#endif
