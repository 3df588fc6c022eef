/* service.c: service names from --service-by rules and what /proc says of
 * each process, cached per pid. See service.h. */
#include "agent/service.h"
#include "common/htable.h"
#include "common/log.h"
#include "common/utf8.h"
#include "common/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <unistd.h>

#define MAX_PIDS 65536	    /* processes whose service is kept */
#define MAX_ENV_NAME 128    /* bytes of an env: rule's variable name */
#define MALFORMED_LOGGED 10 /* malformed files logged, then only counted */

enum rule_kind { RULE_ENV, RULE_UNIT, RULE_CGROUP, RULE_PROCESS };

struct rule {
	enum rule_kind kind;
	char env[MAX_ENV_NAME + 1]; /* RULE_ENV: the variable */
};

/* What /proc said of a process: the rule that yielded its name. */
struct svc_ent {
	UT_hash_handle hh;
	uint32_t pid;
	int rule; /* index into rules; -1: none (process rules are read per call) */
	bool exited;
	char comm[16];			  /* the process's name when /proc was read */
	char value[SERVICE_NAME_MAX + 1]; /* of an env, unit or cgroup rule */
};

struct service_namer {
	struct rule rules[SERVICE_MAX_RULES];
	int nrules;
	bool need_env, need_cgroup;
	struct svc_ent *ents;
	size_t nents;
	struct svc_ent scratch; /* a process past MAX_PIDS, resolved per call */
	char *env_buf, *cg_buf;
	struct service_namer_stats st;
};

/* ---- the rules ---- */

static bool env_name_valid(const char *s, size_t n)
{
	if (!n || n > MAX_ENV_NAME ||
	    !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	return true;
}

/* Parses spec into rules (may be NULL: check only). 0 or -EINVAL. */
static int parse_spec(const char *spec, struct rule *rules, int *nrules, char *err, size_t errlen)
{
	const char *p = spec;
	int n = 0;

	if (!spec || !*spec) {
		snprintf(err, errlen,
			 "--service-by is empty: expected a comma list of env:NAME, "
			 "unit, cgroup and process");
		return -EINVAL;
	}
	for (;;) {
		size_t len = strcspn(p, ",");
		struct rule r = {0};

		if (!len) {
			snprintf(
				err, errlen,
				"--service-by '%.200s' has an empty rule: expected a comma list of "
				"env:NAME, unit, cgroup and process",
				spec);
			return -EINVAL;
		}
		if (n == SERVICE_MAX_RULES) {
			snprintf(err, errlen, "--service-by has more than %d rules",
				 SERVICE_MAX_RULES);
			return -EINVAL;
		}
		if (len >= 4 && !strncmp(p, "env:", 4)) {
			if (!env_name_valid(p + 4, len - 4)) {
				snprintf(err, errlen,
					 "--service-by: '%.*s' is not an environment variable's "
					 "name ([A-Za-z_][A-Za-z0-9_]*, at most %d bytes)",
					 (int)(len - 4 > 200 ? 200 : len - 4), p + 4, MAX_ENV_NAME);
				return -EINVAL;
			}
			r.kind = RULE_ENV;
			memcpy(r.env, p + 4, len - 4);
		} else if (len == 4 && !strncmp(p, "unit", 4)) {
			r.kind = RULE_UNIT;
		} else if (len == 6 && !strncmp(p, "cgroup", 6)) {
			r.kind = RULE_CGROUP;
		} else if (len == 7 && !strncmp(p, "process", 7)) {
			r.kind = RULE_PROCESS;
		} else {
			snprintf(err, errlen,
				 "--service-by: unknown rule '%.*s': expected env:NAME, unit, "
				 "cgroup "
				 "or process",
				 (int)(len > 200 ? 200 : len), p);
			return -EINVAL;
		}
		if (rules)
			rules[n] = r;
		n++;
		if (!p[len])
			break;
		p += len + 1;
	}
	if (nrules)
		*nrules = n;
	return 0;
}

int service_spec_check(const char *spec, char *err, size_t errlen)
{
	return parse_spec(spec, NULL, NULL, err, errlen);
}

/* ---- the parsers ---- */

/* Whether s[0..n) can be a label's value: UTF-8 without control
 * characters. */
static bool text_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return utf8_valid(s, n);
}

