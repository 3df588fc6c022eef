/* sqlite_expire.c: expiry of the embedded store (store__expire, which the
 * server calls every minute with now minus --retention). One call does
 * bounded work in one transaction: it deletes old window rows, old points
 * and the put keys that came with them, and once every window ending by
 * the horizon is gone, collects the series, stacks (leaf first) and
 * functions nothing can use any more, killing their dictionary entries.
 * Killed ids are freed only when no read can still see their rows
 * (gc_lock); a failed call is rolled back and its kills revived. The unit
 * test includes this file to shrink the bounds. */
#include "store/sqlite_internal.h"
#include "common/clock.h"
#include "common/xalloc.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* Work per expire call: enough for a busy node's minute many times over,
 * small enough to take well under a second. (The unit test shrinks them.) */
#ifndef EXPIRE_MAX_ROWS
#define EXPIRE_MAX_ROWS 2000
#endif
#ifndef EXPIRE_MAX_POINTS
#define EXPIRE_MAX_POINTS 100000
#endif
#ifndef EXPIRE_MAX_SPANS
#define EXPIRE_MAX_SPANS 200000
#endif
#ifndef EXPIRE_MAX_NODES
#define EXPIRE_MAX_NODES 50000
#endif
#define VACUUM_MIN_FREE 2048 /* free pages before giving any back */
#define VACUUM_PAGES 1024    /* at most per call */

/* ---- expire ---- */

/* Whether something last used before hour h is older than horizon. */
static bool dead_by(uint32_t last_h, int64_t horizon_ms)
{
	return (int64_t)last_h * DICT_HOUR_MS <= horizon_ms;
}

/* A dictionary entry killed by this call, revived if it fails. */
struct kill {
	uint32_t id;
	uint8_t kind; /* enum dict_kind */
};

/* What one call did and has to do. */
struct expire {
	struct kill *kills;
	size_t nkills, cap_kills;
	uint32_t *work; /* nodes to collect, leaves first */
	size_t nwork, cap_work;
	uint64_t windows, samples, points, spans;
	bool gc_complete;
};

/* Deletes a row and kills its dictionary entry (dict_lock held). */
static int expire_kill(struct sqlite_store *s, struct expire *x, enum dict_kind kind, uint32_t id)
{
	static const int stmt[] = {
		[DICT_NODE] = W_DEL_NODE,
		[DICT_FUNC] = W_DEL_FUNC,
		[DICT_SERIES] = W_DEL_SERIES,
		[DICT_PSERIES] = W_DEL_PSERIES,
	};
	int err = array_grow((void **)&x->kills, &x->cap_kills, x->nkills + 1, sizeof(*x->kills));

	if (err)
		return err;
	sqlite3_bind_int64(s->st[stmt[kind]], 1, id);
	err = step_done(s->db, s->st[stmt[kind]], "expire old data");
	if (err)
		return err;
	dict__kill(&s->dict, kind, id);
	x->kills[x->nkills].id = id;
	x->kills[x->nkills].kind = (uint8_t)kind;
	x->nkills++;
	return 0;
}

static int expire_windows(struct sqlite_store *s, int64_t before, struct expire *x, bool *done)
{
	sqlite3_stmt *st = s->st[W_OLD_WINDOWS];
	int64_t *ids = malloc(EXPIRE_MAX_ROWS * sizeof(*ids));
	size_t n = 0, i;
	int rc, err = 0;

	if (!ids)
		return -ENOMEM;
	sqlite3_bind_int64(st, 1, before);
	sqlite3_bind_int(st, 2, EXPIRE_MAX_ROWS);
	while (n < EXPIRE_MAX_ROWS && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		ids[n++] = sqlite3_column_int64(st, 0);
		x->windows += (uint64_t)sqlite3_column_int64(st, 1);
		x->samples += (uint64_t)sqlite3_column_int64(st, 2);
	}
	if (n < EXPIRE_MAX_ROWS && rc != SQLITE_DONE)
		err = sql_fail(s->db, rc, "find old windows");
	sqlite3_reset(st);
	for (i = 0; !err && i < n; i++) {
		sqlite3_bind_int64(s->st[W_DEL_WINDOW], 1, ids[i]);
		err = step_done(s->db, s->st[W_DEL_WINDOW], "expire old windows");
	}
	*done = n < EXPIRE_MAX_ROWS;
	free(ids);
	return err;
}

