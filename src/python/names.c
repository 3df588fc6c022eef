/* names.c: the names of Python frames, read while their process lives.
 * See names.h. */
#include "python/names.h"
#include "python/python.h"

#include "common/log.h"
#include "common/xalloc.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <unistd.h>

struct name_key {
	uint32_t pid;
	uint32_t pad;
	uint64_t ip;
};

struct name_ent {
	UT_hash_handle hh;
	struct name_key key;
	struct py_name n;
};

/* A process's interpreter, found once. */
struct pid_ent {
	UT_hash_handle hh;
	uint32_t pid;
	bool found;
	struct unw_py_layout layout;
	char *script_dir;
};

struct py_names {
	struct name_ent *names;
	struct pid_ent *pids;
	size_t nnames, npids;
};

struct py_names *py_names__new(void)
{
	return xcalloc(1, sizeof(struct py_names));
}

static void free_name(struct name_ent *e)
{
	free((char *)e->n.name);
	free((char *)e->n.file);
	free(e);
}

static void free_pid(struct pid_ent *p)
{
	free(p->script_dir);
	free(p);
}

void py_names__free(struct py_names *pn)
{
	struct name_ent *e, *te;
	struct pid_ent *p, *tp;

	if (!pn)
		return;
	HASH_ITER(hh, pn->names, e, te)
	{
		HASH_DEL(pn->names, e);
		free_name(e);
	}
	HASH_ITER(hh, pn->pids, p, tp)
	{
		HASH_DEL(pn->pids, p);
		free_pid(p);
	}
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

/* The interpreter pid runs: the first executable file it maps that is
 * one. */
static void find_interp(struct pid_ent *p)
{
	char path[64], line[PATH_MAX + 128], err[256];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%" PRIu32 "/maps", p->pid);
	f = fopen(path, "re");
	while (f && !p->found && fgets(line, sizeof(line), f)) {
		char perms[8], *file = strchr(line, '/');
		struct py_interp in;

		if (sscanf(line, "%*s %7s", perms) != 1 || perms[2] != 'x' || !file)
			continue;
		file[strcspn(file, "\n")] = 0;
		/* Through the process's own view of its files. */
		snprintf(path, sizeof(path), "/proc/%" PRIu32 "/root", p->pid);
		{
			char full[PATH_MAX * 2];

			snprintf(full, sizeof(full), "%s%s", path, file);
			if (!py_inspect_file(full, &in, err, sizeof(err))) {
				p->layout = in.layout;
				p->found = true;
			}
		}
	}
	if (f)
		fclose(f);
}

static struct pid_ent *pid_of(struct py_names *pn, uint32_t pid)
{
	struct pid_ent *p;

	HASH_FIND(hh, pn->pids, &pid, sizeof(pid), p);
	if (p || pn->npids >= PY_PIDS_MAX)
		return p;
	p = xcalloc(1, sizeof(*p));
	p->pid = pid;
	find_interp(p);
	if (p->found)
		p->script_dir = script_dir(pid);
	HASH_ADD(hh, pn->pids, pid, sizeof(p->pid), p);
	pn->npids++;
	return p;
}

int py_names__load(struct py_names *pn, uint32_t pid, uint64_t ip)
{
	struct name_key k = {.pid = pid, .ip = ip};
	struct py_code_info ci;
	struct name_ent *e;
	struct pid_ent *p;
	char name[1024];
	int err;

	HASH_FIND(hh, pn->names, &k, sizeof(k), e);
	if (e)
		return 0;
	if (pn->nnames >= PY_NAMES_MAX)
		return -ENOSPC;
	p = pid_of(pn, pid);
	if (!p || !p->found)
		return -ENOENT;
	err = py_code_read((pid_t)pid, ip & ((1ull << UNW_PY_ADDR_BITS) - 1),
			   (uint32_t)((ip >> UNW_PY_ADDR_BITS) & UNW_PY_INSTR_MAX), &p->layout,
			   &ci);
	if (err)
		return err;
	e = xcalloc(1, sizeof(*e));
	e->key = k;
	e->n.name =
		xstrdup(py_frame_name(ci.qualname, ci.filename, p->script_dir, name, sizeof(name)));
	e->n.file = xstrdup(ci.filename);
	e->n.line = ci.line;
	e->n.firstlineno = ci.firstlineno;
	HASH_ADD(hh, pn->names, key, sizeof(e->key), e);
	pn->nnames++;
	return 0;
}

const struct py_name *py_names__get(struct py_names *pn, uint32_t pid, uint64_t ip)
{
	struct name_key k = {.pid = pid, .ip = ip};
	struct name_ent *e;

	HASH_FIND(hh, pn->names, &k, sizeof(k), e);
	return e ? &e->n : NULL;
}

void py_names__forget_pid(struct py_names *pn, uint32_t pid)
{
	struct name_ent *e, *te;
	struct pid_ent *p;

	HASH_ITER(hh, pn->names, e, te)
	{
		if (e->key.pid == pid) {
			HASH_DEL(pn->names, e);
			free_name(e);
			pn->nnames--;
		}
	}
	HASH_FIND(hh, pn->pids, &pid, sizeof(pid), p);
	if (p) {
		HASH_DEL(pn->pids, p);
		free_pid(p);
		pn->npids--;
	}
}
