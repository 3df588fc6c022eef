/* rb_drain.c: a BPF ring buffer drained by a thread of its own into a
 * queue of chunks, decoded by the owner's thread (see rb_drain.h). The
 * thread copies each record into the chunk it fills, and hands the chunk
 * over after each pass over the ring (every RB_DRAIN_POLL_MS, at once when
 * a record forces a wakeup or the owner asks for a flush) or when it is
 * full; an eventfd wakes the owner. One producer, one consumer, one lock
 * taken per chunk. */
#include "probe/rb_drain.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"

#define RB_DRAIN_POLL_MS 10
/* The drain thread's nice value (setpriority). */
#define RB_DRAIN_NICE -10
#define RB_CHUNK_BYTES (1u << 20)
#define RB_SPARES 4 /* chunks kept for reuse */

struct rb_chunk {
	struct rb_chunk *next;
	size_t used;
	char data[RB_CHUNK_BYTES];
};

/* A record in a chunk: its size, then its bytes, padded to 8. */
struct rb_item {
	uint32_t size;
	uint32_t pad;
	char data[];
};

struct rb_drain {
	struct ring_buffer *rb;
	pthread_t thread;
	bool started;
	int efd, wake;	       /* the owner's "records queued"; the thread's "flush now" */
	struct rb_chunk *fill; /* the thread's (after stop: the owner's) */
	pthread_mutex_t lock;
	pthread_cond_t room, passed;
	/* Under lock: */
	uint64_t flush_req, flush_done; /* flushes asked for; the last one a pass began after */
	bool full;			/* the thread waits for room */
	struct rb_chunk *head, *tail, *spares;
	size_t nspares, queued, max_bytes;
	uint64_t peak;
	bool stop;
};

static struct rb_chunk *chunk_get(struct rb_drain *d)
{
	struct rb_chunk *c;

	pthread_mutex_lock(&d->lock);
	/* Behind by max_bytes: leave the rest in the kernel's ring (and let
	 * a flush waiting for this pass go: it consumes what is here). */
	while (d->queued >= d->max_bytes && !d->stop) {
		d->full = true;
		pthread_cond_broadcast(&d->passed);
		pthread_cond_wait(&d->room, &d->lock);
	}
	d->full = false;
	c = d->spares;
	if (c) {
		d->spares = c->next;
		d->nspares--;
	}
	pthread_mutex_unlock(&d->lock);
	if (!c)
		c = xmalloc(sizeof(*c));
	c->next = NULL;
	c->used = 0;
	return c;
}

static void publish(struct rb_drain *d)
{
	struct rb_chunk *c = d->fill;
	uint64_t one = 1;

	if (!c || !c->used)
		return;
	d->fill = NULL;
	pthread_mutex_lock(&d->lock);
	if (d->tail)
		d->tail->next = c;
	else
		d->head = c;
	d->tail = c;
	d->queued += c->used;
	if (d->queued > d->peak)
		d->peak = d->queued;
	pthread_mutex_unlock(&d->lock);
	if (write(d->efd, &one, sizeof(one)) < 0) {
		/* The counter is saturated: the owner is woken anyway. */
	}
}

static int copy_record(void *ctx, void *data, size_t size)
{
	struct rb_drain *d = ctx;
	size_t need = (sizeof(struct rb_item) + size + 7) & ~(size_t)7;
	struct rb_item *it;

	if (need > RB_CHUNK_BYTES)
		return 0; /* no record is this big: not ours to keep */
	if (d->fill && d->fill->used + need > RB_CHUNK_BYTES)
		publish(d);
	if (!d->fill)
		d->fill = chunk_get(d);
	it = (struct rb_item *)(d->fill->data + d->fill->used);
	it->size = (uint32_t)size;
	memcpy(it->data, data, size);
	d->fill->used += need;
	return 0;
}

static bool stopping(struct rb_drain *d)
{
	bool s;

	pthread_mutex_lock(&d->lock);
	s = d->stop;
	pthread_mutex_unlock(&d->lock);
	return s;
}

static void *drain_thread(void *arg)
{
	struct rb_drain *d = arg;
	struct pollfd p[2] = {{.fd = ring_buffer__epoll_fd(d->rb), .events = POLLIN},
			      {.fd = d->wake, .events = POLLIN}};

	/* Ahead of the machine's busy threads (those of the jobs it watches
	 * among them), as far as the process may: it only copies, and the
	 * kernel's ring lasts a fraction of a second at a GPU job's launch
	 * rate. Where that is not allowed, it runs as it is. */
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), RB_DRAIN_NICE))
		pr_debug("the ring buffer's drain thread keeps its priority: %s", strerror(errno));

	while (!stopping(d)) {
		uint64_t n, asked;

		/* The ring's epoll is ready only for a record that forces a
		 * wakeup (the BPF side submits without one), the wake fd for a
		 * flush: consume either way, every RB_DRAIN_POLL_MS. */
		poll(p, 2, RB_DRAIN_POLL_MS);
		if (read(d->wake, &n, sizeof(n)) < 0) {
			/* Nothing asked. */
		}
		pthread_mutex_lock(&d->lock);
		asked = d->flush_req;
		pthread_mutex_unlock(&d->lock);
		ring_buffer__consume(d->rb);
		publish(d);
		pthread_mutex_lock(&d->lock);
		d->flush_done = asked;
		pthread_cond_broadcast(&d->passed);
		pthread_mutex_unlock(&d->lock);
	}
	return NULL;
}

