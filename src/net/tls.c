/* tls.c: the TLS files of tls.h, read whole (they are small) and checked
 * with OpenSSL's libcrypto: certificates parsed, the key parsed without a
 * passphrase prompt (an encrypted key is refused with a hint), and matched
 * against the certificate. Also the libcurl options that present them. */
#include "net/tls.h"
#include "common/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"

/* A PEM file of a chain or a bundle of CAs is a few KiB; past this it is
 * not one. */
#define TLS_FILE_MAX (1u << 20)

/* The option names of each side's files, for messages. */
struct tls_names {
	const char *ca, *cert, *key;
};
static const struct tls_names server_names = {"--tls-client-ca", "--tls-cert", "--tls-key"};
static const struct tls_names client_names = {"--ca", "--cert", "--key"};

/* Reads path whole into *out (malloc()ed, NUL-terminated). */
static int read_pem_file(const char *opt, const char *path, char **out, char *err, size_t errlen)
{
	struct stat st;
	char *buf = NULL;
	size_t got = 0;
	int fd, e;

	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		e = errno;
		return errmsg(err, errlen, -e, "%s '%s': can't open it: %s -- %s", opt, path,
			      strerror(e),
			      e == EACCES ? "is it readable by the user Sonde runs as?"
					  : "check the path");
	}
	if (fstat(fd, &st)) {
		e = errno;
		close(fd);
		return errmsg(err, errlen, -e, "%s '%s': can't stat it: %s", opt, path,
			      strerror(e));
	}
	if (!S_ISREG(st.st_mode) || st.st_size > TLS_FILE_MAX) {
		e = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		errmsg(err, errlen, e, "%s '%s': %s", opt, path,
		       S_ISDIR(st.st_mode) ? "it is a directory -- give the PEM file in it"
		       : !S_ISREG(st.st_mode)
			       ? "it is not a regular file -- give a PEM file"
			       : "it is over 1 MiB, too large for a PEM certificate or key");
		close(fd);
		return e;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return errmsg(err, errlen, -ENOMEM, "%s '%s': out of memory", opt, path);
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			e = n < 0 ? errno : EIO;
			free(buf);
			close(fd);
			return errmsg(err, errlen, -e, "%s '%s': can't read it: %s", opt, path,
				      strerror(e));
		}
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	if (!got || strlen(buf) != got) {
		free(buf);
		return errmsg(err, errlen, -EINVAL, "%s '%s': %s", opt, path,
			      got ? "it is not PEM (it holds NUL bytes: DER? `openssl x509` or "
				    "`openssl pkey` with -inform der converts it)"
				  : "it is empty");
	}
	*out = buf;
	return 0;
}

/* Why text has no usable PEM of what it should hold (a certificate when
 * !want_key), for a message: the likely mistake first. */
static const char *not_pem_why(const char *text, bool want_key)
{
	if (!strstr(text, "-----BEGIN "))
		return want_key ? "it is not PEM (no -----BEGIN line; a DER key converts with "
				  "`openssl pkey -inform der -in FILE -out FILE.pem`)"
				: "it is not PEM (no -----BEGIN line; a DER certificate converts "
				  "with `openssl x509 -inform der -in FILE -out FILE.pem`)";
	if (want_key && strstr(text, "ENCRYPTED"))
		return "the key is encrypted: Sonde takes an unencrypted key (`openssl pkey -in "
		       "FILE -out PLAIN.key`, readable by its user alone)";
	if (want_key && !strstr(text, "PRIVATE KEY-----") && strstr(text, "CERTIFICATE-----"))
		return "it holds a certificate, not a private key: swapped with the certificate's "
		       "option?";
	if (!want_key && !strstr(text, "BEGIN CERTIFICATE-----") &&
	    strstr(text, "PRIVATE KEY-----"))
		return "it holds a private key, not a certificate: swapped with the key's option?";
	return want_key ? "no PEM private key could be read from it (damaged?)"
			: "no PEM certificate could be read from it (damaged?)";
}

/* The certificates of text (at least one, all well-formed); the first in
 * *first when first is not NULL (the caller frees it). */
