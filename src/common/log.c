/* log.c: stderr logging with a level taken from SONDE_LOG. Every message is
 * one line prefixed "sonde: ", so that a user sees which tool is talking. */
#include "common/log.h"
#include "common/clock.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum log_level min_level = LOG_INFO;

void log_init(void)
{
	const char *env = getenv("SONDE_LOG");

	if (!env)
		return;
	if (!strcmp(env, "debug"))
		min_level = LOG_DEBUG;
	else if (!strcmp(env, "info"))
		min_level = LOG_INFO;
	else if (!strcmp(env, "warn"))
		min_level = LOG_WARN;
	else if (!strcmp(env, "error"))
		min_level = LOG_ERROR;
}

void log_set_level(enum log_level level)
{
	min_level = level;
}

bool log_enabled(enum log_level level)
{
	return level >= min_level;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *const names[] = {"debug: ", "", "warning: ", "error: "};
	va_list ap;

	if (level < min_level)
		return;
	fprintf(stderr, "sonde: %s", names[level]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

bool log_limit__take(struct log_limit *l, unsigned period_ms, unsigned long long *skipped)
{
	unsigned long long now = mono_ms(), next = __atomic_load_n(&l->next_ms, __ATOMIC_RELAXED);

	if (now < next || !__atomic_compare_exchange_n(&l->next_ms, &next, now + period_ms, false,
						       __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
		__atomic_fetch_add(&l->skipped, 1, __ATOMIC_RELAXED);
		return false;
	}
	*skipped = __atomic_exchange_n(&l->skipped, 0, __ATOMIC_RELAXED);
	return true;
}

int errmsg(char *buf, size_t len, int err, const char *fmt, ...)
{
	va_list ap;

	if (len) {
		va_start(ap, fmt);
		vsnprintf(buf, len, fmt, ap);
		va_end(ap);
	}
	return err;
}
