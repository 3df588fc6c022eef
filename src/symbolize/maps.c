/* maps.c: the parser of /proc/PID/maps (see maps.h) for the symbolizer,
 * which keeps the executable mappings of each process it tracks, for the
 * Python frame names and the GPU probes (maps__each_file), and to find this
 * process's own [vdso] for the symbolizer and the unwinder (sym_own_vdso). */
#include "symbolize/maps.h"
#include "symbolize/symbolize_internal.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "common/log.h"

#define DELETED_SUFFIX " (deleted)"

/* Parses an unsigned number in base at *p; it must start with a digit (strtoull
 * would accept spaces and a sign) and end at one of the stop characters, or
 * at the end of the string when '\n' is a stop. Leaves *p past the stop. */
static int parse_num(char **p, int base, const char *stop, uint64_t *out)
{
	char *end;

	if (base == 16 ? !isxdigit((unsigned char)**p) : !isdigit((unsigned char)**p))
		return -EINVAL;
	errno = 0;
	*out = strtoull(*p, &end, base);
	if (errno)
		return -EINVAL;
	if (!*end) {
		if (!strchr(stop, '\n'))
			return -EINVAL;
		*p = end;
		return 0;
	}
	if (!strchr(stop, *end))
		return -EINVAL;
	*p = end + 1;
	return 0;
}

enum mapping_kind maps__classify(const char *path)
{
	/* The kernel's own name for anonymous code in a MMAP2 record. */
	if (!strcmp(path, "//anon"))
		return MAPPING_ANON;
	if (path[0] == '/')
		return MAPPING_FILE;
	if (!strcmp(path, "[vdso]"))
		return MAPPING_VDSO;
	if (!strcmp(path, "[vsyscall]"))
		return MAPPING_VSYSCALL;
	/* "", [heap], [stack], [anon:name], anon_inode:...: no file to read,
	 * but a JIT may have written code there. */
	return MAPPING_ANON;
}

int maps__parse_line(char *line, struct maps_line *out)
{
	uint64_t major, minor;
	char *p = line, *path;
	size_t len;

	memset(out, 0, sizeof(*out));
	if (parse_num(&p, 16, "-", &out->start) || parse_num(&p, 16, " ", &out->end) ||
	    out->end <= out->start)
		return -EINVAL;
	/* perms: exactly 4 characters such as "r-xp" */
	if (strlen(p) < 5 || p[4] != ' ' || !strchr("r-", p[0]) || !strchr("w-", p[1]) ||
	    !strchr("x-", p[2]) || !strchr("ps", p[3]))
		return -EINVAL;
	out->exec = p[2] == 'x';
	memcpy(out->perms, p, 4);
	p += 5;
	if (parse_num(&p, 16, " ", &out->pgoff) || parse_num(&p, 16, ":", &major) ||
	    parse_num(&p, 16, " ", &minor) || major > UINT32_MAX || minor > UINT32_MAX)
		return -EINVAL;
	out->dev_major = (uint32_t)major;
	out->dev_minor = (uint32_t)minor;
	/* The inode ends the line of an anonymous mapping. */
	if (parse_num(&p, 10, " \n", &out->ino))
		return -EINVAL;
	while (*p == ' ')
		p++;
	path = p;
	len = strlen(path);
	if (len && path[len - 1] == '\n')
		path[--len] = '\0';
	if (len >= strlen(DELETED_SUFFIX) &&
	    !strcmp(path + len - strlen(DELETED_SUFFIX), DELETED_SUFFIX)) {
		len -= strlen(DELETED_SUFFIX);
		path[len] = '\0';
		out->deleted = true;
	}
	out->path = path;
	out->path_len = len;
	out->kind = maps__classify(path);
	return 0;
}

int maps__parse(FILE *f, maps_cb cb, void *ctx)
{
	char line[SYMBOLIZE_MAX_LINE];
	struct maps_line ml;
	unsigned int n = 0, lineno = 0;
	int err = 0;

	while (fgets(line, sizeof(line), f)) {
		size_t len = strlen(line);

		lineno++;
		if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
			int c;

			while ((c = fgetc(f)) != EOF && c != '\n')
				;
			pr_debug("skipping maps line %u: longer than %d bytes", lineno,
				 SYMBOLIZE_MAX_LINE);
			continue;
		}
		if (maps__parse_line(line, &ml)) {
			pr_debug("skipping malformed maps line %u: %.80s", lineno, line);
			continue;
		}
		if (++n > SYMBOLIZE_MAX_MAPPINGS) {
			pr_debug("stopping at maps line %u: more than %u mappings", lineno,
				 SYMBOLIZE_MAX_MAPPINGS);
			break;
		}
		err = cb(&ml, ctx);
		if (err)
			goto cleanup;
	}
	if (ferror(f))
		err = -EIO;
cleanup:
	return err;
}

struct file_filter {
	maps_cb cb;
	void *ctx;
};

static int only_files(const struct maps_line *l, void *arg)
{
	struct file_filter *ff = arg;

	if (l->path[0] != '/' || !l->ino)
		return 0;
	return ff->cb(l, ff->ctx);
}

int maps__each_file(uint32_t pid, maps_cb cb, void *ctx)
{
	struct file_filter ff = {cb, ctx};
	char path[64];
	FILE *f;
	int err;

	snprintf(path, sizeof(path), "/proc/%" PRIu32 "/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	err = maps__parse(f, only_files, &ff);
	fclose(f);
	return err;
}

struct vdso_search {
	uint64_t base, size;
};

static int match_vdso(const struct maps_line *l, void *arg)
{
	struct vdso_search *vs = arg;

	if (l->kind != MAPPING_VDSO || l->start != vs->base)
		return 0;
	vs->size = l->end - l->start;
	return 1;
}

bool sym_own_vdso(uint64_t *base, uint64_t *size)
{
	struct vdso_search vs = {.base = getauxval(AT_SYSINFO_EHDR)};
	FILE *f;

	if (!vs.base)
		return false;
	f = fopen("/proc/self/maps", "re");
	if (!f) {
		pr_debug("can't read /proc/self/maps: %s -- no vdso", strerror(errno));
		return false;
	}
	maps__parse(f, match_vdso, &vs);
	fclose(f);
	*base = vs.base;
	*size = vs.size;
	return vs.size > 0;
}
