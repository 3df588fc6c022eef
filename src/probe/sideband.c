/* sideband.c: the kernel's process records for the symbolizer, see
 * sideband.h. One PERF_COUNT_SW_DUMMY event per online CPU counts nothing
 * and samples nothing; it exists for the records the kernel writes into its
 * ring as processes exec, fork, exit and map code (attr.mmap2, .comm,
 * .task), each stamped with pid/tid and CLOCK_MONOTONIC time
 * (sample_id_all). A poll copies the records of every ring out, sorts them
 * by time (a fork on one CPU, the child's exec on another) and applies them.
 * The rings are read without wakeups: the callers poll every 10 ms. */
#include "probe/sideband.h"
#include "probe/host.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "common/search.h"
#include "symbolize/symbolize.h"

#include <errno.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_RING_PAGES 64
#define MAX_RECORD 65536 /* a record's size is a u16 */
#define MAX_PIDS 65536	 /* pids followed when filtering */

struct sb_ring {
	int fd;
	void *base; /* the control page, then the data pages */
	size_t data_size;
};

/* A record copied out of a ring, for sorting. */
struct sb_copy {
	uint64_t time_ns;
	uint64_t seq; /* order within the poll, for records of equal time */
	uint32_t off, size;
};

struct sideband {
	struct sideband_opts opts;
	struct symbolizer *sym;
	struct sb_ring *rings;
	int nrings;
	/* The poll's records, copied: bytes and an index to sort; those
	 * held for the next poll first. buf2: where the held are moved. */
	char *buf, *buf2;
	size_t len, cap, cap2;
	struct sb_copy *recs;
	size_t nrecs, cap_recs;
	/* Pids followed when filtering (sorted). */
	uint32_t *pids;
	size_t npids, cap_pids;
	struct sideband_stats st;
	sideband_fn listener;
	void *listener_ctx;
};

/* ---- the parser ---- */

struct sb_header {
	uint32_t type;
	uint16_t misc;
	uint16_t size;
};

/* What sample_id_all appends with PERF_SAMPLE_TID | PERF_SAMPLE_TIME. */
struct sb_sample_id {
	uint32_t pid, tid;
	uint64_t time;
};

_Static_assert(sizeof(struct sb_header) == sizeof(struct perf_event_header), "perf header");

static int take(const char **p, const char *end, void *out, size_t n)
{
	if ((size_t)(end - *p) < n)
		return -EINVAL;
	memcpy(out, *p, n);
	*p += n;
	return 0;
}

/* A NUL-terminated string padded to 8 bytes, ending before end. */
static int take_string(const char **p, const char *end, const char **out)
{
	const char *nul = memchr(*p, 0, (size_t)(end - *p));

	if (!nul)
		return -EINVAL;
	*out = *p;
	*p = *p + (((size_t)(nul - *p) + 1 + 7) & ~(size_t)7);
	return *p > end ? -EINVAL : 0;
}

int sideband_parse(const void *rec, size_t size, struct sideband_rec *out)
{
	const char *p = rec, *end;
	struct sb_header h;
	struct sb_sample_id id;
	uint32_t u32[4];
	uint64_t u64[4];

	memset(out, 0, sizeof(*out));
	if (size < sizeof(h) + sizeof(id))
		return -EINVAL;
	memcpy(&h, p, sizeof(h));
	if (h.size != size || (size & 7))
		return -EINVAL;
	/* Every record we ask for ends with the sample id. */
	end = p + size - sizeof(id);
	memcpy(&id, end, sizeof(id));
	out->time_ns = id.time;
	p += sizeof(h);
	switch (h.type) {
	case PERF_RECORD_MMAP2:
		out->kind = SIDEBAND_MMAP;
		if (take(&p, end, u32, 8) || take(&p, end, u64, 24))
			return -EINVAL;
		out->pid = u32[0];
		out->tid = u32[1];
		out->addr = u64[0];
		out->len = u64[1];
		out->pgoff = u64[2];
		if (h.misc & PERF_RECORD_MISC_MMAP_BUILD_ID) {
			uint8_t hdr[4];

			out->has_build_id = true;
			if (take(&p, end, hdr, 4) || take(&p, end, out->build_id, 20))
				return -EINVAL;
			if (hdr[0] > SIDEBAND_BUILD_ID_MAX)
				return -EINVAL;
			out->build_id_size = hdr[0];
		} else {
			uint64_t ino_gen;

			if (take(&p, end, u32, 8) || take(&p, end, &out->ino, 8) ||
			    take(&p, end, &ino_gen, 8))
				return -EINVAL;
			out->maj = u32[0];
			out->min = u32[1];
		}
		if (take(&p, end, u32, 8) || take_string(&p, end, &out->path))
			return -EINVAL;
		out->prot = u32[0];
		out->flags = u32[1];
		return 0;
	case PERF_RECORD_COMM:
		out->kind = SIDEBAND_COMM;
		if (take(&p, end, u32, 8) || take_string(&p, end, &out->path))
			return -EINVAL;
		out->pid = u32[0];
		out->tid = u32[1];
		out->exec = h.misc & PERF_RECORD_MISC_COMM_EXEC;
		return 0;
	case PERF_RECORD_FORK:
	case PERF_RECORD_EXIT:
		out->kind = h.type == PERF_RECORD_FORK ? SIDEBAND_FORK : SIDEBAND_EXIT;
		if (take(&p, end, u32, 16) || take(&p, end, u64, 8))
			return -EINVAL;
		out->pid = u32[0];
		out->ppid = u32[1];
		out->tid = u32[2];
		out->ptid = u32[3];
		/* The record's own time is the event's; the sample id's too. */
		return 0;
	case PERF_RECORD_LOST:
		out->kind = SIDEBAND_LOST;
		if (take(&p, end, u64, 16))
			return -EINVAL;
		out->lost = u64[1];
		return 0;
	default:
		out->kind = SIDEBAND_OTHER;
		return 0;
	}
}

