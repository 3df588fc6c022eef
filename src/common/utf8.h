/* utf8.h: strict UTF-8 -- the check that label values, types and keys
 * from requests must pass, the repair that makes any bytes (function names
 * from a sender's binaries) safe to put in JSON, and the clean-up of the
 * names the kernel gives processes and threads before they become labels.
 * Used by the server (src/server/), common/json.c and the agent. */
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
/* Makes the string s -- up to its NUL, at most n bytes; s has room for
 * n + 1 -- valid UTF-8 in place, NUL-terminated, for names the kernel cut
 * at a fixed length (a comm): a sequence cut at the end is dropped, any
 * other byte that starts no valid sequence becomes '?'. Returns the new
 * length. */
size_t utf8_clean(char *s, size_t n);
/* The length of s[0..n) cut to at most max bytes without splitting a
 * UTF-8 sequence (max itself when s[max] starts one or is ASCII; at most 3
 * bytes less otherwise). */
size_t utf8_cut(const char *s, size_t n, size_t max);

#endif
