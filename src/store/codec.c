/* codec.c: the byte format of a window row of the SQLite store -- the `dir`
 * listing a row's series (delta-coded ids, each with the byte length of its
 * part of `data` and its value total) and the `data` sections of sorted
 * (stack id, value) pairs -- written by put_windows (sqlite_put.c) and read
 * by every read (sqlite_query.c). The readers check every length and
 * varint, since a damaged file is outside input too;
 * tests/fuzz/fuzz_store.c holds them to it. */
#include "store/store_internal.h"

#include <errno.h>
#include <stdlib.h>

int store_buf__reserve(struct store_buf *b, size_t more)
{
	size_t cap;
	uint8_t *p;

	if (more > SIZE_MAX - b->len)
		return -ENOMEM;
	if (b->len + more <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 4096;
	while (cap < b->len + more) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

void store_buf__free(struct store_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

int codec_put_pairs(struct store_buf *b, const struct store_pair *p, size_t n)
{
	uint32_t prev = 0;
	size_t i;
	int err;

	if (n > SIZE_MAX / (2 * VARINT_MAX))
		return -ENOMEM;
	err = store_buf__reserve(b, n * 2 * VARINT_MAX);
	if (err)
		return err;
	for (i = 0; i < n; i++) {
		uint64_t delta = p[i].id - prev;

		if (p[i].value < 1 || (i && p[i].id <= prev))
			return -EINVAL;
		/* A value of 1 -- most of them, a stack sampled once in the
		 * window -- rides in the low bit of the id's delta. */
		if (p[i].value == 1) {
			b->len += varint_put(b->p + b->len, delta << 1 | 1);
		} else {
			b->len += varint_put(b->p + b->len, delta << 1);
			b->len += varint_put(b->p + b->len, (uint64_t)p[i].value);
		}
		prev = p[i].id;
	}
	return 0;
}

int codec_next_pair(const uint8_t **p, const uint8_t *end, uint32_t *id, int64_t *value)
{
	uint64_t d, v = 1;

	if (*p >= end)
		return 0;
	if (!varint_get(p, end, &d))
		return -EIO;
	if (!(d & 1) && (!varint_get(p, end, &v) || v < 2 || v > INT64_MAX))
		return -EIO;
	d >>= 1;
	if (d > UINT32_MAX - *id)
		return -EIO;
	*id += (uint32_t)d;
	*value = (int64_t)v;
	return 1;
}

int codec_put_dir(struct store_buf *b, const struct codec_dir_ent *e, size_t n)
{
	uint32_t prev = 0;
	size_t i;
	int err;

	if (n > SIZE_MAX / (3 * VARINT_MAX) - 1)
		return -ENOMEM;
	err = store_buf__reserve(b, (n * 3 + 1) * VARINT_MAX);
	if (err)
		return err;
	b->len += varint_put(b->p + b->len, n);
	for (i = 0; i < n; i++) {
		if (e[i].total < 0 || (i && e[i].sid <= prev))
			return -EINVAL;
		b->len += varint_put(b->p + b->len, e[i].sid - prev);
		b->len += varint_put(b->p + b->len, e[i].len);
		b->len += varint_put(b->p + b->len, (uint64_t)e[i].total);
		prev = e[i].sid;
	}
	return 0;
}

int codec_dir_begin(struct codec_dir_iter *it, const void *dir, size_t len, size_t datalen)
{
	it->p = dir;
	it->end = it->p + (dir ? len : 0);
	it->off = it->len = 0;
	it->sid = 0;
	it->datalen = datalen;
	if (!dir || !varint_get(&it->p, it->end, &it->left))
		return -EIO;
	return 0;
}

int codec_dir_next(struct codec_dir_iter *it, struct codec_dir_ent *e)
{
	uint64_t d, len, total;

	if (!it->left)
		return it->p == it->end ? 0 : -EIO;
	if (!varint_get(&it->p, it->end, &d) || !varint_get(&it->p, it->end, &len) ||
	    !varint_get(&it->p, it->end, &total) || d > UINT32_MAX - it->sid || total > INT64_MAX)
		return -EIO;
	it->off += it->len;
	if (len > it->datalen || it->off > it->datalen - len)
		return -EIO;
	it->len = len;
	it->sid += (uint32_t)d;
	it->left--;
	e->sid = it->sid;
	e->off = it->off;
	e->len = len;
	e->total = (int64_t)total;
	return 1;
}
