/* builder.c: unwind tables built on threads of their own. See builder.h. */
#include "unwind/builder.h"

#include "common/clock.h"
#include "common/xalloc.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct unw_builder {
	pthread_t threads[UNW_BUILDER_MAX_THREADS];
	unsigned nthreads;
	pthread_mutex_t lock;
	pthread_cond_t work, idle;
	struct unw_job *queue, *queue_tail;		   /* to build, in order */
	struct unw_job *building[UNW_BUILDER_MAX_THREADS]; /* by thread, NULL: idle */
	unsigned nbuilding;
	struct unw_job *done; /* built, not taken */
	size_t njobs;	      /* queued + building + done */
	bool stop;
};

struct builder_thread {
	struct unw_builder *b;
	unsigned slot;
};

static void *builder_main(void *arg)
{
	struct builder_thread bt = *(struct builder_thread *)arg;
	struct unw_builder *b = bt.b;

	free(arg);
	pthread_mutex_lock(&b->lock);
	for (;;) {
		struct unw_job *j;
		uint64_t t0;

		while (!b->queue && !b->stop)
			pthread_cond_wait(&b->work, &b->lock);
		if (b->stop)
			break;
		j = b->queue;
		b->queue = j->next;
		if (!b->queue)
			b->queue_tail = NULL;
		b->building[bt.slot] = j;
		b->nbuilding++;
		pthread_mutex_unlock(&b->lock);

		t0 = mono_ns();
		j->err = unw_table__build_file(j->path, j->max_rows, &j->t, j->why, sizeof(j->why));
		j->build_ns = mono_ns() - t0;

		pthread_mutex_lock(&b->lock);
		b->building[bt.slot] = NULL;
		b->nbuilding--;
		j->next = b->done;
		b->done = j;
		if (!b->queue && !b->nbuilding)
			pthread_cond_broadcast(&b->idle);
	}
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

/* The threads: one per online CPU but one (the poller's), 1 to
 * UNW_BUILDER_MAX_THREADS; SONDE_UNWIND_THREADS=N sets it. */
static unsigned builder_threads(void)
{
	const char *env = getenv("SONDE_UNWIND_THREADS");
	long n = env && *env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN) - 1;

	return n < 1 ? 1 : n > UNW_BUILDER_MAX_THREADS ? UNW_BUILDER_MAX_THREADS : (unsigned)n;
}

struct unw_builder *unw_builder__new(void)
{
	struct unw_builder *b = xcalloc(1, sizeof(*b));
	unsigned want = builder_threads();
	int err = 0;

	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->work, NULL);
	pthread_cond_init(&b->idle, NULL);
	while (b->nthreads < want) {
		struct builder_thread *bt = xmalloc(sizeof(*bt));

		*bt = (struct builder_thread){b, b->nthreads};
		err = pthread_create(&b->threads[b->nthreads], NULL, builder_main, bt);
		if (err) {
			free(bt);
			break;
		}
		b->nthreads++;
	}
	if (!b->nthreads) {
		pthread_cond_destroy(&b->work);
		pthread_cond_destroy(&b->idle);
		pthread_mutex_destroy(&b->lock);
		free(b);
		errno = err;
		return NULL;
	}
	return b;
}

static void free_jobs(struct unw_job *j)
{
	while (j) {
		struct unw_job *next = j->next;

		unw_table__free(&j->t);
		close(j->fd);
		free(j);
		j = next;
	}
}

void unw_builder__free(struct unw_builder *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&b->lock);
	b->stop = true;
	pthread_cond_broadcast(&b->work);
	pthread_mutex_unlock(&b->lock);
	for (unsigned i = 0; i < b->nthreads; i++)
		pthread_join(b->threads[i], NULL);
	free_jobs(b->queue);
	free_jobs(b->done);
	pthread_cond_destroy(&b->work);
	pthread_cond_destroy(&b->idle);
	pthread_mutex_destroy(&b->lock);
	free(b);
}

static bool same_key(const struct unw_job *j, const struct unw_file_key *key)
{
	return j && j->key.dev == key->dev && j->key.ino == key->ino;
}

static bool has_locked(struct unw_builder *b, const struct unw_file_key *key)
{
	for (unsigned i = 0; i < b->nthreads; i++)
		if (same_key(b->building[i], key))
			return true;
	for (struct unw_job *j = b->queue; j; j = j->next)
		if (same_key(j, key))
			return true;
	for (struct unw_job *j = b->done; j; j = j->next)
		if (same_key(j, key))
			return true;
	return false;
}

bool unw_builder__submit(struct unw_builder *b, struct unw_job *job)
{
	bool ok;

	snprintf(job->path, sizeof(job->path), "/proc/self/fd/%d", job->fd);
	memset(&job->t, 0, sizeof(job->t));
	job->err = 0;
	job->why[0] = '\0';
	job->next = NULL;
	pthread_mutex_lock(&b->lock);
	ok = b->njobs < UNW_BUILDER_MAX_JOBS && !has_locked(b, &job->key);
	if (ok) {
		if (b->queue_tail)
			b->queue_tail->next = job;
		else
			b->queue = job;
		b->queue_tail = job;
		b->njobs++;
		pthread_cond_signal(&b->work);
	}
	pthread_mutex_unlock(&b->lock);
	return ok;
}

struct unw_job *unw_builder__take(struct unw_builder *b)
{
	struct unw_job *j;

	pthread_mutex_lock(&b->lock);
	j = b->done;
	if (j) {
		b->done = j->next;
		j->next = NULL;
		b->njobs--;
	}
	pthread_mutex_unlock(&b->lock);
	return j;
}

bool unw_builder__has(struct unw_builder *b, const struct unw_file_key *key)
{
	bool has;

	pthread_mutex_lock(&b->lock);
	has = has_locked(b, key);
	pthread_mutex_unlock(&b->lock);
	return has;
}

void unw_builder__wait(struct unw_builder *b)
{
	pthread_mutex_lock(&b->lock);
	while (b->queue || b->nbuilding)
		pthread_cond_wait(&b->idle, &b->lock);
	pthread_mutex_unlock(&b->lock);
}
