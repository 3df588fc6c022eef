/* log.h: one-line diagnostics on stderr for every subcommand. A message names
 * the operation, the cause and, where there is one, a hint:
 *   "can't attach perf event on cpu 3: No such device -- is the CPU offline?" */
#ifndef SONDE_COMMON_LOG_H
#define SONDE_COMMON_LOG_H

#include <stddef.h>

#include <stdbool.h>

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

/* Messages below this level are dropped; SONDE_LOG=debug|info|warn|error sets it. */
void log_init(void);
void log_set_level(enum log_level level);
bool log_enabled(enum log_level level);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define pr_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define pr_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define pr_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define pr_err(...) log_msg(LOG_ERROR, __VA_ARGS__)

/* A message that may repeat at the rate of requests (a full disk under a
 * stream of ingests): logged at most once per period, with the count of
 * those left out since. Zeroed is ready; thread-safe. */
struct log_limit {
	unsigned long long next_ms; /* atomically */
	unsigned long long skipped; /* atomically */
};

/* Whether to log now (at most once every period_ms); when true, *skipped
 * is how many were left out since the last one logged. */
bool log_limit__take(struct log_limit *l, unsigned period_ms, unsigned long long *skipped);

/* A reason for the caller to print or log, formatted into buf (len bytes;
 * nothing when len is 0), for parsers that say why they refused their
 * input. Returns err, so that `return errmsg(...)` reads as an error
 * return. */
int errmsg(char *buf, size_t len, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
