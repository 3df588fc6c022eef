/* unwinder.c: the unwind tables in the BPF maps, within a budget, built as
 * the BPF side asks for them. See unwinder.h. */
#include "unwind/unwinder.h"
#include "unwind/builder.h"
#include "unwind/table.h"
#include "python/python.h"
#include "symbolize/symbolize.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/percpu.h"
#include "common/xalloc.h"

#include "unwind_abi.h" /* bpf/unwind_abi.h: the maps' keys and values */

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define MISSES_PER_POLL 64
#define NOT_PY_MAX 64

/* A file whose table is in the rows array; view maps its rows for the
 * userspace walk, once it is asked for (unwinder__table). */
struct loaded {
	struct unw_file_key key;
	uint32_t first, n;
	void *view;
	size_t view_len, view_skip;
};

struct unwinder {
	int rows_fd, files_fd, misses_fd, counters_fd, py_fd, py_procs_fd, py_pids_fd;
	/* Files named like an interpreter that are none (unwinder__python_pid):
	 * not inspected again. A ring. */
	struct unw_file_key not_py[NOT_PY_MAX];
	size_t nnot_py;
	uint32_t cap;
	struct loaded *files; /* sorted by first */
	size_t nfiles, files_cap;
	uint64_t rows_used;
	struct unw_builder *builder; /* NULL: tables built in unwinder__poll */
	bool trim;		     /* a big table was built: trim the heap */
	uint64_t generation;	     /* files put in the maps */
	struct unwinder_stats st;
};

static void load_vdso(struct unwinder *u);
static void rows_span(uint32_t first, size_t n, size_t *start, size_t *span, size_t *skip);

uint32_t unwinder__rows_for(uint64_t bytes)
{
	uint64_t n = bytes / sizeof(struct unw_row);

	return n < 1 ? 1 : n > UINT32_MAX / 2 ? UINT32_MAX / 2 : (uint32_t)n;
}

struct unwinder *unwinder__new(const struct unwinder_maps *m)
{
	struct unwinder *u = xcalloc(1, sizeof(*u));

	u->rows_fd = bpf_map__fd(m->rows);
	u->files_fd = bpf_map__fd(m->files);
	u->misses_fd = bpf_map__fd(m->misses);
	u->counters_fd = bpf_map__fd(m->counters);
	u->py_fd = bpf_map__fd(m->py_files);
	u->py_procs_fd = bpf_map__fd(m->py_procs);
	u->py_pids_fd = bpf_map__fd(m->py_pids);
	u->cap = bpf_map__max_entries(m->rows);
	u->builder = unw_builder__new();
	if (!u->builder)
		pr_warn("can't start the unwind tables' builder thread: %s -- they are built "
			"as the stacks ask",
			strerror(errno));
	load_vdso(u);
	return u;
}

int unwinder__share(struct unwinder *u, const struct unwinder_maps *m)
{
	int err;

	err = bpf_map__set_max_entries(m->rows, u->cap);
	err = err ?: bpf_map__reuse_fd(m->rows, u->rows_fd);
	err = err ?: bpf_map__reuse_fd(m->files, u->files_fd);
	err = err ?: bpf_map__reuse_fd(m->misses, u->misses_fd);
	err = err ?: bpf_map__reuse_fd(m->counters, u->counters_fd);
	err = err ?: bpf_map__reuse_fd(m->py_files, u->py_fd);
	err = err ?: bpf_map__reuse_fd(m->py_procs, u->py_procs_fd);
	err = err ?: bpf_map__reuse_fd(m->py_pids, u->py_pids_fd);
	if (err)
		pr_err("can't share the unwind tables between BPF objects: %s", strerror(-err));
	return err;
}

void unwinder__free(struct unwinder *u)
{
	if (!u)
		return;
	unw_builder__free(u->builder);
	for (size_t i = 0; i < u->nfiles; i++)
		if (u->files[i].view)
			munmap(u->files[i].view, u->files[i].view_len);
	free(u->files);
	free(u);
}

/* ---- room in the rows array --------------------------------------------- */

/* The first gap of n rows between the loaded files (sorted by first);
 * UINT32_MAX if none. */
static uint32_t find_gap(const struct unwinder *u, uint32_t n)
{
	uint32_t prev_end = 0;

	for (size_t i = 0; i < u->nfiles; i++) {
		if (u->files[i].first - prev_end >= n)
			return prev_end;
		prev_end = u->files[i].first + u->files[i].n;
	}
	return u->cap - prev_end >= n ? prev_end : UINT32_MAX;
}

