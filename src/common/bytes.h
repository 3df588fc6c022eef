/* bytes.h: sizes as users write them on the command line: "64M", "40GiB",
 * "1.5G", "1073741824" (K, M, G, T are powers of 1024; a B or iB after
 * them is allowed). */
#ifndef SONDE_COMMON_BYTES_H
#define SONDE_COMMON_BYTES_H

#include <stdint.h>

/* The size at the start of s; *end_out is set past it. 0 on a bad size
 * (none, zero, negative, over 10^18). */
uint64_t parse_bytes(const char *s, const char **end_out);

#endif
