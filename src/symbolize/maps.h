/* maps.h: the one parser of /proc/PID/maps (maps.c). The symbolizer reads
 * each process's executable mappings with it; the Python frame names
 * (src/python/names.c: which file is the interpreter) and the GPU probes
 * (src/probe/libscan.h: which files are CUDA libraries) walk a process's
 * file mappings with maps__each_file(). A line is
 *   START-END PERMS PGOFF MAJOR:MINOR INODE [PATH[ (deleted)]]
 * and the parser trusts none of it: a malformed or overlong line is skipped
 * with a debug message, and the number of lines read is bounded. */
#ifndef SONDE_SYMBOLIZE_MAPS_H
#define SONDE_SYMBOLIZE_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum mapping_kind {
	MAPPING_FILE,	  /* backed by a file: path starts with '/' (memfd included) */
	MAPPING_ANON,	  /* anonymous, [heap], [anon:name], anon_inode:...: maybe JIT code */
	MAPPING_VDSO,	  /* [vdso] */
	MAPPING_VSYSCALL, /* [vsyscall] */
};

struct maps_line {
	uint64_t start, end, pgoff, ino;
	uint32_t dev_major, dev_minor;
	char perms[5]; /* "r-xp" */
	bool exec;
	bool deleted; /* the path had a " (deleted)" suffix (removed from path) */
	enum mapping_kind kind;
	const char *path; /* "" when anonymous; borrowed for the callback only */
	size_t path_len;
};

/* The kind of a mapping by its path ("/lib/x.so", "[vdso]", "//anon", ""). */
enum mapping_kind maps__classify(const char *path);

/* Parses one line (its '\n' optional) into out; path points into line,
 * which is modified. Returns 0 or -EINVAL for a malformed line. */
int maps__parse_line(char *line, struct maps_line *out);

/* Calls cb for each well-formed line of f in order; malformed or overlong
 * lines are skipped with a debug log. Stops after SYMBOLIZE_MAX_MAPPINGS
 * lines, or when cb returns non-zero, which is then returned. Returns 0,
 * -EIO if reading f failed (the process exited meanwhile), or cb's value. */
typedef int (*maps_cb)(const struct maps_line *line, void *ctx);
int maps__parse(FILE *f, maps_cb cb, void *ctx);

/* Calls cb for every file-backed mapping of pid (a path that starts with
 * '/' and a non-zero inode: anonymous and special mappings such as [heap]
 * are skipped), as maps__parse() does. Returns 0 at the end, cb's non-zero
 * value, or a negative errno when the maps can't be read (-ENOENT: the
 * process is gone). */
int maps__each_file(uint32_t pid, maps_cb cb, void *ctx);

#endif
