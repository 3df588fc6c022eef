/* sass.c: GPU instructions named by nvdisasm. See sass.h. A cubin's
 * functions asked for wait in its table; the worker thread takes a cubin
 * with functions waiting, runs `nvdisasm -c FILE` on it, reads its output
 * line by line keeping the instructions of those functions only, and
 * publishes them. */
#include "agent/sass.h"

#include "common/clock.h"
#include "common/htable.h"
#include "common/log.h"
#include "common/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 4096
#define MAX_FDS 256 /* cubins held open: those the agent can't name a path of */
#define NAME_MAX_BYTES 1024

struct insn {
	uint64_t offset;
	const char *mnemonic; /* interned */
};

struct func {
	UT_hash_handle hh;
	enum sass_state state;
	struct insn *insns; /* sorted by offset */
	size_t n, cap;
	char name[];
};

struct cubin {
	UT_hash_handle hh;
	uint64_t crc;
	char path[PATH_MAX]; /* where the agent reads it */
	int fd;		     /* or, a file only the process's namespace had: open, -1 */
	bool failed;	     /* nvdisasm failed on it: not tried again */
	size_t waiting;	     /* functions PENDING */
	struct func *funcs;
};

struct mnemonic {
	UT_hash_handle hh;
	char text[];
};

struct sass {
	char *nvdisasm;
	pthread_mutex_t lock;
	pthread_cond_t work, idle;
	pthread_t worker;
	bool stop, busy;
	struct cubin *cubins;
	size_t ncubins, nfds;
	struct mnemonic *mnemonics;
	struct sass_stats st;
};

/* ---- nvdisasm's output ----------------------------------------------------- */

static const char *skip_space(const char *p)
{
	while (*p == ' ' || *p == '\t')
		p++;
	return p;
}

/* The function a line opens (".text.NAME:" or ".section .text.NAME,..."),
 * into func; whether it opens one. */
static bool function_line(const char *p, char *func, size_t size)
{
	const char *name, *end;

	if (!strncmp(p, ".section", 8)) {
		name = strstr(p, ".text.");
		if (!name)
			return false;
		name += 6;
		end = name + strcspn(name, ", \t\"");
	} else if (!strncmp(p, ".text.", 6)) {
		name = p + 6;
		end = strchr(name, ':');
		if (!end || end[1])
			return false;
	} else {
		return false;
	}
	if (end == name || (size_t)(end - name) >= size)
		return false;
	memcpy(func, name, (size_t)(end - name));
	func[end - name] = 0;
	return true;
}

/* An instruction line, "/ *0a40* /  @!P0 LDG.E.128 R4, [R2.64] ;": its
 * offset and mnemonic (into mn); whether it is one. */
static bool insn_line(const char *p, uint64_t *offset, char *mn, size_t size)
{
	char *end;
	size_t n;

	if (strncmp(p, "/*", 2))
		return false;
	*offset = strtoull(p + 2, &end, 16);
	if (end == p + 2 || strncmp(end, "*/", 2))
		return false;
	p = skip_space(end + 2);
	if (*p == '{')
		p = skip_space(p + 1);
	if (*p == '@') /* a predicate */
		p = skip_space(p + strcspn(p, " \t"));
	n = strcspn(p, " \t;}");
	if (!n || n >= size)
		return false;
	memcpy(mn, p, n);
	mn[n] = 0;
	return true;
}

struct parser {
	char func[NAME_MAX_BYTES];
	sass_insn_fn fn;
	void *ctx;
	size_t insns;
};

static void parse_line(struct parser *ps, const char *line)
{
	char mn[64];
	uint64_t off;
	const char *p = skip_space(line);

	if (function_line(p, ps->func, sizeof(ps->func)))
		return;
	if (*ps->func && insn_line(p, &off, mn, sizeof(mn))) {
		ps->fn(ps->ctx, ps->func, off, mn);
		ps->insns++;
	}
}

/* Lines of text into ps; a line past LINE_MAX_BYTES is cut there. */
static size_t feed(struct parser *ps, char *line, size_t *used, const char *text, size_t len)
{
	size_t done = 0;

	for (size_t i = 0; i < len; i++) {
		char c = text[i];

		if (c == '\n' || c == '\0') {
			line[*used] = 0;
			parse_line(ps, line);
			*used = 0;
			done++;
		} else if (*used < LINE_MAX_BYTES - 1) {
			line[(*used)++] = c;
		}
	}
	return done;
}