int service_environ_value(const char *buf, size_t len, const char *name, char *out, size_t outlen,
			  char *err, size_t errlen)
{
	size_t nlen = strlen(name), off = 0;

	while (off < len) {
		const char *e = buf + off, *end = memchr(e, '\0', len - off);
		size_t elen, vlen;

		if (!end)
			break; /* cut by the read's bound */
		elen = (size_t)(end - e);
		off += elen + 1;
		if (elen <= nlen || e[nlen] != '=' || memcmp(e, name, nlen))
			continue;
		/* The first one is getenv()'s. */
		vlen = elen - nlen - 1;
		if (!vlen)
			return 0;
		if (vlen >= outlen) {
			snprintf(err, errlen, "%s has a value of %zu bytes: at most %zu", name,
				 vlen, outlen - 1);
			return -EINVAL;
		}
		if (!text_ok(e + nlen + 1, vlen)) {
			snprintf(err, errlen,
				 "%s has a value that is not UTF-8 text (a control character or "
				 "an invalid byte)",
				 name);
			return -EINVAL;
		}
		memcpy(out, e + nlen + 1, vlen);
		out[vlen] = '\0';
		return 1;
	}
	return 0;
}

int service_parse_environ(const char *buf, size_t len, const char *name, char *out, size_t outlen,
			  char *err, size_t errlen)
{
	return service_environ_value(buf, len, name, out,
				     outlen < SERVICE_NAME_MAX + 1 ? outlen : SERVICE_NAME_MAX + 1,
				     err, errlen);
}

int service_parse_cgroup(const char *buf, size_t len, char *out, size_t outlen, char *err,
			 size_t errlen)
{
	static const char deleted[] = " (deleted)";
	size_t off = 0, lineno = 0;
	int found = 0;

	if (memchr(buf, '\0', len)) {
		snprintf(err, errlen, "a NUL byte in the cgroup file");
		return -EINVAL;
	}
	while (off < len) {
		const char *l = buf + off, *nl = memchr(l, '\n', len - off);
		size_t llen = nl ? (size_t)(nl - l) : len - off;
		const char *c1, *c2, *path;
		size_t plen;

		off += llen + 1;
		lineno++;
		if (!llen)
			continue;
		c1 = memchr(l, ':', llen);
		c2 = c1 ? memchr(c1 + 1, ':', llen - (size_t)(c1 + 1 - l)) : NULL;
		if (!c2 || c1 == l) {
			snprintf(err, errlen,
				 "line %zu of the cgroup file is not ID:CONTROLLERS:PATH", lineno);
			return -EINVAL;
		}
		for (const char *d = l; d < c1; d++)
			if (*d < '0' || *d > '9') {
				snprintf(err, errlen,
					 "line %zu of the cgroup file has a hierarchy ID that is "
					 "not a number",
					 lineno);
				return -EINVAL;
			}
		path = c2 + 1;
		plen = llen - (size_t)(path - l);
		if (!plen || *path != '/') {
			snprintf(err, errlen,
				 "line %zu of the cgroup file has a path that does not start "
				 "with '/'",
				 lineno);
			return -EINVAL;
		}
		if (!text_ok(path, plen)) {
			snprintf(err, errlen,
				 "line %zu of the cgroup file has a path that is not UTF-8 text",
				 lineno);
			return -EINVAL;
		}
		/* The v2 hierarchy: ID 0 and no controllers. The lines after it
		 * are checked too: a file with a malformed line is not trusted. */
		if (found || c1 - l != 1 || *l != '0' || c2 != c1 + 1)
			continue;
		if (plen > strlen(deleted) &&
		    !memcmp(path + plen - strlen(deleted), deleted, strlen(deleted)))
			plen -= strlen(deleted);
		if (plen >= outlen) {
			snprintf(err, errlen, "the cgroup path is %zu bytes long: at most %zu",
				 plen, outlen ? outlen - 1 : 0);
			return -EINVAL;
		}
		memcpy(out, path, plen);
		out[plen] = '\0';
		found = 1;
	}
	return found;
}

