/* json.c: the jansson helpers of json.h. */
#include "common/json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

json_t *json_string_lossy(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	json_t *j;
	char *fixed;

	if (!s)
		return json_string("");
	if (utf8_valid(s, n))
		return json_stringn(s, n);
	fixed = utf8_repair(s, n);
	if (!fixed)
		return NULL;
	j = json_string(fixed);
	free(fixed);
	return j;
}

static int sbuf_json_cb(const char *buffer, size_t size, void *data)
{
	return sbuf__add(data, buffer, size) ? -1 : 0;
}

int sbuf__json(struct sbuf *b, const json_t *j)
{
	size_t before = b->len;

	if (json_dump_callback(j, sbuf_json_cb, b,
			       JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(12))) {
		b->len = before;
		if (b->buf)
			b->buf[b->len] = '\0';
		return -ENOMEM;
	}
	return 0;
}
