/* names.c: the names of Python frames, read while their process lives.
 * See names.h. */
#include "python/names.h"
#include "python/python.h"

#include "common/htable.h"
#include "common/xalloc.h"
#include "symbolize/maps.h"
#include "symbolize/symbolize.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <unistd.h>

/* A Python frame's name, by the frame (code object and instruction). */
struct name_ent {
	UT_hash_handle hh;
	UT_hash_handle hh_code; /* in by_code, while it is its code object's latest */
	uint64_t ip, code;
	struct py_name n;
};

/* A process: its interpreter, found once, and its frames' names. */
struct pid_ent {
	UT_hash_handle hh;
	uint32_t pid;
	bool found;
	struct unw_py_layout layout;
	char *script_dir;
	struct name_ent *names;
	/* The latest name read of each code object (by address), for a frame
	 * whose code object is gone when it is read: a module's body, freed
	 * once it has run (the script's own as the program ends). */
	struct name_ent *by_code;
};

/* An executable file looked at as a possible interpreter, by (dev, ino):
 * each is inspected once, whichever processes map it. */
struct file_key {
	uint64_t dev, ino;
};

struct file_ent {
	UT_hash_handle hh;
	struct file_key key;
	bool interp;
	struct unw_py_layout layout;
};

struct py_names {
	struct symbolizer_ext base; /* first: the symbolizer's extension is cast back */
	struct pid_ent *pids;
	struct file_ent *files;
	size_t nnames, npids, nfiles;
};

static void ext_forget_pid(struct symbolizer_ext *ext, uint32_t pid)
{
	py_names__forget_pid((struct py_names *)ext, pid);
}

static void ext_free(struct symbolizer_ext *ext)
{
	py_names__free((struct py_names *)ext);
}

struct py_names *py_names__new(void)
{
	struct py_names *pn = xcalloc(1, sizeof(*pn));

	pn->base = (struct symbolizer_ext){ext_forget_pid, ext_free};
	return pn;
}

struct py_names *symbolizer__python(struct symbolizer *s)
{
	struct py_names *pn = (struct py_names *)symbolizer__ext(s);

	if (!pn) {
		pn = py_names__new();
		symbolizer__attach(s, &pn->base);
	}
	return pn;
}

static void free_name(struct name_ent *e)
{
	free((char *)e->n.name);
	free((char *)e->n.file);
	free(e);
}

/* Drops p's names (counted off pn) and p. */
static void free_pid(struct py_names *pn, struct pid_ent *p)
{
	HASH_CLEAR(hh_code, p->by_code);
	HTABLE_CLEAR(hh, p->names, e, (pn->nnames--, free_name(e)));
	free(p->script_dir);
	free(p);
}

void py_names__free(struct py_names *pn)
{
	if (!pn)
		return;
	HTABLE_CLEAR(hh, pn->pids, p, free_pid(pn, p));
	HTABLE_CLEAR(hh, pn->files, f, free(f));
	free(pn);
}

/* The directory of the script pid runs ("python3 DIR/x.py"), resolved in
 * its working directory; NULL if it runs none. */
static char *script_dir(uint32_t pid)
{
	char path[64], buf[4096], cwd[PATH_MAX], full[PATH_MAX * 2], *arg, *end;
	ssize_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%" PRIu32 "/cmdline", pid);
	f = fopen(path, "re");
	if (!f)
		return NULL;
	n = (ssize_t)fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	if (n <= 0)
		return NULL;
	buf[n] = 0;
	end = buf + n;
	/* The first argument after the interpreter that is not an option. */
	for (arg = buf + strlen(buf) + 1; arg < end && *arg == '-'; arg += strlen(arg) + 1)
		if (!strcmp(arg, "-m") || !strcmp(arg, "-c"))
			return NULL;
	if (arg >= end || strlen(arg) < 4 || strcmp(arg + strlen(arg) - 3, ".py"))
		return NULL;
	if (arg[0] == '/') {
		snprintf(full, sizeof(full), "%s", arg);
	} else {
		snprintf(path, sizeof(path), "/proc/%" PRIu32 "/cwd", pid);
		n = readlink(path, cwd, sizeof(cwd) - 1);
		if (n < 0)
			return NULL;
		cwd[n] = 0;
		snprintf(full, sizeof(full), "%s/%s", cwd, arg);
	}
	return xstrdup(dirname(full));
}

#define PY_FILES_MAX 65536

struct find_ctx {
	struct py_names *pn;
	struct pid_ent *p;
};

/* Whether a mapping of the process is an interpreter (through its own view
 * of its files, whatever its mount namespace); stops at the first. */
