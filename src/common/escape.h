/* escape.h: the backslash escapes of a quoted string in the query
 * languages Sonde reads, as Prometheus has them: \n \t \r \\ \" \'. Used
 * by the server's selector parser (src/server/parse.c); the alert
 * expressions' lexer reads the same strings. */
#ifndef SONDE_COMMON_ESCAPE_H
#define SONDE_COMMON_ESCAPE_H

/* The character that backslash-c stands for, or -1 when it is no escape. */
static inline int escape_decode(char c)
{
	switch (c) {
	case 'n':
		return '\n';
	case 't':
		return '\t';
	case 'r':
		return '\r';
	case '\\':
	case '"':
	case '\'':
		return c;
	default:
		return -1;
	}
}

#endif