static int expire_points(struct sqlite_store *s, int64_t before, struct expire *x)
{
	int64_t budget = EXPIRE_MAX_POINTS;
	size_t i;
	int err = 0, rc;

	for (i = 1; !err && budget > 0 && i < s->dict.cap_pseries; i++) {
		sqlite3_stmt *st = s->st[W_DEL_POINTS];
		int changes;

		if (s->dict.pseries[i].state != DICT_LIVE)
			continue;
		sqlite3_bind_int64(st, 1, (int64_t)i);
		sqlite3_bind_int64(st, 2, before);
		sqlite3_bind_int64(st, 3, budget);
		err = step_done(s->db, st, "expire old points");
		changes = sqlite3_changes(s->db);
		if (err || !changes)
			continue;
		budget -= changes;
		x->points += (uint64_t)changes;
		st = s->st[W_HAS_POINTS];
		sqlite3_bind_int64(st, 1, (int64_t)i);
		rc = sqlite3_step(st);
		sqlite3_reset(st);
		if (rc == SQLITE_DONE) {
			pthread_rwlock_wrlock(&s->dict_lock);
			err = expire_kill(s, x, DICT_PSERIES, (uint32_t)i);
			pthread_rwlock_unlock(&s->dict_lock);
		} else if (rc != SQLITE_ROW) {
			err = sql_fail(s->db, rc, "expire old points");
		}
	}
	return err;
}

/* Deletes spans that ended by before (ms), at most EXPIRE_MAX_SPANS of
 * them. Their series stay (a few, reused by the next spans of a process). */
static int expire_spans(struct sqlite_store *s, int64_t before, struct expire *x)
{
	sqlite3_stmt *st = s->st[W_DEL_SPANS];
	int64_t before_ns;
	int err;

	if (__builtin_mul_overflow(before, (int64_t)NS_PER_MS, &before_ns))
		before_ns = before > 0 ? INT64_MAX : 0;
	sqlite3_bind_int64(st, 1, before_ns);
	sqlite3_bind_int64(st, 2, EXPIRE_MAX_SPANS);
	err = step_done(s->db, st, "expire old spans");
	if (!err)
		x->spans += (uint64_t)sqlite3_changes(s->db);
	return err;
}

static bool node_dead(const struct dict *d, uint32_t id, int64_t horizon)
{
	const struct node_ent *n = &d->nodes[id];

	return n->state == DICT_LIVE && !n->nchild && dead_by(n->last_h, horizon);
}

/* Deletes series, stacks and functions that no window ending after horizon
 * can use: all windows ending by horizon are gone. Stacks go leaf first, so
 * the table never holds a node whose parent is gone. dict_lock is held. */
static int collect(struct sqlite_store *s, int64_t horizon, struct expire *x)
{
	struct dict *d = &s->dict;
	size_t budget = EXPIRE_MAX_NODES, i;
	int err = 0;

	x->gc_complete = true;
	for (i = 1; !err && i < d->cap_series; i++)
		if (d->series[i].state == DICT_LIVE && dead_by(d->series[i].last_h, horizon))
			err = expire_kill(s, x, DICT_SERIES, (uint32_t)i);
	for (i = 1; !err && i < d->cap_nodes && x->nwork < budget; i++) {
		if (!node_dead(d, (uint32_t)i, horizon))
			continue;
		err = array_grow((void **)&x->work, &x->cap_work, x->nwork + 1, sizeof(*x->work));
		if (!err)
			x->work[x->nwork++] = (uint32_t)i;
	}
	while (!err && x->nwork) {
		uint32_t id = x->work[--x->nwork], parent = d->nodes[id].parent;
		uint32_t func = d->nodes[id].func;

		if (!budget) {
			x->gc_complete = false;
			break;
		}
		budget--;
		err = expire_kill(s, x, DICT_NODE, id);
		if (!err && !d->funcs[func].refs && d->funcs[func].state == DICT_LIVE)
			err = expire_kill(s, x, DICT_FUNC, func);
		if (!err && parent && node_dead(d, parent, horizon)) {
			err = array_grow((void **)&x->work, &x->cap_work, x->nwork + 1,
					 sizeof(*x->work));
			if (!err)
				x->work[x->nwork++] = parent;
		}
	}
	if (i < d->cap_nodes)
		x->gc_complete = false;
	return err;
}