static int check_certs(const char *opt, const char *path, const char *text, X509 **first, char *err,
		       size_t errlen)
{
	BIO *bio = BIO_new_mem_buf(text, -1);
	unsigned long e;
	X509 *x;
	int n = 0, rc = 0;

	if (!bio)
		return errmsg(err, errlen, -ENOMEM, "%s '%s': out of memory", opt, path);
	ERR_clear_error();
	while ((x = PEM_read_bio_X509(bio, NULL, NULL, NULL))) {
		if (!n && first)
			*first = x;
		else
			X509_free(x);
		n++;
	}
	/* The loop ends at the end of the text (no start line), or at a
	 * block that doesn't parse. */
	e = ERR_peek_last_error();
	if (!n) {
		rc = errmsg(err, errlen, -EINVAL, "%s '%s': %s", opt, path,
			    not_pem_why(text, false));
	} else if (e &&
		   !(ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE)) {
		rc = errmsg(err, errlen, -EINVAL,
			    "%s '%s': certificate %d of it is damaged (%s) -- check the file", opt,
			    path, n + 1, ERR_reason_error_string(e));
		if (first) {
			X509_free(*first);
			*first = NULL;
		}
	}
	ERR_clear_error();
	BIO_free(bio);
	return rc;
}

/* Refuses to prompt for a passphrase: an encrypted key fails to load. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
	return -1;
}

static int check_key(const char *opt, const char *path, const char *text, EVP_PKEY **key, char *err,
		     size_t errlen)
{
	BIO *bio = BIO_new_mem_buf(text, -1);

	if (!bio)
		return errmsg(err, errlen, -ENOMEM, "%s '%s': out of memory", opt, path);
	ERR_clear_error();
	*key = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
	ERR_clear_error();
	BIO_free(bio);
	if (!*key)
		return errmsg(err, errlen, -EINVAL, "%s '%s': %s", opt, path,
			      not_pem_why(text, true));
	return 0;
}

/* Warns of a certificate that clients will refuse for its dates. */
static void warn_dates(const char *opt, const char *path, X509 *x)
{
	const ASN1_TIME *t = NULL;
	const char *what = NULL;
	char when[64] = "?";
	BIO *b;

	if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0) {
		t = X509_get0_notAfter(x);
		what = "expired on";
	} else if (X509_cmp_current_time(X509_get0_notBefore(x)) > 0) {
		t = X509_get0_notBefore(x);
		what = "is not valid before";
	}
	if (!t)
		return;
	b = BIO_new(BIO_s_mem());
	if (b && ASN1_TIME_print(b, t) > 0) {
		int n = BIO_read(b, when, sizeof(when) - 1);

		when[n > 0 ? n : 0] = '\0';
	}
	BIO_free(b);
	pr_warn("the certificate of %s '%s' %s %s: peers will refuse it -- renew it (or check "
		"this machine's clock)",
		opt, path, what, when);
}

/* Reads and checks a certificate and its key; their texts into *cert_pem
 * and *key_pem when not NULL (else freed). */
static int load_pair(const struct tls_names *nm, const char *cert_path, const char *key_path,
		     char **cert_pem, char **key_pem, char *err, size_t errlen)
{
	char *cert_text = NULL, *key_text = NULL;
	EVP_PKEY *key = NULL;
	X509 *x = NULL;
	int rc;

	rc = read_pem_file(nm->cert, cert_path, &cert_text, err, errlen);
	if (!rc)
		rc = check_certs(nm->cert, cert_path, cert_text, &x, err, errlen);
	if (!rc)
		rc = read_pem_file(nm->key, key_path, &key_text, err, errlen);
	if (!rc)
		rc = check_key(nm->key, key_path, key_text, &key, err, errlen);
	if (!rc && X509_check_private_key(x, key) != 1)
		rc = errmsg(err, errlen, -EINVAL,
			    "%s '%s' is not the key of the certificate of %s '%s' -- give the key "
			    "the certificate was made for",
			    nm->key, key_path, nm->cert, cert_path);
	ERR_clear_error();
	if (!rc)
		warn_dates(nm->cert, cert_path, x);
	X509_free(x);
	EVP_PKEY_free(key);
	if (rc || !cert_pem)
		free(cert_text);
	else
		*cert_pem = cert_text;
	if (key_text && (rc || !key_pem)) {
		explicit_bzero(key_text, strlen(key_text));
		free(key_text);
	} else if (key_text) {
		*key_pem = key_text;
	}
	return rc;
}

/* Reads and checks a file of CA certificates; its text into *pem when not
 * NULL (else freed). */
static int load_ca(const char *opt, const char *path, char **pem, char *err, size_t errlen)
{
	char *text = NULL;
	int rc;

	rc = read_pem_file(opt, path, &text, err, errlen);
	if (!rc)
		rc = check_certs(opt, path, text, NULL, err, errlen);
	if (rc || !pem)
		free(text);
	else
		*pem = text;
	return rc;
}

/* ---- servers ---- */

bool tls_server__on(const struct tls_server_opts *o)
{
	return o && (o->cert || o->key || o->client_ca);
}