size_t sass_parse(const char *text, size_t len, sass_insn_fn fn, void *ctx)
{
	struct parser ps = {.fn = fn, .ctx = ctx};
	char *line = xmalloc(LINE_MAX_BYTES);
	size_t used = 0;

	feed(&ps, line, &used, text, len);
	if (used) {
		line[used] = 0;
		parse_line(&ps, line);
	}
	free(line);
	return ps.insns;
}

/* ---- the table --------------------------------------------------------------- */

static const char *intern(struct sass *s, const char *text)
{
	struct mnemonic *m;
	size_t n = strlen(text);

	HASH_FIND(hh, s->mnemonics, text, n, m);
	if (m)
		return m->text;
	m = xcalloc(1, sizeof(*m) + n + 1);
	memcpy(m->text, text, n + 1);
	HASH_ADD_KEYPTR(hh, s->mnemonics, m->text, n, m);
	return m->text;
}

static int cmp_insn(const void *a, const void *b)
{
	const struct insn *x = a, *y = b;

	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Where nvdisasm is: path, SONDE_NVDISASM, the PATH, the toolkit. */
static char *find_nvdisasm(const char *path)
{
	const char *env = getenv("SONDE_NVDISASM"), *dirs = getenv("PATH"),
		   *cuda = getenv("CUDA_HOME");
	char buf[PATH_MAX];

	if (path)
		return access(path, X_OK) ? NULL : xstrdup(path);
	if (env && *env)
		return access(env, X_OK) ? NULL : xstrdup(env);
	while (dirs && *dirs) {
		size_t n = strcspn(dirs, ":");

		snprintf(buf, sizeof(buf), "%.*s/nvdisasm", (int)n, dirs);
		if (n && !access(buf, X_OK))
			return xstrdup(buf);
		dirs += n + (dirs[n] == ':');
	}
	if (cuda && *cuda) {
		snprintf(buf, sizeof(buf), "%s/bin/nvdisasm", cuda);
		if (!access(buf, X_OK))
			return xstrdup(buf);
	}
	if (!access("/usr/local/cuda/bin/nvdisasm", X_OK))
		return xstrdup("/usr/local/cuda/bin/nvdisasm");
	return NULL;
}

/* ---- the worker -------------------------------------------------------------- */

/* The functions of a cubin asked for, their instructions as read. */
struct want {
	char **names;
	struct insn **insns;
	size_t *n, *cap;
	size_t nnames, total;
	struct sass *s; /* for intern, under its lock */
};

static void keep_insn(void *ctx, const char *function, uint64_t offset, const char *mnemonic)
{
	struct want *w = ctx;

	if (w->total >= SASS_MAX_INSNS)
		return;
	for (size_t i = 0; i < w->nnames; i++) {
		if (strcmp(w->names[i], function))
			continue;
		xgrow((void **)&w->insns[i], &w->cap[i], w->n[i] + 1, sizeof(**w->insns));
		pthread_mutex_lock(&w->s->lock);
		w->insns[i][w->n[i]++] = (struct insn){offset, intern(w->s, mnemonic)};
		pthread_mutex_unlock(&w->s->lock);
		w->total++;
		return;
	}
}

/* Runs nvdisasm -c path (with fd >= 0: the file open there), its output
 * into w. 0, or -1 (said why). */
static int disassemble(struct sass *s, const char *path, int fd, struct want *w)
{
	struct parser ps = {.fn = keep_insn, .ctx = w};
	uint64_t deadline = mono_ms() + SASS_TIMEOUT_MS, read_bytes = 0;
	char *line = xmalloc(LINE_MAX_BYTES), *buf = xmalloc(65536);
	int fds[2], status = 0, ret = 0;
	size_t used = 0;
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC)) {
		free(line);
		free(buf);
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		dup2(fds[1], 1);
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 2);
		}
		/* The file the process's namespace had, as the child's fd 3. */
		if (fd >= 0 && dup2(fd, 3) == 3)
			path = "/dev/fd/3";
		execl(s->nvdisasm, s->nvdisasm, "-c", path, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	if (pid < 0) {
		close(fds[0]);
		free(line);
		free(buf);
		return -1;
	}
	for (;;) {
		struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
		uint64_t now = mono_ms();
		ssize_t n;

		if (now >= deadline || read_bytes > SASS_MAX_OUTPUT ||
		    __atomic_load_n(&s->stop, __ATOMIC_RELAXED)) {
			pr_debug("nvdisasm on %s: %s -- its instructions are not named", path,
				 now >= deadline		? "timed out"
				 : read_bytes > SASS_MAX_OUTPUT ? "output too long"
								: "stopped");
			kill(pid, SIGKILL);
			ret = -1;
			break;
		}
		/* A short wait at a time: sass__free stops it. */
		if (poll(&pfd, 1, deadline - now < 100 ? (int)(deadline - now) : 100) <= 0)
			continue;
		n = read(fds[0], buf, 65536);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		read_bytes += (uint64_t)n;
		feed(&ps, line, &used, buf, (size_t)n);
	}
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!ret && (!WIFEXITED(status) || WEXITSTATUS(status))) {
		pr_debug("nvdisasm on %s failed (status %d): its instructions are not named", path,
			 status);
		ret = -1;
	}
	free(line);
	free(buf);
	return ret;
}