static void drop_loaded(struct unwinder *u, size_t i)
{
	if (u->files[i].view)
		munmap(u->files[i].view, u->files[i].view_len);
	/* The BPF side stops using the rows before they are reused. */
	bpf_map_delete_elem(u->files_fd, &u->files[i].key);
	u->rows_used -= u->files[i].n;
	memmove(&u->files[i], &u->files[i + 1], (u->nfiles - i - 1) * sizeof(u->files[0]));
	u->nfiles--;
	u->st.evicted++;
}

/* Evicts the least recently used file. Returns false if none is left. */
static bool evict_lru(struct unwinder *u)
{
	size_t victim = SIZE_MAX;
	uint64_t oldest = UINT64_MAX;

	for (size_t i = 0; i < u->nfiles; i++) {
		struct unw_file f;

		if (bpf_map_lookup_elem(u->files_fd, &u->files[i].key, &f))
			f.used_ns = 0;
		if (f.used_ns < oldest) {
			oldest = f.used_ns;
			victim = i;
		}
	}
	if (victim == SIZE_MAX)
		return false;
	pr_debug("unwind tables: evicted a table of %" PRIu32 " rows for room", u->files[victim].n);
	drop_loaded(u, victim);
	return true;
}

/* Copies the rows into the array at first, through a mapping of just the
 * pages they go to: a mapping of the whole array would count all of it in
 * our resident memory, used or not. */
static int write_rows(struct unwinder *u, uint32_t first, const struct unw_table *t)
{
	size_t start, span, skip;
	void *m;

	rows_span(first, t->n, &start, &span, &skip);
	m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_SHARED, u->rows_fd, (off_t)start);
	if (m == MAP_FAILED) {
		pr_warn("can't map the unwind tables' rows: %s", strerror(errno));
		return -1;
	}
	memcpy((char *)m + skip, t->rows, t->n * sizeof(*t->rows));
	munmap(m, span);
	return 0;
}

/* Copies the table into the rows array and publishes it. */
static int place(struct unwinder *u, const struct unw_file_key *key, const struct unw_table *t)
{
	struct unw_file f = {.n = (uint32_t)t->n};
	size_t at;
	uint32_t first;

	while ((first = find_gap(u, f.n)) == UINT32_MAX)
		if (!evict_lru(u))
			return -E2BIG;
	if (write_rows(u, first, t))
		return -EIO;
	f.first = first;
	f.used_ns = mono_ns();
	/* The files map full: an eviction makes room (the gap stays free). */
	while (bpf_map_update_elem(u->files_fd, key, &f, BPF_ANY))
		if (errno != E2BIG || !evict_lru(u))
			return -errno;
	for (at = 0; at < u->nfiles && u->files[at].first < first; at++)
		;
	xgrow((void **)&u->files, &u->files_cap, u->nfiles + 1, sizeof(*u->files));
	memmove(&u->files[at + 1], &u->files[at], (u->nfiles - at) * sizeof(u->files[0]));
	u->files[at] = (struct loaded){.key = *key, .first = first, .n = f.n};
	u->nfiles++;
	u->generation++;
	u->rows_used += f.n;
	return 0;
}

/* Marks a file for frame pointers. */
static void mark_fp(struct unwinder *u, const struct unw_file_key *key)
{
	struct unw_file f = {.flags = UNW_FILE_FP, .used_ns = mono_ns()};

	u->st.fp_files++;
	u->generation++;
	if (bpf_map_update_elem(u->files_fd, key, &f, BPF_ANY) && errno == E2BIG && evict_lru(u))
		bpf_map_update_elem(u->files_fd, key, &f, BPF_ANY);
}

/* ---- building ------------------------------------------------------------ */

/* The BPF side's pieces of an interpreter py_inspect_file found. */
static void py_file_of(const struct py_interp *in, struct unw_py_file *pf)
{
	memset(pf, 0, sizeof(*pf));
	for (int i = 0; i < in->neval && i < UNW_PY_EVAL_RANGES; i++) {
		pf->eval_start[i] = in->eval_start[i];
		pf->eval_end[i] = in->eval_end[i];
	}
	pf->neval = in->neval < UNW_PY_EVAL_RANGES ? in->neval : UNW_PY_EVAL_RANGES;
	pf->text_delta = in->text_delta;
	pf->tss_key_addr = in->tss_key_addr;
	pf->layout = in->layout;
}

/* key's pieces for the BPF side's walk of Python frames into *pf: in
 * unw_py_files already, else found now in the file at path and put there.
 * 0, -ENOENT when it is no CPython interpreter, or the map's error. */
