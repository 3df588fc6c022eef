/* duration.h: the one grammar of durations, for every option, rule and
 * query that takes one (--window, --retention, a rule's for:, now-1h):
 *
 *   duration := "0" | NUMBER | (NUMBER UNIT)+
 *   NUMBER   := digits [ "." digits ]
 *   UNIT     := ms | s | m | h | d | w | y     (largest first, each once)
 *               (and us | ns for duration_parse_ns)
 *
 * A bare number is seconds ("10", "0.5"); "1h30m", "250ms", "1.5h" and "7d"
 * read as expected; a year is 365 days. The value is rounded to the
 * millisecond and is at most 100 years. Callers check their own bounds. */
#ifndef SONDE_COMMON_DURATION_H
#define SONDE_COMMON_DURATION_H

#include <stddef.h>
#include <stdint.h>

#define DURATION_MAX_MS (100ull * 365 * 86400000)

/* Parses s into *ms. 0, or -EINVAL (*ms unchanged). */
int duration_parse(const char *s, uint64_t *ms);
/* The same grammar to the nanosecond, with two more units at its small
 * end -- us and ns ("1ms500us", "0.2ms", "250us") -- for the settings that
 * go below a millisecond (--offcpu-min). 0, or -EINVAL (*ns unchanged). */
int duration_parse_ns(const char *s, uint64_t *ns);
/* Writes ms the way duration_parse reads it back, largest units first:
 * 90000 -> "1m30s", 250 -> "250ms", 0 -> "0s" (days are the largest unit). */
void duration_format(char *buf, size_t len, uint64_t ms);

#endif
