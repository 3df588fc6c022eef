/* profile_internal.h: what the writers of src/profile (pprof.c,
 * speedscope.c) share beyond profile.h: the grouping of a profile's
 * locations into functions, which pprof writes as its Function table and
 * speedscope as its shared frames. Not for use outside src/profile. */
#ifndef SONDE_PROFILE_PROFILE_INTERNAL_H
#define SONDE_PROFILE_PROFILE_INTERNAL_H

#include <stdint.h>
#include <sys/types.h>

#include "profile/profile.h"

/* A distinct (display name, module) among a profile's locations, as string
 * indices. */
struct prof_func {
	uint32_t name, module, file, start_line;
	uint32_t line; /* with by_line: the locations' line */
};

/* Groups p's locations by (name, module, file, start_line), and by line
 * too when by_line (speedscope's frames), in that order: funcs[0..n) gets
 * the distinct pairs, loc_func[i] the 0-based function of location i. Both
 * arrays are the caller's and hold p->nlocs entries. Returns n, or -ENOMEM
 * (nothing written then). */
ssize_t profile__functions(const struct profile *p, struct prof_func *funcs, uint32_t *loc_func,
			   bool by_line);

#endif