/* A cubin with functions waiting, or NULL. Under lock. */
static struct cubin *next_cubin(struct sass *s)
{
	struct cubin *c, *tmp;

	HASH_ITER(hh, s->cubins, c, tmp)
	{
		if (c->waiting)
			return c;
	}
	return NULL;
}

static void run_one(struct sass *s, struct cubin *c)
{
	struct want w = {.s = s};
	char path[PATH_MAX];
	struct func *f, *tmp;
	size_t i = 0;
	int err, fd;

	/* Under lock: what is wanted of it. */
	w.names = xcalloc(c->waiting, sizeof(*w.names));
	HASH_ITER(hh, c->funcs, f, tmp)
	{
		if (f->state == SASS_PENDING && i < c->waiting)
			w.names[i++] = xstrdup(f->name);
	}
	w.nnames = i;
	w.insns = xcalloc(i ? i : 1, sizeof(*w.insns));
	w.n = xcalloc(i ? i : 1, sizeof(*w.n));
	w.cap = xcalloc(i ? i : 1, sizeof(*w.cap));
	memcpy(path, c->path, sizeof(path));
	fd = c->fd >= 0 ? dup(c->fd) : -1;
	s->busy = true;
	pthread_mutex_unlock(&s->lock);

	err = disassemble(s, path, fd, &w);
	if (fd >= 0)
		close(fd);

	pthread_mutex_lock(&s->lock);
	s->busy = false;
	s->st.runs++;
	if (err) {
		s->st.failures++;
		c->failed = true;
	}
	for (i = 0; i < w.nnames; i++) {
		HASH_FIND_STR(c->funcs, w.names[i], f);
		if (f && f->state == SASS_PENDING) {
			f->state = !err && w.n[i] ? SASS_READY : SASS_NONE;
			if (f->state == SASS_READY) {
				qsort(w.insns[i], w.n[i], sizeof(*w.insns[i]), cmp_insn);
				f->insns = w.insns[i];
				f->n = w.n[i];
				w.insns[i] = NULL;
				s->st.insns += f->n;
			}
			c->waiting--;
		}
		free(w.insns[i]);
		free(w.names[i]);
	}
	/* Functions asked for while it ran wait for the next run; a failed
	 * cubin has none. */
	if (c->failed) {
		HASH_ITER(hh, c->funcs, f, tmp)
		{
			if (f->state == SASS_PENDING)
				f->state = SASS_NONE;
		}
		c->waiting = 0;
	}
	free(w.names);
	free(w.insns);
	free(w.n);
	free(w.cap);
	pthread_cond_broadcast(&s->idle);
}

static void *worker(void *arg)
{
	struct sass *s = arg;
	struct cubin *c;

	pthread_mutex_lock(&s->lock);
	while (!s->stop) {
		c = next_cubin(s);
		if (!c) {
			pthread_cond_wait(&s->work, &s->lock);
			continue;
		}
		run_one(s, c);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* ---- the interface ----------------------------------------------------------- */

struct sass *sass__new(const char *path)
{
	struct sass *s;
	char *tool = find_nvdisasm(path);

	if (!tool) {
		pr_debug("no nvdisasm (SONDE_NVDISASM, the PATH, $CUDA_HOME/bin): GPU instructions "
			 "go by their offsets alone");
		return NULL;
	}
	s = xcalloc(1, sizeof(*s));
	s->nvdisasm = tool;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->work, NULL);
	pthread_cond_init(&s->idle, NULL);
	if (pthread_create(&s->worker, NULL, worker, s)) {
		free(s->nvdisasm);
		free(s);
		return NULL;
	}
	return s;
}

void sass__free(struct sass *s)
{
	struct cubin *c, *ctmp;
	struct func *f, *ftmp;

	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	__atomic_store_n(&s->stop, true, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&s->work);
	pthread_mutex_unlock(&s->lock);
	/* A run under way is killed within 100 ms. */
	pthread_join(s->worker, NULL);
	HASH_ITER(hh, s->cubins, c, ctmp)
	{
		HASH_ITER(hh, c->funcs, f, ftmp)
		{
			HASH_DEL(c->funcs, f);
			free(f->insns);
			free(f);
		}
		HASH_DEL(s->cubins, c);
		if (c->fd >= 0)
			close(c->fd);
		free(c);
	}
	HTABLE_CLEAR(hh, s->mnemonics, m, free(m));
	free(s->nvdisasm);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->work);
	pthread_cond_destroy(&s->idle);
	free(s);
}

