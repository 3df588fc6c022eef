/* builder.c: unwind tables built on a thread of their own. See builder.h. */
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
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t work, idle;
	struct unw_job *queue, *queue_tail; /* to build, in order */
	struct unw_job *building;	    /* the one being built */
	struct unw_job *done;		    /* built, not taken */
	size_t njobs;			    /* queued + building + done */
	bool stop;
};

static void *builder_main(void *arg)
{
	struct unw_builder *b = arg;

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
		b->building = j;
		pthread_mutex_unlock(&b->lock);

		t0 = mono_ns();
		j->err = unw_table__build_file(j->path, j->max_rows, &j->t, j->why, sizeof(j->why));
		j->build_ns = mono_ns() - t0;

		pthread_mutex_lock(&b->lock);
		b->building = NULL;
		j->next = b->done;
		b->done = j;
		if (!b->queue)
			pthread_cond_broadcast(&b->idle);
	}
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

struct unw_builder *unw_builder__new(void)
{
	struct unw_builder *b = xcalloc(1, sizeof(*b));
	int err;

	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->work, NULL);
	pthread_cond_init(&b->idle, NULL);
	err = pthread_create(&b->thread, NULL, builder_main, b);
	if (err) {
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
	pthread_join(b->thread, NULL);
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
	if (same_key(b->building, key))
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
	while (b->queue || b->building)
		pthread_cond_wait(&b->idle, &b->lock);
	pthread_mutex_unlock(&b->lock);
}