/* ---- the pid filter ---- */

static size_t pid_lower(const struct sideband *sb, uint32_t pid)
{
	return PARTITION_POINT(sb->npids, i, sb->pids[i] < pid);
}

static bool pid_followed(const struct sideband *sb, uint32_t pid)
{
	size_t i = pid_lower(sb, pid);

	return !sb->opts.filter_pids || (i < sb->npids && sb->pids[i] == pid);
}

void sideband__add_pid(struct sideband *sb, uint32_t pid)
{
	size_t i = pid_lower(sb, pid);

	if ((i < sb->npids && sb->pids[i] == pid) || sb->npids >= MAX_PIDS)
		return;
	xgrow((void **)&sb->pids, &sb->cap_pids, sb->npids + 1, sizeof(*sb->pids));
	memmove(&sb->pids[i + 1], &sb->pids[i], (sb->npids - i) * sizeof(*sb->pids));
	sb->pids[i] = pid;
	sb->npids++;
}

/* ---- applying records ---- */

static void apply(struct sideband *sb, const struct sideband_rec *r)
{
	switch (r->kind) {
	case SIDEBAND_MMAP: {
		struct sym_mmap m = {
			.pid = r->pid,
			.ts_ns = r->time_ns,
			.start = r->addr,
			.len = r->len,
			.pgoff = r->pgoff,
			.path = r->path,
			.build_id = r->build_id_size ? r->build_id : NULL,
			.build_id_len = r->build_id_size,
		};

		if (!r->has_build_id) {
			m.dev = makedev(r->maj, r->min);
			m.ino = r->ino;
		}
		symbolizer__mmap(sb->sym, &m);
		sb->st.mmaps++;
		break;
	}
	case SIDEBAND_COMM:
		/* A thread renaming itself is not the process's name. */
		if (r->exec) {
			symbolizer__exec(sb->sym, r->pid, r->time_ns, r->path);
			sb->st.execs++;
		} else if (r->pid == r->tid) {
			symbolizer__rename(sb->sym, r->pid, r->path);
		}
		break;
	case SIDEBAND_FORK:
		if (r->pid == r->ppid)
			break; /* a thread */
		if (sb->opts.filter_pids)
			sideband__add_pid(sb, r->pid);
		symbolizer__fork(sb->sym, r->ppid, r->pid, r->time_ns);
		sb->st.forks++;
		break;
	case SIDEBAND_EXIT:
		if (r->pid == r->tid) {
			symbolizer__exit(sb->sym, r->pid, r->time_ns);
			sb->st.exits++;
		}
		break;
	case SIDEBAND_LOST:
		if (!sb->st.lost)
			pr_warn("the kernel dropped process records (ring full): mappings will be "
				"read from /proc where they can be");
		sb->st.lost += r->lost;
		break;
	case SIDEBAND_OTHER:
		break;
	}
}

