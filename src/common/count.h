/* count.h: counts as people read them, with thousands separators:
 * 1434660 -> "1,434,660". */
#ifndef SONDE_COMMON_COUNT_H
#define SONDE_COMMON_COUNT_H

#include <stddef.h>
#include <stdint.h>

/* Writes v grouped by thousands into buf (27 bytes hold any value; a
 * shorter buf gets what fits, terminated). Returns buf. */
char *fmt_count(char *buf, size_t len, uint64_t v);

#endif