/* Copies component [s, s + n) into out when it fits a name. */
static int put_name(const char *s, size_t n, char *out, size_t outlen)
{
	if (!n || n > SERVICE_NAME_MAX || n >= outlen)
		return 0;
	memcpy(out, s, n);
	out[n] = '\0';
	return 1;
}

int service_unit_of(const char *path, char *out, size_t outlen)
{
	static const char suffix[] = ".service";
	const size_t slen = sizeof(suffix) - 1;
	const char *p = path, *best = NULL;
	size_t best_len = 0;

	while (*p) {
		size_t n = strcspn(p, "/");

		if (n > slen && !memcmp(p + n - slen, suffix, slen)) {
			best = p;
			best_len = n - slen;
		}
		p += n;
		if (*p)
			p++;
	}
	return best ? put_name(best, best_len, out, outlen) : 0;
}

int service_cgroup_leaf(const char *path, char *out, size_t outlen)
{
	size_t n = strlen(path);
	const char *slash;

	while (n && path[n - 1] == '/')
		n--;
	if (!n)
		return 0;
	slash = memrchr(path, '/', n);
	if (slash)
		return put_name(slash + 1, n - (size_t)(slash + 1 - path), out, outlen);
	return put_name(path, n, out, outlen);
}

/* ---- the namer ---- */

struct service_namer *service_namer__new(const char *spec, char *err, size_t errlen)
{
	struct service_namer *sn = xcalloc(1, sizeof(*sn));

	if (parse_spec(spec ? spec : SERVICE_BY_DEFAULT, sn->rules, &sn->nrules, err, errlen)) {
		free(sn);
		errno = EINVAL;
		return NULL;
	}
	for (int i = 0; i < sn->nrules; i++) {
		sn->need_env |= sn->rules[i].kind == RULE_ENV;
		sn->need_cgroup |=
			sn->rules[i].kind == RULE_UNIT || sn->rules[i].kind == RULE_CGROUP;
	}
	if (sn->need_env)
		sn->env_buf = xmalloc(SERVICE_ENVIRON_MAX);
	if (sn->need_cgroup)
		sn->cg_buf = xmalloc(SERVICE_CGROUP_MAX);
	return sn;
}

void service_namer__free(struct service_namer *sn)
{
	if (!sn)
		return;
	HTABLE_CLEAR(hh, sn->ents, e, free(e));
	free(sn->env_buf);
	free(sn->cg_buf);
	free(sn);
}

