/* fuzz_store.c: libFuzzer target for what the embedded store (src/store/)
 * reads from outside: label sets and matchers from requests
 * (store_check_labels, store_check_matchers, their canonical encoding and
 * evaluation) and the window rows it reads back from its file, which a
 * damaged disk can make anything (codec.c). The first byte picks the part:
 *   0  labels: NUL-separated name, value, name, value...; checked, encoded,
 *      decoded back to the same set, and the raw bytes decoded as a key;
 *   1  matchers: (op byte, name, value) triples; the check must agree with
 *      compiling them, which must be quick, and they are evaluated;
 *   2  a row: a 2-byte dir length, the dir, the data; every series and pair
 *      read must lie inside the blobs;
 *   3  pairs and series made from the bytes are written and read back the
 *      same.
 * Seeds are in tests/fuzz/seeds/store/. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuzz_common.h"
#include "store/store_internal.h"

#define MAX_STRS 200

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	return 0;
}

/* Splits a NUL-terminated copy of data at its NULs. */
static size_t split(char *buf, size_t size, char **strs)
{
	size_t n = 0, i = 0;

	while (i <= size && n < MAX_STRS) {
		strs[n++] = buf + i;
		i += strlen(buf + i) + 1;
	}
	return n;
}

static void fuzz_labels(const uint8_t *data, size_t size)
{
	char *buf = fuzz_strdup(data, size), *strs[MAX_STRS];
	struct store_label labels[MAX_STRS / 2];
	struct labelset ls, back;
	size_t n = split(buf, size, strs) / 2, i, k;
	char err[256];
	int check, enc;

	for (i = 0; i < n; i++)
		labels[i] = (struct store_label){strs[2 * i], strs[2 * i + 1]};
	check = store_check_labels(labels, n, err, sizeof(err));
	FUZZ_CHECK(!check || (check == -EINVAL && strlen(err)), "check gave %d", check);
	enc = labelset__encode(&ls, labels, n, NULL, 0);
	FUZZ_CHECK(enc == check, "encode gave %d, check %d", enc, check);
	if (!enc) {
		FUZZ_CHECK(!labelset__decode(&back, ls.key, ls.len), "can't decode an encoding");
		FUZZ_CHECK(back.len == ls.len && back.n == ls.n &&
				   !memcmp(back.key, ls.key, ls.len),
			   "decoding changed the set");
		for (k = 1; k < back.n; k++)
			FUZZ_CHECK(strcmp(back.labels[k - 1].name, back.labels[k].name) < 0,
				   "labels not sorted");
		for (i = 0; i < n; i++)
			FUZZ_CHECK(!strcmp(labels_get(back.labels, back.n, labels[i].name),
					   labels[i].value),
				   "label '%s' lost", labels[i].name);
		labelset__free(&back);
		labelset__free(&ls);
	}
	/* Raw bytes as a stored key: refused or well-formed. */
	if (!labelset__decode(&back, data, size)) {
		FUZZ_CHECK(back.n <= STORE_MAX_LABELS, "%zu labels decoded", back.n);
		for (k = 0; k < back.n; k++)
			(void)labels_get(back.labels, back.n, back.labels[k].name);
		labelset__free(&back);
	}
	free(buf);
}