static int python_file(struct unwinder *u, const struct unw_file_key *key, const char *path,
		       struct unw_py_file *pf)
{
	struct py_interp in;
	char why[256];

	if (!bpf_map_lookup_elem(u->py_fd, key, pf))
		return 0;
	if (py_inspect_file(path, &in, why, sizeof(why)) || in.neval <= 0)
		return -ENOENT;
	py_file_of(&in, pf);
	return bpf_map_update_elem(u->py_fd, key, pf, BPF_ANY) ? -errno : 0;
}

/* If the file is a CPython interpreter, its pieces (python_file: found by
 * a scan of a process that maps it, unwinder__python_pid, or now), and the
 * flag that says so. */
static void add_python(struct unwinder *u, const struct unw_file_key *key, const char *path,
		       const char *name)
{
	struct unw_py_file pf;
	struct unw_file f;

	if (python_file(u, key, path, &pf) || bpf_map_lookup_elem(u->files_fd, key, &f))
		return;
	f.flags |= UNW_FILE_PYTHON;
	bpf_map_update_elem(u->files_fd, key, &f, BPF_ANY);
	u->st.python++;
	pr_info("Python 3.%d in %s: its frames are walked", pf.layout.minor, name);
}

static bool is_not_py(const struct unwinder *u, const struct unw_file_key *key)
{
	size_t n = u->nnot_py < NOT_PY_MAX ? u->nnot_py : NOT_PY_MAX;

	for (size_t i = 0; i < n; i++)
		if (u->not_py[i].dev == key->dev && u->not_py[i].ino == key->ino)
			return true;
	return false;
}

bool unwinder__python_pid(struct unwinder *u, uint32_t pid, const struct unw_file_key *key,
			  const char *path, const char *name, uint64_t start)
{
	const char *base = strrchr(name, '/');
	struct unw_py_pid pp = {*key, start};
	struct unw_py_file pf;
	int err;

	if (!strstr(base ? base + 1 : name, "python") || is_not_py(u, key))
		return false;
	err = python_file(u, key, path, &pf);
	if (err == -ENOENT)
		u->not_py[u->nnot_py++ % NOT_PY_MAX] = *key;
	if (err)
		return false;
	return !bpf_map_update_elem(u->py_pids_fd, &pid, &pp, BPF_ANY);
}

/* Loads the table a build of key's file gave (err, why: what
 * unw_table__build_file() returned), or marks the file for frame pointers
 * if it has no usable table; a file that is a CPython interpreter is
 * inspected through self, the path of its open descriptor. Returns 0 or
 * the reason it is walked by frame pointers. A file loaded meanwhile (a
 * held process's tables are built at once) is left as it is. */
static int install(struct unwinder *u, const struct unw_file_key *key, const char *self,
		   const char *name, int err, const char *why, struct unw_table *t,
		   uint64_t build_ns)
{
	struct unw_file f;

	u->st.build_ms += build_ns / NS_PER_MS;
	if (!bpf_map_lookup_elem(u->files_fd, key, &f))
		return 0;
	if (err == -E2BIG) {
		u->st.over_budget++;
		pr_warn("unwind table of %s is bigger than the budget (%" PRIu32
			" rows): its frames are walked by frame pointers -- raise "
			"--unwind-memory",
			name, u->cap);
	} else if (err == -ENODATA || (!err && !t->n)) {
		u->st.no_table++;
		pr_debug("%s has no unwind table: frame pointers", name);
		err = -ENODATA;
	} else if (err) {
		u->st.failed++;
		pr_info("can't build the unwind table of %s: %s", name,
			why[0] ? why : strerror(-err));
	}
	if (err) {
		mark_fp(u, key);
		return err;
	}
	u->st.built++;
	err = place(u, key, t);
	if (err) {
		u->st.over_budget++;
		mark_fp(u, key);
		return err;
	}
	pr_debug("unwind table of %s: %zu rows", name, t->n);
	add_python(u, key, self, name);
	return 0;
}

/* The building holds several times the table's size at its peak
 * (libtorch_cpu.so: 89 MB for 11 MB of rows): once a big one is loaded,
 * the heap's free memory goes back to the system. */
#define TRIM_ROWS 100000

/* Builds the table of the file at path (name in messages) now and loads
 * it. The file is held open for both the table and the Python inspection,
 * which read it through /proc/self/fd: path is often /proc/PID/map_files/...,
 * which goes away when that process exits -- a short-lived process exiting
 * between the two reads left its interpreter with a table but never walked
 * as Python, in every process, for the agent's life. A file that can't be
 * opened now is not marked: the next stack through it asks again. */