/* Whether a and b are one file. */
static bool same_file(const char *a, const char *b)
{
	struct stat x, y;

	return !stat(a, &x) && !stat(b, &y) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

void sass__cubin(struct sass *s, uint32_t pid, uint64_t crc, const char *path)
{
	char in_ns[PATH_MAX];
	struct cubin *c;
	int fd = -1;

	if (!s || !path || *path != '/')
		return;
	pthread_mutex_lock(&s->lock);
	HASH_FIND(hh, s->cubins, &crc, sizeof(crc), c);
	if (c || s->ncubins >= SASS_MAX_CUBINS) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	c = xcalloc(1, sizeof(*c));
	c->crc = crc;
	c->fd = -1;
	/* Its file as the process sees it (a container's /tmp), while the
	 * process is there to ask: the agent's path to it when that is the
	 * same file, else the file held open (the process may be gone when
	 * nvdisasm runs). */
	snprintf(in_ns, sizeof(in_ns), "/proc/%u/root%s", pid, path);
	snprintf(c->path, sizeof(c->path), "%s", path);
	if (!same_file(in_ns, path) && s->nfds < MAX_FDS &&
	    (fd = open(in_ns, O_RDONLY | O_CLOEXEC)) >= 0) {
		c->fd = fd;
		s->nfds++;
	}
	HASH_ADD(hh, s->cubins, crc, sizeof(c->crc), c);
	s->ncubins++;
	pthread_mutex_unlock(&s->lock);
}

enum sass_state sass__lookup(struct sass *s, uint64_t crc, const char *function, uint64_t offset,
			     const char **mnemonic)
{
	enum sass_state st = SASS_NONE;
	struct cubin *c;
	struct func *f;

	if (!s || !function)
		return SASS_NONE;
	pthread_mutex_lock(&s->lock);
	HASH_FIND(hh, s->cubins, &crc, sizeof(crc), c);
	if (!c || c->failed)
		goto out;
	HASH_FIND_STR(c->funcs, function, f);
	if (!f) {
		size_t n = strlen(function);

		if (n >= NAME_MAX_BYTES || s->st.insns >= SASS_MAX_INSNS)
			goto out;
		f = xcalloc(1, sizeof(*f) + n + 1);
		memcpy(f->name, function, n + 1);
		f->state = SASS_PENDING;
		HASH_ADD_KEYPTR(hh, c->funcs, f->name, n, f);
		c->waiting++;
		pthread_cond_signal(&s->work);
	}
	st = f->state;
	if (st == SASS_READY) {
		struct insn key = {.offset = offset}, *hit;

		hit = bsearch(&key, f->insns, f->n, sizeof(*f->insns), cmp_insn);
		if (hit)
			*mnemonic = hit->mnemonic;
		else
			st = SASS_NONE;
	}
out:
	pthread_mutex_unlock(&s->lock);
	return st;
}

bool sass__wait(struct sass *s, int ms)
{
	struct timespec until;
	bool done;

	if (!s)
		return true;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ms / MS_PER_SEC;
	until.tv_nsec += (long)(ms % MS_PER_SEC) * NS_PER_MS;
	if (until.tv_nsec >= NS_PER_SEC) {
		until.tv_sec++;
		until.tv_nsec -= NS_PER_SEC;
	}
	pthread_mutex_lock(&s->lock);
	while ((s->busy || next_cubin(s)) &&
	       pthread_cond_timedwait(&s->idle, &s->lock, &until) != ETIMEDOUT)
		;
	done = !s->busy && !next_cubin(s);
	pthread_mutex_unlock(&s->lock);
	return done;
}

void sass__stats(struct sass *s, struct sass_stats *out)
{
	if (!s) {
		*out = (struct sass_stats){0};
		return;
	}
	pthread_mutex_lock(&s->lock);
	*out = s->st;
	pthread_mutex_unlock(&s->lock);
}