static void fuzz_matchers(const uint8_t *data, size_t size)
{
	char *buf = fuzz_strdup(data, size), *strs[MAX_STRS], err[256];
	struct store_matcher m[MAX_STRS / 3];
	static const struct store_label some[] = {
		{"comm", "python3"}, {"pid", "4242"}, {"type", "cpu"}};
	size_t n = split(buf, size, strs) / 3, i;
	struct matchset ms;
	struct timespec t0, t1;
	int check, comp;

	for (i = 0; i < n; i++) {
		/* The op rides in the first byte of the name's string. */
		m[i].op = (enum store_match)((unsigned char)strs[3 * i][0] % 5);
		m[i].name = strs[3 * i][0] ? strs[3 * i] + 1 : strs[3 * i];
		m[i].value = strs[3 * i + 1];
	}
	check = store_check_matchers(m, n, err, sizeof(err));
	FUZZ_CHECK(!check || (check == -EINVAL && strlen(err)), "check gave %d", check);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	comp = matchset__compile(&ms, m, n, NULL, 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	FUZZ_CHECK(comp == check, "compile gave %d, check %d", comp, check);
	FUZZ_CHECK((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 1000,
		   "compiling %zu matchers took over a second", n);
	if (!comp) {
		(void)matchset__match(&ms, some, 3);
		(void)matchset__match(&ms, NULL, 0);
		matchset__free(&ms);
	}
	free(buf);
}

static void fuzz_row(const uint8_t *data, size_t size)
{
	struct codec_dir_iter it;
	struct codec_dir_ent e;
	size_t dirlen, datalen;
	const uint8_t *dir, *blob;
	uint8_t *copy;
	int rc;

	if (size < 2)
		return;
	dirlen = (size_t)data[0] << 8 | data[1];
	if (dirlen > size - 2)
		dirlen = size - 2;
	/* Exact-size copies, so that ASan sees any read past either blob. */
	copy = malloc(size - 2 ? size - 2 : 1);
	FUZZ_CHECK(copy, "out of memory");
	memcpy(copy, data + 2, size - 2);
	dir = copy;
	blob = copy + dirlen;
	datalen = size - 2 - dirlen;
	if (codec_dir_begin(&it, dir, dirlen, datalen)) {
		free(copy);
		return;
	}
	while ((rc = codec_dir_next(&it, &e)) > 0) {
		const uint8_t *p = blob + e.off, *end = p + e.len;
		uint32_t id = 0, prev = 0;
		int64_t v;
		int k;

		FUZZ_CHECK(e.off + e.len <= datalen, "series part [%llu, +%llu) past %zu bytes",
			   (unsigned long long)e.off, (unsigned long long)e.len, datalen);
		FUZZ_CHECK(e.total >= 0, "negative total");
		while ((k = codec_next_pair(&p, end, &id, &v)) > 0) {
			FUZZ_CHECK(p <= end && v >= 1 && id >= prev, "bad pair");
			prev = id;
		}
		FUZZ_CHECK(k == 0 || k == -EIO, "pair reader gave %d", k);
	}
	FUZZ_CHECK(rc == 0 || rc == -EIO, "dir reader gave %d", rc);
	free(copy);
}

/* Pairs and a dir built from the bytes, written and read back. */
static void fuzz_roundtrip(const uint8_t *data, size_t size)
{
	struct store_pair pairs[256];
	struct codec_dir_ent ents[4], e;
	struct store_buf dirb = {0}, datab = {0};
	struct codec_dir_iter it;
	size_t n = 0, i, s;
	uint32_t id = 0;

	for (i = 0; i + 3 <= size && n < 256; i += 3) {
		uint64_t step =
			1 + ((uint64_t)data[i] << 8 | data[i + 1]) * (data[i] & 0x80 ? 65537 : 1);

		if (step > UINT32_MAX - id)
			break;
		id += (uint32_t)step;
		pairs[n].id = id;
		pairs[n].value = data[i + 2] < 0xf0 ? 1 + data[i + 2] % 3 : INT64_MAX - data[i + 2];
		n++;
	}
	/* Four series over consecutive quarters of the pairs. */
	for (s = 0; s < 4; s++) {
		size_t a = n * s / 4, b = n * (s + 1) / 4, before = datab.len;
		int64_t total = 0;

		FUZZ_CHECK(!codec_put_pairs(&datab, pairs + a, b - a), "can't write pairs");
		for (i = a; i < b; i++)
			total = pairs[i].value > INT64_MAX - total ? INT64_MAX
								   : total + pairs[i].value;
		ents[s] = (struct codec_dir_ent){
			.sid = 1 + (uint32_t)s * 1000, .len = datab.len - before, .total = total};
	}
	FUZZ_CHECK(!codec_put_dir(&dirb, ents, 4), "can't write the dir");
	FUZZ_CHECK(!codec_dir_begin(&it, dirb.p, dirb.len, datab.len), "can't read the dir");
	for (s = 0; s < 4; s++) {
		size_t a = n * s / 4, b = n * (s + 1) / 4;
		const uint8_t *p, *end;
		int64_t v;

		FUZZ_CHECK(codec_dir_next(&it, &e) == 1, "series %zu missing", s);
		FUZZ_CHECK(e.sid == ents[s].sid && e.len == ents[s].len && e.total == ents[s].total,
			   "series %zu read back wrong", s);
		p = (datab.p ? datab.p : (const uint8_t *)"") + e.off;
		end = p + e.len;
		id = 0;
		for (i = a; i < b; i++) {
			FUZZ_CHECK(codec_next_pair(&p, end, &id, &v) == 1, "pair %zu missing", i);
			FUZZ_CHECK(id == pairs[i].id && v == pairs[i].value,
				   "pair %zu read back wrong", i);
		}
		FUZZ_CHECK(codec_next_pair(&p, end, &id, &v) == 0, "extra pairs in series %zu", s);
	}
	FUZZ_CHECK(codec_dir_next(&it, &e) == 0, "extra series");
	store_buf__free(&dirb);
	store_buf__free(&datab);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	switch (data[0] % 4) {
	case 0:
		fuzz_labels(data + 1, size - 1);
		break;
	case 1:
		fuzz_matchers(data + 1, size - 1);
		break;
	case 2:
		fuzz_row(data + 1, size - 1);
		break;
	default:
		fuzz_roundtrip(data + 1, size - 1);
		break;
	}
	return 0;
}
