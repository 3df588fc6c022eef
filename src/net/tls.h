/* tls.h: the TLS files of Sonde's HTTPS servers and clients -- a server's
 * certificate, key and client CA (--tls-cert, --tls-key, --tls-client-ca of
 * `sonde server` and `sonde coordinator`), a client's CA, certificate and key
 * (--ca, --cert, --key of `sonde agent` and `sonde coordinator`). They are
 * read and checked when a command starts, with OpenSSL's libcrypto, so that
 * a missing, unreadable or non-PEM file, an encrypted key or a key that is
 * not the certificate's stops the command with a message naming the option,
 * the file and the problem, rather than failing every handshake later. The
 * server side is served by libmicrohttpd's GnuTLS (net/http.h), the client
 * side by libcurl's OpenSSL (tls_client__curl); peer verification is never
 * turned off. */
#ifndef SONDE_NET_TLS_H
#define SONDE_NET_TLS_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>

/* A server's files (paths; NULL: not given). */
struct tls_server_opts {
	const char *cert;      /* its certificate, then any intermediates (PEM) */
	const char *key;       /* the certificate's private key (PEM, unencrypted) */
	const char *client_ca; /* mutual TLS: every client must present a
				* certificate signed by a CA of this file (PEM);
				* NULL: none is asked for */
};

/* The files' contents, read and checked; strings malloc()ed (client_ca
 * NULL when none was given). */
struct tls_server_pem {
	char *cert, *key, *client_ca;
};

/* Whether o asks for TLS at all (NULL or every path NULL: no). */
bool tls_server__on(const struct tls_server_opts *o);
/* Checks that o is whole (a certificate and its key; a client CA only with
 * them): 0, or -EINVAL with why in err (the options named). Reads nothing. */
int tls_server__check_opts(const struct tls_server_opts *o, char *err, size_t errlen);
/* Checks o as tls_server__check_opts, then reads its files into *pem and
 * checks them: PEM certificates where certificates are due, an unencrypted
 * PEM private key, the key the certificate's. 0, or a negative errno with
 * err naming the option, the file and the problem (*pem then empty). An
 * expired certificate is a warning, logged. */
int tls_server__load(const struct tls_server_opts *o, struct tls_server_pem *pem, char *err,
		     size_t errlen);
/* Frees the strings (the key wiped first); NULL fields are fine. */
void tls_server_pem__free(struct tls_server_pem *pem);

/* A client's files (paths; NULL: not given). */
struct tls_client_opts {
	const char *ca;	  /* the CA certificates (PEM) that sign the servers'
			   * certificates, trusted instead of the system's;
			   * NULL: the system's */
	const char *cert; /* a client certificate to present (PEM), for mutual TLS */
	const char *key;  /* its private key (PEM, unencrypted) */
};

/* Whether o gives any file (NULL or every path NULL: no). */
bool tls_client__on(const struct tls_client_opts *o);
/* A copy of from's paths into *to (NULL from: all NULL), for a client that
 * outlives its caller's options; tls_client__free_copy() frees it. */
void tls_client__copy(struct tls_client_opts *to, const struct tls_client_opts *from);
void tls_client__free_copy(struct tls_client_opts *t);
/* Checks that o is whole (--cert with --key), reads its files and checks
 * them as tls_server__load does. 0, or a negative errno with err naming the
 * option, the file and the problem. */
int tls_client__check(const struct tls_client_opts *o, char *err, size_t errlen);
/* Sets o's files on a libcurl easy handle, for its https:// URLs (after
 * curl_easy_reset, before the transfer). Verification of the server's
 * certificate and host stays on: libcurl's defaults, never changed here.
 * NULL o is a no-op. 0, or -EINVAL when libcurl refuses an option. */
int tls_client__curl(const struct tls_client_opts *o, CURL *easy);
/* A hint for a failed transfer's TLS error ("-- is --ca the CA that signed
 * the server's certificate?"), or "" when rc is no TLS error. Static. */
const char *tls_curl_hint(CURLcode rc);

#endif
