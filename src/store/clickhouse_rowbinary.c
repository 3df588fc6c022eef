/* clickhouse_rowbinary.c: the ClickHouse store's encodings -- SQL string
 * literals, and RowBinary, the binary row format both ways: writers for
 * puts, and a reader that checks every bound, since an answer is outside
 * data. No I/O (clickhouse_http.c is the transport). */
#include "store/clickhouse_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int ch_sql_str(struct sbuf *b, const char *s)
{
	int err = sbuf__puts(b, "'");

	for (; !err && *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '\'' || c == '\\')
			err = sbuf__printf(b, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			err = sbuf__printf(b, "\\x%02x", c);
		else
			err = sbuf__add(b, s, 1);
	}
	return err ? err : sbuf__puts(b, "'");
}

/* ---- RowBinary ---- */

int rb_varint(struct sbuf *b, uint64_t v)
{
	uint8_t buf[VARINT_MAX];

	return sbuf__add(b, buf, varint_put(buf, v));
}

int rb_str(struct sbuf *b, const char *s, size_t len)
{
	int err = rb_varint(b, len);

	return err ? err : sbuf__add(b, s, len);
}

static const void *take(struct rb_reader *r, size_t n)
{
	const uint8_t *p = r->p;

	if (r->bad || (size_t)(r->end - r->p) < n) {
		r->bad = true;
		return NULL;
	}
	r->p += n;
	return p;
}

uint64_t rbr_u64(struct rb_reader *r)
{
	const void *p = take(r, 8);
	uint64_t v = 0;

	if (p)
		memcpy(&v, p, 8);
	return v;
}

uint32_t rbr_u32(struct rb_reader *r)
{
	const void *p = take(r, 4);
	uint32_t v = 0;

	if (p)
		memcpy(&v, p, 4);
	return v;
}

uint8_t rbr_u8(struct rb_reader *r)
{
	const uint8_t *p = take(r, 1);

	return p ? *p : 0;
}

double rbr_f64(struct rb_reader *r)
{
	const void *p = take(r, 8);
	double v = 0;

	if (p)
		memcpy(&v, p, 8);
	return v;
}

uint64_t rbr_count(struct rb_reader *r, uint64_t max)
{
	uint64_t v = 0;

	if (r->bad || !varint_get(&r->p, r->end, &v) || v > max) {
		r->bad = true;
		return 0;
	}
	return v;
}

const char *rbr_str(struct rb_reader *r, size_t *len)
{
	uint64_t n = rbr_count(r, CH_MAX_ANSWER);
	const char *p = n ? take(r, (size_t)n) : (r->bad ? NULL : "");

	*len = p ? (size_t)n : 0;
	return p ? p : "";
}
