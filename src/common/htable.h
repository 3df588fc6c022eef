/* htable.h: what the users of uthash (Debian's uthash-dev: intrusive hash
 * tables keyed by a field of each entry) share -- the one way a table is
 * emptied, each entry taken out and then disposed of. */
#ifndef SONDE_COMMON_HTABLE_H
#define SONDE_COMMON_HTABLE_H

#include <uthash.h>

/* Takes every entry out of the table head (linked through the handle hh),
 * names it el and runs the statement that follows (freeing it):
 *   HTABLE_CLEAR(hh, a->stacks, e, free(e));
 */
#define HTABLE_CLEAR(hh, head, el, ...)                                                            \
	do {                                                                                       \
		__typeof__(head) el, el##_next_;                                                   \
		HASH_ITER(hh, head, el, el##_next_)                                                \
		{                                                                                  \
			HASH_DELETE(hh, head, el);                                                 \
			__VA_ARGS__;                                                               \
		}                                                                                  \
	} while (0)

#endif