/* Whether a record is about a process the filter follows. */
static bool wanted(const struct sideband *sb, const struct sideband_rec *r)
{
	switch (r->kind) {
	case SIDEBAND_FORK:
		return pid_followed(sb, r->ppid) || pid_followed(sb, r->pid);
	case SIDEBAND_LOST:
	case SIDEBAND_OTHER:
		return true;
	default:
		return pid_followed(sb, r->pid);
	}
}

/* ---- the rings ---- */

static int cmp_copy(const void *a, const void *b)
{
	const struct sb_copy *x = a, *y = b;

	if (x->time_ns != y->time_ns)
		return x->time_ns < y->time_ns ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

void sideband__queue(struct sideband *sb, const void *rec, size_t size)
{
	struct sideband_rec parsed;

	if (size > UINT16_MAX || sideband_parse(rec, size, &parsed)) {
		sb->st.bad++;
		return;
	}
	xgrow((void **)&sb->buf, &sb->cap, sb->len + size, 1);
	xgrow((void **)&sb->recs, &sb->cap_recs, sb->nrecs + 1, sizeof(*sb->recs));
	memcpy(sb->buf + sb->len, rec, size);
	sb->recs[sb->nrecs] =
		(struct sb_copy){parsed.time_ns, sb->nrecs, (uint32_t)sb->len, (uint32_t)size};
	sb->nrecs++;
	sb->len += size;
}

/* Copies the records of one ring into sb->buf and sb->recs. */
static void drain_ring(struct sideband *sb, struct sb_ring *r)
{
	struct perf_event_mmap_page *pg = r->base;
	const char *data = (const char *)r->base + pg->data_offset;
	uint64_t head = __atomic_load_n(&pg->data_head, __ATOMIC_ACQUIRE);
	uint64_t tail = pg->data_tail;

	while (tail < head) {
		struct sb_header h;
		size_t off = tail % r->data_size, first;

		/* The header itself may wrap. */
		first = r->data_size - off < sizeof(h) ? r->data_size - off : sizeof(h);
		memcpy(&h, data + off, first);
		memcpy((char *)&h + first, data, sizeof(h) - first);
		if (h.size < sizeof(h) || h.size > head - tail) {
			sb->st.bad++;
			tail = head; /* can't find the next record: skip the rest */
			break;
		}
		if (h.size <= r->data_size - off) {
			sideband__queue(sb, data + off, h.size);
		} else {
			/* It wraps: whole in the scratch buffer first. */
			xgrow((void **)&sb->buf2, &sb->cap2, h.size, 1);
			first = r->data_size - off;
			memcpy(sb->buf2, data + off, first);
			memcpy(sb->buf2 + first, data, h.size - first);
			sideband__queue(sb, sb->buf2, h.size);
		}
		tail += h.size;
	}
	__atomic_store_n(&pg->data_tail, tail, __ATOMIC_RELEASE);
}

void sideband__set_listener(struct sideband *sb, sideband_fn fn, void *ctx)
{
	sb->listener = fn;
	sb->listener_ctx = ctx;
}

/* Moves the records from recs[from] on (sorted) to the front of a fresh
 * buffer, as the start of the next poll's. */
static void hold(struct sideband *sb, size_t from)
{
	size_t need = 0, len = 0, n = 0, i;
	char *t;

	for (i = from; i < sb->nrecs; i++)
		need += sb->recs[i].size;
	xgrow((void **)&sb->buf2, &sb->cap2, need ? need : 1, 1);
	for (i = from; i < sb->nrecs; i++, n++) {
		struct sb_copy c = sb->recs[i];

		memcpy(sb->buf2 + len, sb->buf + c.off, c.size);
		sb->recs[n] = (struct sb_copy){c.time_ns, n, (uint32_t)len, c.size};
		len += c.size;
	}
	t = sb->buf, sb->buf = sb->buf2, sb->buf2 = t;
	i = sb->cap, sb->cap = sb->cap2, sb->cap2 = i;
	sb->len = len;
	sb->nrecs = n;
}

int sideband__poll(struct sideband *sb)
{
	/* Everything the kernel wrote before now is in the rings: the records
	 * stamped before now are applied, in time order across the rings;
	 * those stamped since wait for the next poll. A ring drained early
	 * may miss a record that another ring, drained later, follows with
	 * one of its own (a process that execs on one CPU and maps its
	 * executable on another): applied now, the mapping would go to the
	 * image before an exec the next poll brings. */
	uint64_t horizon = mono_ns();
	size_t i;
	int n = 0;

	for (int r = 0; r < sb->nrings; r++)
		drain_ring(sb, &sb->rings[r]);
	qsort(sb->recs, sb->nrecs, sizeof(*sb->recs), cmp_copy);
	for (i = 0; i < sb->nrecs && sb->recs[i].time_ns < horizon; i++) {
		struct sideband_rec rec;

		sideband_parse(sb->buf + sb->recs[i].off, sb->recs[i].size, &rec);
		if (!wanted(sb, &rec)) {
			sb->st.filtered++;
			continue;
		}
		apply(sb, &rec);
		if (sb->listener)
			sb->listener(sb->listener_ctx, &rec);
		sb->st.records++;
		n++;
	}
	hold(sb, i);
	symbolizer__set_horizon(sb->sym, horizon);
	return n;
}

static void sync_fn(void *ctx)
{
	sideband__poll(ctx);
}

static int open_ring(struct sideband *sb, struct sb_ring *r, int cpu, bool build_id)
{
	struct perf_event_attr a = {
		.type = PERF_TYPE_SOFTWARE,
		.size = sizeof(a),
		.config = PERF_COUNT_SW_DUMMY,
		.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME,
		.mmap = 1,
		.mmap2 = 1,
		.comm = 1,
		.comm_exec = 1,
		.task = 1,
		.sample_id_all = 1,
		.use_clockid = 1,
		.clockid = CLOCK_MONOTONIC,
		.build_id = build_id,
	};
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t pages = sb->opts.ring_pages ? sb->opts.ring_pages : DEFAULT_RING_PAGES;

	r->fd = (int)syscall(__NR_perf_event_open, &a, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
	if (r->fd < 0)
		return -errno;
	r->data_size = pages * page;
	r->base = mmap(NULL, (pages + 1) * page, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
	if (r->base == MAP_FAILED) {
		int err = -errno;

		close(r->fd);
		r->fd = -1;
		r->base = NULL;
		return err;
	}
	return 0;
}

struct sideband *sideband__new(const struct sideband_opts *opts, struct symbolizer *sym)
{
	struct sideband *sb = xcalloc(1, sizeof(*sb));

	sb->opts = *opts;
	sb->sym = sym;
	sb->st.build_ids = true;
	symbolizer__set_sync(sym, sync_fn, sb);
	return sb;
}

struct sideband *sideband__open(const struct sideband_opts *opts, struct symbolizer *sym)
{
	struct sideband *sb = sideband__new(opts, sym);
	int cpus[HOST_MAX_CPUS], n = online_cpus(cpus, HOST_MAX_CPUS), err = 0;
	size_t pages = opts->ring_pages ? opts->ring_pages : DEFAULT_RING_PAGES;

	if (pages & (pages - 1)) {
		pr_err("the sideband ring must be a power of two pages, not %zu", pages);
		err = -EINVAL;
		goto fail;
	}
	if (n <= 0) {
		err = n ? n : -ENODEV;
		pr_err("can't read the online CPUs from /sys/devices/system/cpu/online: %s",
		       strerror(-err));
		goto fail;
	}
	sb->rings = xcalloc((size_t)n, sizeof(*sb->rings));
	for (int i = 0; i < n; i++) {
		err = open_ring(sb, &sb->rings[i], cpus[i], sb->st.build_ids);
		/* MMAP2 with build-ids came in Linux 5.12: devices and inodes
		 * before. */
		if (err == -EINVAL && sb->st.build_ids && i == 0) {
			sb->st.build_ids = false;
			err = open_ring(sb, &sb->rings[i], cpus[i], false);
		}
		if (err) {
			pr_err("can't open the process-record event on cpu %d: %s -- %s", cpus[i],
			       strerror(-err),
			       err == -EACCES || err == -EPERM ? "run as root or with CAP_PERFMON"
							       : "is perf_event_open allowed?");
			goto fail;
		}
		sb->nrings++;
	}
	return sb;
fail:
	sideband__free(sb);
	errno = -err;
	return NULL;
}

void sideband__free(struct sideband *sb)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	if (!sb)
		return;
	if (sb->sym)
		symbolizer__set_sync(sb->sym, NULL, NULL);
	for (int i = 0; i < sb->nrings; i++) {
		munmap(sb->rings[i].base, sb->rings[i].data_size + page);
		close(sb->rings[i].fd);
	}
	free(sb->rings);
	free(sb->buf);
	free(sb->buf2);
	free(sb->recs);
	free(sb->pids);
	free(sb);
}

void sideband__stats(const struct sideband *sb, struct sideband_stats *out)
{
	*out = sb->st;
}
