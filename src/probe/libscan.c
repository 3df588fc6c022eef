/* libscan.c: library classification for the GPU probes, and their view of
 * the ELF lookups and maps walk of src/symbolize/ (elf.h, maps.h), which
 * read the files. See libscan.h for the contract. */
#include "probe/libscan.h"

#include <ctype.h>
#include <string.h>

#include "symbolize/elf.h"
#include "symbolize/maps.h"

/* A library name matches a stem when it is the stem followed by the end or
 * a version suffix: "libcuda.so" and "libcuda.so.580.65" do, and
 * "libcuda.so-old" does not. */
static bool stem_matches(const char *base, const char *stem)
{
	size_t n = strlen(stem);

	if (strncmp(base, stem, n))
		return false;
	base += n;
	if (!*base)
		return true;
	if (*base != '.')
		return false;
	for (base++; *base; base++)
		if (!isdigit((unsigned char)*base) && *base != '.')
			return false;
	return true;
}

unsigned libscan_classify(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	if (stem_matches(base, "libcudart.so"))
		return LIBSCAN_RT;
	if (stem_matches(base, "libcuda.so"))
		return LIBSCAN_DRV;
	if (stem_matches(base, "libnccl.so"))
		return LIBSCAN_NCCL;
	if (stem_matches(base, "libtorch_cpu.so"))
		return LIBSCAN_TORCH;
	if (stem_matches(base, "libsonde_cupti.so"))
		return LIBSCAN_CUPTI;
	return 0;
}

struct each_map {
	libscan_map_fn fn;
	void *ctx;
};

static int on_file_map(const struct maps_line *l, void *arg)
{
	struct each_map *em = arg;
	struct libscan_map m = {
		.start = l->start,
		.end = l->end,
		.pgoff = l->pgoff,
		.dev_major = l->dev_major,
		.dev_minor = l->dev_minor,
		.inode = l->ino,
		.deleted = l->deleted,
		.path = l->path,
	};

	memcpy(m.perms, l->perms, sizeof(m.perms));
	return em->fn(em->ctx, &m);
}

int libscan_each_map(uint32_t pid, libscan_map_fn fn, void *ctx)
{
	struct each_map em = {fn, ctx};

	return maps__each_file(pid, on_file_map, &em);
}