int tls_server__check_opts(const struct tls_server_opts *o, char *err, size_t errlen)
{
	if (!tls_server__on(o))
		return 0;
	if (!o->cert && !o->key)
		return errmsg(err, errlen, -EINVAL,
			      "--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is on an "
			      "HTTPS port");
	if (!o->cert || !o->key)
		return errmsg(err, errlen, -EINVAL,
			      "%s needs %s: HTTPS takes a certificate and its private key",
			      o->cert ? "--tls-cert" : "--tls-key",
			      o->cert ? "--tls-key" : "--tls-cert");
	return 0;
}

int tls_server__load(const struct tls_server_opts *o, struct tls_server_pem *pem, char *err,
		     size_t errlen)
{
	int rc;

	memset(pem, 0, sizeof(*pem));
	rc = tls_server__check_opts(o, err, errlen);
	if (!rc)
		rc = load_pair(&server_names, o->cert, o->key, &pem->cert, &pem->key, err, errlen);
	if (!rc && o->client_ca)
		rc = load_ca(server_names.ca, o->client_ca, &pem->client_ca, err, errlen);
	if (rc)
		tls_server_pem__free(pem);
	return rc;
}

void tls_server_pem__free(struct tls_server_pem *pem)
{
	if (!pem)
		return;
	if (pem->key)
		explicit_bzero(pem->key, strlen(pem->key));
	free(pem->key);
	free(pem->cert);
	free(pem->client_ca);
	memset(pem, 0, sizeof(*pem));
}

/* ---- clients ---- */

bool tls_client__on(const struct tls_client_opts *o)
{
	return o && (o->ca || o->cert || o->key);
}

static char *dup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

void tls_client__copy(struct tls_client_opts *to, const struct tls_client_opts *from)
{
	to->ca = dup_or_null(from ? from->ca : NULL);
	to->cert = dup_or_null(from ? from->cert : NULL);
	to->key = dup_or_null(from ? from->key : NULL);
}

void tls_client__free_copy(struct tls_client_opts *t)
{
	free((char *)t->ca);
	free((char *)t->cert);
	free((char *)t->key);
	memset(t, 0, sizeof(*t));
}

int tls_client__check(const struct tls_client_opts *o, char *err, size_t errlen)
{
	int rc = 0;

	if (!tls_client__on(o))
		return 0;
	if (!o->cert != !o->key)
		return errmsg(err, errlen, -EINVAL,
			      "%s needs %s: a client certificate goes with its private key",
			      o->cert ? "--cert" : "--key", o->cert ? "--key" : "--cert");
	if (o->ca)
		rc = load_ca(client_names.ca, o->ca, NULL, err, errlen);
	if (!rc && o->cert)
		rc = load_pair(&client_names, o->cert, o->key, NULL, NULL, err, errlen);
	return rc;
}

int tls_client__curl(const struct tls_client_opts *o, CURL *easy)
{
	CURLcode rc = CURLE_OK;

	if (!tls_client__on(o))
		return 0;
	if (o->ca) {
		/* This CA alone: not the system's besides (CAPATH). */
		rc = curl_easy_setopt(easy, CURLOPT_CAINFO, o->ca);
		if (!rc)
			rc = curl_easy_setopt(easy, CURLOPT_CAPATH, NULL);
	}
	if (!rc && o->cert) {
		rc = curl_easy_setopt(easy, CURLOPT_SSLCERT, o->cert);
		if (!rc)
			rc = curl_easy_setopt(easy, CURLOPT_SSLCERTTYPE, "PEM");
		if (!rc)
			rc = curl_easy_setopt(easy, CURLOPT_SSLKEY, o->key);
		if (!rc)
			rc = curl_easy_setopt(easy, CURLOPT_SSLKEYTYPE, "PEM");
	}
	return rc ? -EINVAL : 0;
}

const char *tls_curl_hint(CURLcode rc)
{
	switch (rc) {
	case CURLE_PEER_FAILED_VERIFICATION:
		return " -- is the server's certificate signed by the CA of --ca, and made for "
		       "this host (its subjectAltName)?";
	case CURLE_SSL_CACERT_BADFILE:
		return " -- check the file of --ca";
	case CURLE_SSL_CERTPROBLEM:
		return " -- check the files of --cert and --key";
	case CURLE_SSL_CONNECT_ERROR:
		return " -- does the server serve HTTPS on that port, and take this client's "
		       "certificate (--cert)?";
	case CURLE_GOT_NOTHING:
		return " -- if the server serves HTTPS, use an https:// URL";
	default:
		return "";
	}
}