static int load_file(struct unwinder *u, const struct unw_file_key *key, const char *path,
		     const char *name)
{
	struct unw_table t = {0};
	char why[256] = "", self[64];
	uint64_t t0 = mono_ns();
	int err, fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		pr_debug("can't open %s (%s): %s", path, name, strerror(-err));
		return err;
	}
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	err = unw_table__build_file(self, u->cap, &t, why, sizeof(why));
	err = install(u, key, self, name, err, why, &t, mono_ns() - t0);
	if (t.n >= TRIM_ROWS)
		u->trim = true;
	unw_table__free(&t);
	close(fd);
	return err;
}

/* Loads the tables the builder has finished. Returns how many. */
static int take_built(struct unwinder *u)
{
	struct unw_job *j;
	int loaded = 0;

	while ((j = unw_builder__take(u->builder))) {
		if (!install(u, &j->key, j->path, j->name, j->err, j->why, &j->t, j->build_ns))
			loaded++;
		if (j->t.n >= TRIM_ROWS)
			u->trim = true;
		unw_table__free(&j->t);
		close(j->fd);
		free(j);
	}
	if (u->trim) {
		malloc_trim(0);
		u->trim = false;
	}
	return loaded;
}

/* Has the builder build the table of key's file, open at path: 0, or -1 if
 * it must be built here (no builder, or its queue is full). */
static int submit(struct unwinder *u, const struct unw_file_key *key, const char *path,
		  const char *name)
{
	struct unw_job *j;

	if (!u->builder)
		return -1;
	if (unw_builder__has(u->builder, key))
		return 0;
	j = xcalloc(1, sizeof(*j));
	j->key = *key;
	j->max_rows = u->cap;
	snprintf(j->name, sizeof(j->name), "%s", name);
	j->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (j->fd < 0) {
		/* Gone already: asked again by its next stack. */
		pr_debug("can't open %s (%s): %s", path, name, strerror(errno));
		free(j);
		return 0;
	}
	if (unw_builder__submit(u->builder, j))
		return 0;
	close(j->fd);
	free(j);
	return -1;
}

int unwinder__poll(struct unwinder *u)
{
	struct unw_file_key keys[MISSES_PER_POLL];
	struct unw_miss miss[MISSES_PER_POLL];
	bool got[MISSES_PER_POLL];
	size_t n = 0;
	int loaded = take_built(u);

	while (n < MISSES_PER_POLL &&
	       !bpf_map_get_next_key(u->misses_fd, n ? &keys[n - 1] : NULL, &keys[n]))
		n++;
	for (size_t i = 0; i < n; i++) {
		got[i] = !bpf_map_lookup_elem(u->misses_fd, &keys[i], &miss[i]);
		bpf_map_delete_elem(u->misses_fd, &keys[i]);
	}
	for (size_t i = 0; i < n; i++) {
		struct unw_file f;
		char path[96], name[PATH_MAX];
		ssize_t len;

		if (!got[i] || !bpf_map_lookup_elem(u->files_fd, &keys[i], &f))
			continue; /* asked twice */
		snprintf(path, sizeof(path), "/proc/%" PRIu32 "/map_files/%" PRIx64 "-%" PRIx64,
			 miss[i].pid, (uint64_t)miss[i].start, (uint64_t)miss[i].end);
		len = readlink(path, name, sizeof(name) - 1);
		if (len < 0) {
			/* Gone already: asked again by its next stack. */
			pr_debug("can't open %s: %s", path, strerror(errno));
			continue;
		}
		name[len] = 0;
		/* Built on the builder's thread, loaded by a later poll; here
		 * when it can't take it. */
		if (submit(u, &keys[i], path, name) && load_file(u, &keys[i], path, name) == 0)
			loaded++;
	}
	return loaded;
}

/* The vdso's table, from this process's copy: the kernel maps the same
 * image into every process. */
static void load_vdso(struct unwinder *u)
{
	static const struct unw_file_key key = {0, UNW_VDSO_INO};
	uint64_t start = 0, size = 0;
	struct unw_table t = {0};
	char why[256] = "";
	void *copy;
	Elf *elf;

	if (!sym_own_vdso(&start, &size) || size > (1 << 20)) {
		pr_debug("no vdso found: its frames are walked by frame pointers");
		mark_fp(u, &key);
		return;
	}
	/* libelf reads it in place; a copy keeps it from writing to it. */
	copy = xmalloc(size);
	memcpy(copy, (void *)(uintptr_t)start, size);
	elf_version(EV_CURRENT);
	elf = elf_memory(copy, size);
	if (elf && !unw_table__build_elf(elf, u->cap, &t, why, sizeof(why)) && t.n &&
	    !place(u, &key, &t)) {
		u->st.built++;
		pr_debug("unwind table of the vdso: %zu rows", t.n);
	} else {
		pr_debug("no unwind table for the vdso (%s): frame pointers", why);
		mark_fp(u, &key);
	}
	unw_table__free(&t);
	if (elf)
		elf_end(elf);
	free(copy);
}