ssize_t service_read_proc(uint32_t pid, const char *file, char *buf, size_t cap)
{
	char path[64];
	size_t len = 0;
	int fd;

	snprintf(path, sizeof(path), "/proc/%u/%s", pid, file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (len < cap) {
		ssize_t n = read(fd, buf + len, cap - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = -errno;

			close(fd);
			return err;
		}
		if (!n)
			break;
		len += (size_t)n;
	}
	close(fd);
	return (ssize_t)len;
}

static void malformed(struct service_namer *sn, uint32_t pid, const char *file, const char *why)
{
	sn->st.malformed++;
	if (sn->st.malformed <= MALFORMED_LOGGED)
		pr_warn("can't name the service of pid %u from /proc/%u/%s: %s -- the next rule "
			"of --service-by names it%s",
			pid, pid, file, why,
			sn->st.malformed == MALFORMED_LOGGED ? " (further such files are counted, "
							       "not logged)"
							     : "");
}

/* The cgroup v2 path of pid into path; false when there is none. */
static bool cgroup_path(struct service_namer *sn, uint32_t pid, char *path, size_t size)
{
	char why[256];
	ssize_t len = service_read_proc(pid, "cgroup", sn->cg_buf, SERVICE_CGROUP_MAX);
	int rc;

	if (len < 0)
		return false; /* gone, or a kernel without cgroups */
	sn->st.reads++;
	rc = service_parse_cgroup(sn->cg_buf, (size_t)len, path, size, why, sizeof(why));
	if (rc < 0)
		malformed(sn, pid, "cgroup", why);
	return rc > 0;
}

/* Reads what the rules need of pid into e: the first /proc rule that
 * yields, up to the first process rule when comm names the process. */
static void resolve(struct service_namer *sn, struct svc_ent *e, const char *comm)
{
	char path[4096], why[256];
	bool env_read = false, cg_read = false, have_cg = false;
	ssize_t env_len = 0;

	e->rule = -1;
	for (int i = 0; i < sn->nrules; i++) {
		const struct rule *r = &sn->rules[i];
		int rc = 0;

		switch (r->kind) {
		case RULE_PROCESS:
			if (comm && *comm)
				return;
			continue;
		case RULE_ENV:
			if (!env_read) {
				env_read = true;
				env_len = service_read_proc(e->pid, "environ", sn->env_buf,
							    SERVICE_ENVIRON_MAX);
				if (env_len >= 0)
					sn->st.reads++;
			}
			if (env_len <= 0)
				continue;
			rc = service_parse_environ(sn->env_buf, (size_t)env_len, r->env, e->value,
						   sizeof(e->value), why, sizeof(why));
			if (rc < 0)
				malformed(sn, e->pid, "environ", why);
			break;
		case RULE_UNIT:
		case RULE_CGROUP:
			if (!cg_read) {
				cg_read = true;
				have_cg = cgroup_path(sn, e->pid, path, sizeof(path));
			}
			if (!have_cg)
				continue;
			rc = r->kind == RULE_UNIT
				     ? service_unit_of(path, e->value, sizeof(e->value))
				     : service_cgroup_leaf(path, e->value, sizeof(e->value));
			break;
		}
		if (rc > 0) {
			e->rule = i;
			return;
		}
	}
}

const char *service_namer__name(struct service_namer *sn, uint32_t pid, const char *comm)
{
	struct svc_ent *e;

	HASH_FIND(hh, sn->ents, &pid, sizeof(pid), e);
	/* Another name: the process exec'ed (its record may not have come
	 * yet, or was lost), or renamed itself; read it again. */
	if (e && strncmp(e->comm, comm ? comm : "", sizeof(e->comm) - 1)) {
		service_namer__forget(sn, pid);
		e = NULL;
	}
	if (!e) {
		if (sn->nents < MAX_PIDS) {
			e = xcalloc(1, sizeof(*e));
			e->pid = pid;
			HASH_ADD(hh, sn->ents, pid, sizeof(e->pid), e);
			sn->nents++;
		} else {
			e = &sn->scratch;
			e->pid = pid;
		}
		snprintf(e->comm, sizeof(e->comm), "%s", comm ? comm : "");
		resolve(sn, e, comm);
	}
	/* The rules in order: those /proc answered are in e, the process
	 * rules answer from comm. */
	for (int i = 0; i < sn->nrules; i++) {
		if (i == e->rule)
			return e->value;
		if (sn->rules[i].kind == RULE_PROCESS && comm && *comm)
			return comm;
	}
	return NULL;
}

void service_namer__forget(struct service_namer *sn, uint32_t pid)
{
	struct svc_ent *e;

	HASH_FIND(hh, sn->ents, &pid, sizeof(pid), e);
	if (!e)
		return;
	HASH_DEL(sn->ents, e);
	sn->nents--;
	free(e);
}

void service_namer__exited(struct service_namer *sn, uint32_t pid)
{
	struct svc_ent *e;

	HASH_FIND(hh, sn->ents, &pid, sizeof(pid), e);
	if (e)
		e->exited = true;
}

void service_namer__forget_exited(struct service_namer *sn)
{
	struct svc_ent *e, *tmp;

	HASH_ITER(hh, sn->ents, e, tmp)
	{
		if (!e->exited)
			continue;
		HASH_DEL(sn->ents, e);
		sn->nents--;
		free(e);
	}
}

void service_namer__stats(const struct service_namer *sn, struct service_namer_stats *out)
{
	*out = sn->st;
	out->cached = sn->nents;
}
