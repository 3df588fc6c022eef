/* sbuf.h: the growable byte buffer that answers and request bodies are
 * built in -- appends that fail cleanly (the buffer is sized by outside
 * input), kept NUL-terminated so text can be read in place. Used by the
 * HTTP server (src/net/http.c) for request bodies, by the server's answers
 * (src/server/) and by common/json.h. */
#ifndef SONDE_COMMON_SBUF_H
#define SONDE_COMMON_SBUF_H

#include <stdarg.h>
#include <stddef.h>

/* Zeroed is empty. NUL-terminated after every append (buf is NULL until
 * the first). Appends return 0 or -ENOMEM (the buffer then stays as it
 * was). */
struct sbuf {
	char *buf;
	size_t len, cap;
};

/* Makes room for more bytes (and the NUL) without appending. */
int sbuf__reserve(struct sbuf *b, size_t more);
int sbuf__add(struct sbuf *b, const void *data, size_t n);
int sbuf__puts(struct sbuf *b, const char *s);
int sbuf__printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands the bytes to the caller (free() them; "" when b was empty, NULL
 * on ENOMEM); b is then empty. */
char *sbuf__steal(struct sbuf *b, size_t *len);
/* Frees the bytes; b is then empty. */
void sbuf__free(struct sbuf *b);

#endif