static int find_interp_map(const struct maps_line *m, void *ctx)
{
	struct find_ctx *c = ctx;
	struct file_key k = {((uint64_t)m->dev_major << 20) | m->dev_minor, m->ino};
	char full[PATH_MAX + 64], err[256];
	struct file_ent *f, look = {.key = k};
	struct py_interp in;

	if (!m->exec)
		return 0;
	HASH_FIND(hh, c->pn->files, &k, sizeof(k), f);
	if (!f) {
		snprintf(full, sizeof(full), "/proc/%" PRIu32 "/root%s", c->p->pid, m->path);
		look.interp = !py_inspect_file(full, &in, err, sizeof(err));
		if (look.interp)
			look.layout = in.layout;
		f = &look;
		/* Past the bound, files are inspected each time. */
		if (c->pn->nfiles < PY_FILES_MAX) {
			f = xmalloc(sizeof(*f));
			*f = look;
			HASH_ADD(hh, c->pn->files, key, sizeof(f->key), f);
			c->pn->nfiles++;
		}
	}
	if (f->interp) {
		c->p->layout = f->layout;
		c->p->found = true;
	}
	return c->p->found;
}

/* The interpreter pid runs: the first executable file it maps that is
 * one. */
static void find_interp(struct py_names *pn, struct pid_ent *p)
{
	struct find_ctx c = {pn, p};

	maps__each_file(p->pid, find_interp_map, &c);
}

static struct pid_ent *pid_of(struct py_names *pn, uint32_t pid)
{
	struct pid_ent *p;

	HASH_FIND(hh, pn->pids, &pid, sizeof(pid), p);
	if (p || pn->npids >= PY_PIDS_MAX)
		return p;
	p = xcalloc(1, sizeof(*p));
	p->pid = pid;
	find_interp(pn, p);
	if (p->found)
		p->script_dir = script_dir(pid);
	HASH_ADD(hh, pn->pids, pid, sizeof(p->pid), p);
	pn->npids++;
	return p;
}

/* Adds ip's name to p: what ci says, or (ci NULL) what an earlier frame of
 * the same code object said, its line unknown. */
static void add_name(struct py_names *pn, struct pid_ent *p, uint64_t ip,
		     const struct py_code_info *ci, const struct name_ent *same)
{
	struct name_ent *e = xcalloc(1, sizeof(*e)), *old;
	char name[1024];

	e->ip = ip;
	e->code = ip & ((1ull << UNW_PY_ADDR_BITS) - 1);
	if (ci) {
		e->n.name = xstrdup(py_frame_name(ci->qualname, ci->filename, p->script_dir, name,
						  sizeof(name)));
		e->n.file = xstrdup(ci->filename);
		e->n.line = ci->line;
		e->n.firstlineno = ci->firstlineno;
		HASH_FIND(hh_code, p->by_code, &e->code, sizeof(e->code), old);
		if (old)
			HASH_DELETE(hh_code, p->by_code, old);
		HASH_ADD(hh_code, p->by_code, code, sizeof(e->code), e);
	} else {
		e->n.name = xstrdup(same->n.name);
		e->n.file = xstrdup(same->n.file);
		e->n.firstlineno = same->n.firstlineno;
	}
	HASH_ADD(hh, p->names, ip, sizeof(e->ip), e);
	pn->nnames++;
}

int py_names__load(struct py_names *pn, uint32_t pid, uint64_t ip)
{
	uint64_t code = ip & ((1ull << UNW_PY_ADDR_BITS) - 1);
	struct py_code_info ci;
	struct name_ent *e;
	struct pid_ent *p;
	int err;

	p = pid_of(pn, pid);
	if (!p || !p->found)
		return -ENOENT;
	HASH_FIND(hh, p->names, &ip, sizeof(ip), e);
	if (e)
		return 0;
	if (pn->nnames >= PY_NAMES_MAX)
		return -ENOSPC;
	err = py_code_read((pid_t)pid, code,
			   (uint32_t)((ip >> UNW_PY_ADDR_BITS) & UNW_PY_INSTR_MAX), &p->layout,
			   &ci);
	if (!err) {
		add_name(pn, p, ip, &ci, NULL);
		return 0;
	}
	/* No code object there now (or no process): the one an earlier
	 * frame at that address had. */
	HASH_FIND(hh_code, p->by_code, &code, sizeof(code), e);
	if (!e)
		return err;
	add_name(pn, p, ip, NULL, e);
	return 0;
}

const struct py_name *py_names__get(struct py_names *pn, uint32_t pid, uint64_t ip)
{
	struct name_ent *e = NULL;
	struct pid_ent *p;

	HASH_FIND(hh, pn->pids, &pid, sizeof(pid), p);
	if (p)
		HASH_FIND(hh, p->names, &ip, sizeof(ip), e);
	return e ? &e->n : NULL;
}

void py_names__forget_pid(struct py_names *pn, uint32_t pid)
{
	struct pid_ent *p;

	HASH_FIND(hh, pn->pids, &pid, sizeof(pid), p);
	if (!p)
		return;
	HASH_DEL(pn->pids, p);
	free_pid(pn, p);
	pn->npids--;
}