int unwinder__load(struct unwinder *u, uint64_t dev, uint64_t ino, const char *path)
{
	struct unw_file_key key = {dev, ino};
	struct unw_file f;

	if (!bpf_map_lookup_elem(u->files_fd, &key, &f))
		return 0;
	return load_file(u, &key, path, path);
}

int unwinder__load_path(struct unwinder *u, const char *path)
{
	struct stat st;

	if (stat(path, &st))
		return -errno;
	return unwinder__load(u, ((uint64_t)major(st.st_dev) << 20) | minor(st.st_dev), st.st_ino,
			      path);
}

/* The page span of the rows [first, first + n) of the array: where a
 * mapping of them starts, how long it is and how far into it they are. */
static void rows_span(uint32_t first, size_t n, size_t *start, size_t *span, size_t *skip)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t from = (size_t)first * sizeof(struct unw_row), len = n * sizeof(struct unw_row);

	*start = from / page * page;
	*span = (from + len + page - 1) / page * page - *start;
	*skip = from - *start;
}

/* The loaded file whose rows start at first, or NULL. */
static struct loaded *loaded_at(struct unwinder *u, uint32_t first)
{
	size_t lo = 0, hi = u->nfiles;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (u->files[mid].first < first)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < u->nfiles && u->files[lo].first == first ? &u->files[lo] : NULL;
}

int unwinder__table(struct unwinder *u, const struct unw_file_key *key, struct unwinder_table *out)
{
	struct loaded *l;
	struct unw_file f;

	memset(out, 0, sizeof(*out));
	if (bpf_map_lookup_elem(u->files_fd, key, &f))
		return u->builder && unw_builder__has(u->builder, key) ? -EAGAIN : -ENOENT;
	if ((f.flags & UNW_FILE_PYTHON) && !bpf_map_lookup_elem(u->py_fd, key, &out->py))
		out->python = true;
	if ((f.flags & UNW_FILE_FP) || !f.n)
		return 0;
	l = loaded_at(u, f.first);
	if (!l || l->n != f.n)
		return 0; /* not one of ours (the vdso's is): frame pointers */
	if (!l->view) {
		size_t start, span, skip;
		void *m;

		rows_span(l->first, l->n, &start, &span, &skip);
		m = mmap(NULL, span, PROT_READ, MAP_SHARED, u->rows_fd, (off_t)start);
		if (m == MAP_FAILED) {
			pr_warn("can't map the unwind tables' rows: %s", strerror(errno));
			return 0;
		}
		l->view = m;
		l->view_len = span;
		l->view_skip = skip;
	}
	out->rows = (const struct unw_row *)((const char *)l->view + l->view_skip);
	out->n = l->n;
	return 0;
}

void unwinder__settle(struct unwinder *u)
{
	if (u->builder)
		unw_builder__wait(u->builder);
	take_built(u);
}

uint64_t unwinder__generation(const struct unwinder *u)
{
	return u->generation;
}

int unwinder__want(struct unwinder *u, const struct unw_file_key *key, const char *path,
		   const char *name)
{
	struct unw_file f;

	if (!bpf_map_lookup_elem(u->files_fd, key, &f))
		return 1;
	if (!u->builder)
		return -EBUSY;
	if (unw_builder__has(u->builder, key))
		return 0;
	if (access(path, R_OK))
		return -ENOENT;
	return submit(u, key, path, name) ? -EBUSY : 0;
}

int unwinder__request(struct unwinder *u, const struct unw_file_key *key, const char *path,
		      const char *name)
{
	struct unw_file f;
	int err;

	if (!bpf_map_lookup_elem(u->files_fd, key, &f))
		return 0;
	if (!submit(u, key, path, name))
		return u->builder && unw_builder__has(u->builder, key) ? 0 : -ENOENT;
	err = load_file(u, key, path, name);
	return err == -ENOENT || err == -EACCES ? err : 0;
}

void unwinder__stats(struct unwinder *u, struct unwinder_stats *out)
{
	*out = u->st;
	out->files = u->nfiles;
	out->rows = u->rows_used;
	out->capacity = u->cap;
	for (unsigned i = 0; i < UNW_CNT_MAX; i++)
		out->counts[i] = percpu_sum(u->counters_fd, i);
}
