/* htable.h: what the users of uthash (Debian's uthash-dev: intrusive hash
 * tables keyed by a field of each entry) share -- a word-at-a-time hash,
 * and the one way a table is emptied, each entry taken out and then
 * disposed of. */
#ifndef SONDE_COMMON_HTABLE_H
#define SONDE_COMMON_HTABLE_H

#include "common/hash.h"

/* uthash's default hash (Jenkins) works a byte at a time, and hashing is
 * much of the cost of a lookup by a long key (a stack's frames): the
 * word-at-a-time one of hash.h instead, for every file that includes this
 * before uthash.h. */
static inline uint32_t htable_hash32(uint64_t h)
{
	return (uint32_t)(h ^ (h >> 32));
}
#ifndef HASH_FUNCTION
#define HASH_FUNCTION(key, keylen, hashv) ((hashv) = htable_hash32(hash_bytes((key), (keylen), 0)))
#endif
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
