/* coord.h: `sonde coordinator` as a library -- one endpoint over many
 * `sonde server`s, each a site with its own store. It answers the query API
 * of docs/api.md and serves the web UI as a server does, by asking every
 * site in parallel (with a timeout per site) and merging their answers
 * exactly: flame graphs summed by stack, top functions and diffs computed
 * from the merged profiles, time series summed per step, label names and
 * values unioned, points concatenated per series, pprof merged. A site
 * that fails or is slower than the timeout leaves the answer partial, and
 * says so (docs/api.md, "The coordinator"). Used by `sonde coordinator`
 * (src/cli/coordinator.c). */
#ifndef SONDE_COORD_COORD_H
#define SONDE_COORD_COORD_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define COORD_DEFAULT_LISTEN "127.0.0.1:7480"
#define COORD_DEFAULT_TIMEOUT_MS 5000
/* Sites one coordinator asks at most. */
#define COORD_MAX_SITES 1024
/* Labels of a site at most (metadata: listed, not added to its series). */
#define COORD_MAX_SITE_LABELS 32

/* A site: a `sonde server` reached at url ("http://HOST:PORT", no path). */
struct coord_site {
	char *name; /* unique; the url when none was given */
	char *url;
	struct store_label *labels; /* owned strings */
	size_t nlabels;
};

struct tls_client_opts;
struct tls_server_opts;

/* The sites of a coordinator, from --server options and a --config file. */
struct coord_config {
	struct coord_site *sites;
	size_t n, cap;
	/* The https:// sites: the CA to trust, the client certificate and key
	 * the coordinator presents (net/tls.h; --ca, --cert, --key), checked
	 * beforehand with tls_client__check. Borrowed, NULL: the system's CAs
	 * and no client certificate. */
	const struct tls_client_opts *tls;
};

/* Adds a site given as "URL" or "NAME=URL". 0, or -EINVAL with the reason
 * in err (a URL that is not http:// or https://, a name taken, too many). */
int coord_config__add(struct coord_config *cfg, const char *spec, char *err, size_t errlen);
/* Adds the sites of a YAML file:
 *   servers:
 *     - name: eu-1                  # optional; unique
 *       url: http://10.0.0.7:7470
 *       labels: {region: eu}        # optional
 * 0, or -EINVAL / -EIO with the reason (file, line) in err. */
int coord_config__load(struct coord_config *cfg, const char *path, char *err, size_t errlen);
/* The same from text (name is the file's, for messages). */
int coord_config__parse(struct coord_config *cfg, const char *text, size_t len, const char *name,
			char *err, size_t errlen);
void coord_config__free(struct coord_config *cfg);

struct coord;

struct coord_opts {
	const char *listen;		/* "HOST:PORT"; port 0 picks one */
	const struct coord_config *cfg; /* borrowed; must outlive the coordinator */
	uint64_t timeout_ms;		/* per site and request; 0: 5 s */
	unsigned threads;		/* HTTP worker threads; 0: 16 */
	uint64_t max_answer_bytes;	/* a site's answer at most; 0: 256 MiB */
	/* HTTPS (and mutual TLS) on listen, its files checked beforehand
	 * (net/tls.h). Borrowed. NULL: plain HTTP. */
	const struct tls_server_opts *tls;
};

/* Starts serving. NULL with errno set after logging why. */
struct coord *coord__start(const struct coord_opts *o);
/* The port bound. */
int coord__port(const struct coord *c);
/* Stops serving, waits for requests in flight, frees c; NULL is a no-op. */
void coord__stop(struct coord *c);

#endif