struct rb_drain *rb_drain__new(const int *map_fds, size_t n, size_t max_bytes)
{
	struct rb_drain *d = xcalloc(1, sizeof(*d));
	sigset_t all, old;
	int err;

	d->max_bytes = max_bytes ? max_bytes : 128u << 20;
	d->efd = d->wake = -1;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->room, NULL);
	pthread_cond_init(&d->passed, NULL);
	d->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->efd < 0) {
		err = errno;
		goto fail;
	}
	d->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->wake < 0) {
		err = errno;
		goto fail;
	}
	d->rb = n ? ring_buffer__new(map_fds[0], copy_record, d, NULL) : NULL;
	if (!d->rb) {
		err = n ? errno : EINVAL;
		goto fail;
	}
	for (size_t i = 1; i < n; i++) {
		if (ring_buffer__add(d->rb, map_fds[i], copy_record, d)) {
			err = errno;
			goto fail;
		}
	}
	/* Signals are the owner's to take (Ctrl-C ends its poll). */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&d->thread, NULL, drain_thread, d);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		goto fail;
	d->started = true;
	return d;
fail:
	rb_drain__free(d);
	errno = err;
	return NULL;
}

int rb_drain__wait(struct rb_drain *d, int timeout_ms)
{
	struct pollfd p = {.fd = d->efd, .events = POLLIN};
	uint64_t n;

	if (poll(&p, 1, timeout_ms) <= 0)
		return 0;
	return read(d->efd, &n, sizeof(n)) == sizeof(n);
}

int rb_drain__consume(struct rb_drain *d, rb_drain_fn fn, void *ctx)
{
	struct rb_chunk *list, *c, *next;
	size_t bytes = 0;
	int n = 0;

	pthread_mutex_lock(&d->lock);
	list = d->head;
	d->head = d->tail = NULL;
	pthread_mutex_unlock(&d->lock);
	for (c = list; c; c = c->next) {
		for (size_t off = 0; off < c->used;) {
			struct rb_item *it = (struct rb_item *)(c->data + off);

			fn(ctx, it->data, it->size);
			n++;
			off += (sizeof(*it) + it->size + 7) & ~(size_t)7;
		}
		bytes += c->used;
	}
	pthread_mutex_lock(&d->lock);
	d->queued -= bytes;
	for (c = list; c; c = next) {
		next = c->next;
		if (d->nspares < RB_SPARES) {
			c->next = d->spares;
			d->spares = c;
			d->nspares++;
		} else {
			free(c);
		}
	}
	pthread_cond_broadcast(&d->room);
	pthread_mutex_unlock(&d->lock);
	return n;
}

void rb_drain__flush(struct rb_drain *d)
{
	uint64_t req, one = 1;

	if (!d->started)
		return;
	pthread_mutex_lock(&d->lock);
	req = ++d->flush_req;
	pthread_mutex_unlock(&d->lock);
	if (write(d->wake, &one, sizeof(one)) < 0) {
		/* Saturated: the thread is woken anyway. */
	}
	/* A pass that began after the request drained all submitted before
	 * it, unless the queue is full (what is queued is consumed next). */
	pthread_mutex_lock(&d->lock);
	while (d->flush_done < req && !d->full && !d->stop)
		pthread_cond_wait(&d->passed, &d->lock);
	pthread_mutex_unlock(&d->lock);
}

void rb_drain__stop(struct rb_drain *d)
{
	if (!d || !d->started)
		return;
	pthread_mutex_lock(&d->lock);
	d->stop = true;
	pthread_cond_broadcast(&d->room);
	pthread_cond_broadcast(&d->passed);
	pthread_mutex_unlock(&d->lock);
	pthread_join(d->thread, NULL);
	d->started = false;
	/* The thread is gone: what the ring still holds, queued from here. */
	ring_buffer__consume(d->rb);
	publish(d);
}

uint64_t rb_drain__peak(struct rb_drain *d)
{
	uint64_t p;

	pthread_mutex_lock(&d->lock);
	p = d->peak;
	pthread_mutex_unlock(&d->lock);
	return p;
}

static void free_list(struct rb_chunk *c)
{
	while (c) {
		struct rb_chunk *next = c->next;

		free(c);
		c = next;
	}
}

void rb_drain__free(struct rb_drain *d)
{
	if (!d)
		return;
	rb_drain__stop(d);
	ring_buffer__free(d->rb);
	free_list(d->head);
	free_list(d->spares);
	free(d->fill);
	if (d->efd >= 0)
		close(d->efd);
	if (d->wake >= 0)
		close(d->wake);
	pthread_mutex_destroy(&d->lock);
	pthread_cond_destroy(&d->room);
	pthread_cond_destroy(&d->passed);
	free(d);
}