static void revive(struct sqlite_store *s, struct expire *x)
{
	size_t i;

	pthread_rwlock_wrlock(&s->dict_lock);
	for (i = x->nkills; i-- > 0;)
		dict__revive(&s->dict, x->kills[i].kind, x->kills[i].id);
	pthread_rwlock_unlock(&s->dict_lock);
}

/* Gives free pages back to the file system, a bounded number per call. */
static void vacuum(struct sqlite_store *s)
{
	int64_t nfree = 0;
	char sql[64];

	if (sql_query_int(s->db, "PRAGMA freelist_count", &nfree) != SQLITE_OK ||
	    nfree < VACUUM_MIN_FREE)
		return;
	snprintf(sql, sizeof(sql), "PRAGMA incremental_vacuum(%d)", VACUUM_PAGES);
	sql_exec(s->db, sql, "give free space back");
}

int sqlite_store__expire(struct store *base, int64_t before_ms)
{
	struct sqlite_store *s = sqlite_store(base);
	uint32_t hour = before_ms > 0 ? (uint32_t)(before_ms / DICT_HOUR_MS) : 0;
	struct expire x = {0};
	bool windows_done = false;
	int err;

	pthread_mutex_lock(&s->write_lock);
	/* Ids killed by earlier calls can be reused once no read that began
	 * before those deletes committed is still running. */
	if (!pthread_rwlock_trywrlock(&s->gc_lock)) {
		pthread_rwlock_wrlock(&s->dict_lock);
		dict__flush(&s->dict);
		pthread_rwlock_unlock(&s->dict_lock);
		pthread_rwlock_unlock(&s->gc_lock);
	}
	err = step_done(s->db, s->st[W_BEGIN], "begin a transaction");
	if (err)
		goto unlock;
	/* The mark first: reads see nothing older from now on, whatever is
	 * left for later calls or written late (as the ClickHouse store). */
	if (before_ms > atomic_load(&s->expired_before)) {
		sqlite3_bind_text(s->st[W_SET_META], 1, "expired_before", -1, SQLITE_STATIC);
		sqlite3_bind_int64(s->st[W_SET_META], 2, before_ms);
		err = step_done(s->db, s->st[W_SET_META], "write the expiry mark");
	}
	if (!err)
		err = expire_windows(s, before_ms, &x, &windows_done);
	if (!err)
		err = expire_points(s, before_ms, &x);
	if (!err)
		err = expire_spans(s, before_ms, &x);
	if (!err) {
		sqlite3_bind_int64(s->st[W_DEL_KEYS], 1, before_ms);
		err = step_done(s->db, s->st[W_DEL_KEYS], "expire the put keys");
	}
	/* Only once every window ending by before_ms is gone can what they
	 * used be judged unused. */
	if (!err && windows_done && (hour != s->gc_hour || !s->gc_hour)) {
		pthread_rwlock_wrlock(&s->dict_lock);
		err = collect(s, before_ms, &x);
		pthread_rwlock_unlock(&s->dict_lock);
	}
	err = sqlite_store__commit(s, err, "commit expiry");
	if (err) {
		revive(s, &x);
		goto unlock;
	}
	if (before_ms > atomic_load(&s->expired_before))
		atomic_store(&s->expired_before, before_ms);
	atomic_fetch_sub(&s->nwindows, x.windows);
	atomic_fetch_sub(&s->nsamples, x.samples);
	atomic_fetch_sub(&s->npoints, x.points);
	{
		uint64_t have = atomic_load(&s->nspans);

		atomic_store(&s->nspans, have > x.spans ? have - x.spans : 0);
	}
	if (windows_done && x.gc_complete)
		s->gc_hour = hour;
	vacuum(s);
unlock:
	pthread_mutex_unlock(&s->write_lock);
	free(x.kills);
	free(x.work);
	return err;
}
