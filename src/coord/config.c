/* config.c: the coordinator's sites (coord.h), from `--server [NAME=]URL`
 * options and from a YAML file (libyaml's document API): a list under
 * `servers:` of `name`, `url` and `labels`. Everything in the file is
 * checked -- unknown keys, a URL that is no http(s) base URL, a name used
 * twice, labels that are no label names -- and a problem is one message
 * naming the file and line. */
#include "coord/coord.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "common/log.h"
#include "common/utf8.h"
#include "common/xalloc.h"

/* A config file is read whole; past this it is refused. */
#define CONFIG_MAX_BYTES (4u << 20)
#define URL_MAX 1024

static void site__free(struct coord_site *s)
{
	free(s->name);
	free(s->url);
	for (size_t i = 0; i < s->nlabels; i++) {
		free((char *)s->labels[i].name);
		free((char *)s->labels[i].value);
	}
	free(s->labels);
}

void coord_config__free(struct coord_config *cfg)
{
	for (size_t i = 0; i < cfg->n; i++)
		site__free(&cfg->sites[i]);
	free(cfg->sites);
	memset(cfg, 0, sizeof(*cfg));
}

/* Whether url is an http(s) base URL: scheme, a host, an optional port,
 * no path but "/", no query, no spaces. */
static bool url_ok(const char *url)
{
	const char *host;

	if (!strncmp(url, "http://", 7))
		host = url + 7;
	else if (!strncmp(url, "https://", 8))
		host = url + 8;
	else
		return false;
	if (!*host || *host == '/' || *host == ':')
		return false;
	if (strlen(url) > URL_MAX || strpbrk(url, " \t\r\n?#"))
		return false;
	host = strchr(host, '/');
	return !host || !strcmp(host, "/");
}

/* Takes name, url and labels (all malloc()ed) as a new site, or frees them
 * and says why not. */
static int config__take(struct coord_config *cfg, char *name, char *url, struct store_label *labels,
			size_t nlabels, char *err, size_t errlen)
{
	struct coord_site s = {name, url, labels, nlabels};
	size_t len;
	int rc = -EINVAL;

	if (!url_ok(url)) {
		errmsg(err, errlen, 0,
		       "server URL '%.200s' is not an http:// or https:// address without a "
		       "path (e.g. http://10.0.0.7:7470)",
		       url);
		goto fail;
	}
	len = strlen(url);
	if (url[len - 1] == '/')
		url[len - 1] = '\0';
	if (!s.name) {
		s.name = xstrdup(url);
	} else if (!*s.name || strlen(s.name) > 256 || !utf8_valid(s.name, strlen(s.name))) {
		errmsg(err, errlen, 0, "server name '%.100s' must be 1 to 256 bytes of UTF-8",
		       s.name);
		goto fail;
	}
	for (size_t i = 0; i < cfg->n; i++)
		if (!strcmp(cfg->sites[i].name, s.name)) {
			errmsg(err, errlen, 0,
			       "server name '%.200s' is given twice: each server needs its own",
			       s.name);
			goto fail;
		}
	if (cfg->n >= COORD_MAX_SITES) {
		errmsg(err, errlen, 0, "more than %d servers: run more than one coordinator",
		       COORD_MAX_SITES);
		goto fail;
	}
	xgrow((void **)&cfg->sites, &cfg->cap, cfg->n + 1, sizeof(*cfg->sites));
	cfg->sites[cfg->n++] = s;
	return 0;
fail:
	site__free(&s);
	return rc;
}

int coord_config__add(struct coord_config *cfg, const char *spec, char *err, size_t errlen)
{
	const char *eq = strchr(spec, '=');
	const char *scheme = strstr(spec, "://");

	/* "NAME=URL" when the '=' comes before the scheme. */
	if (eq && scheme && eq < scheme)
		return config__take(cfg, xstrndup(spec, (size_t)(eq - spec)), xstrdup(eq + 1), NULL,
				    0, err, errlen);
	return config__take(cfg, NULL, xstrdup(spec), NULL, 0, err, errlen);
}

/* ---- the YAML file ---- */

struct loader {
	const char *name;
	yaml_document_t *doc;
	char *err;
	size_t errlen;
};

static int lfail(struct loader *L, const yaml_node_t *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int lfail(struct loader *L, const yaml_node_t *n, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return errmsg(L->err, L->errlen, -EINVAL, "%s:%zu: %s", L->name,
		      n ? (size_t)n->start_mark.line + 1 : 1, msg);
}

static const char *scalar(const yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static int load_labels(struct loader *L, const yaml_node_t *map, struct store_label **out,
		       size_t *n)
{
	size_t cap = 0;

	if (map->type != YAML_MAPPING_NODE)
		return lfail(L, map, "labels must be a mapping (labels: {region: eu})");
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		const yaml_node_t *k = yaml_document_get_node(L->doc, p->key),
				  *v = yaml_document_get_node(L->doc, p->value);
		const char *ks = scalar(k), *vs = scalar(v);

		if (!ks || !label_name_valid(ks))
			return lfail(L, k, "label name '%.100s' is not [A-Za-z_][A-Za-z0-9_]*",
				     ks ? ks : "(not a string)");
		if (!vs || strlen(vs) > STORE_MAX_LABEL_VALUE || !utf8_valid(vs, strlen(vs)))
			return lfail(L, v, "label %s: its value must be a string of UTF-8", ks);
		if (*n >= COORD_MAX_SITE_LABELS)
			return lfail(L, k, "more than %d labels on a server",
				     COORD_MAX_SITE_LABELS);
		xgrow((void **)out, &cap, *n + 1, sizeof(**out));
		(*out)[*n].name = xstrdup(ks);
		(*out)[(*n)++].value = xstrdup(vs);
	}
	return 0;
}

static int load_server(struct coord_config *cfg, struct loader *L, const yaml_node_t *item)
{
	const char *name = NULL, *url = NULL;
	struct store_label *labels = NULL;
	size_t nlabels = 0;
	char why[600];
	int rc = 0;

	if (item->type != YAML_MAPPING_NODE)
		return lfail(L, item, "each server is a mapping with a url (- url: http://...)");
	for (yaml_node_pair_t *p = item->data.mapping.pairs.start;
	     !rc && p < item->data.mapping.pairs.top; p++) {
		const yaml_node_t *k = yaml_document_get_node(L->doc, p->key),
				  *v = yaml_document_get_node(L->doc, p->value);
		const char *ks = scalar(k);

		if (ks && !strcmp(ks, "name") && scalar(v))
			name = scalar(v);
		else if (ks && !strcmp(ks, "url") && scalar(v))
			url = scalar(v);
		else if (ks && !strcmp(ks, "labels"))
			rc = load_labels(L, v, &labels, &nlabels);
		else if (ks && (!strcmp(ks, "name") || !strcmp(ks, "url")))
			rc = lfail(L, v, "%s must be a string", ks);
		else
			rc = lfail(L, k, "unknown key '%.100s' (a server has name, url, labels)",
				   ks ? ks : "(not a string)");
	}
	if (!rc && !url)
		rc = lfail(L, item, "a server without a url");
	if (rc) {
		struct coord_site s = {NULL, NULL, labels, nlabels};

		site__free(&s);
		return rc;
	}
	rc = config__take(cfg, name ? xstrdup(name) : NULL, xstrdup(url), labels, nlabels, why,
			  sizeof(why));
	if (rc)
		return lfail(L, item, "%s", why);
	return 0;
}

int coord_config__parse(struct coord_config *cfg, const char *text, size_t len, const char *name,
			char *err, size_t errlen)
{
	struct loader L = {.name = name, .err = err, .errlen = errlen};
	yaml_parser_t parser;
	yaml_document_t doc;
	const yaml_node_t *root, *servers = NULL;
	int rc = 0;

	if (!yaml_parser_initialize(&parser))
		return errmsg(err, errlen, -ENOMEM, "can't start the YAML parser: out of memory");
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	if (!yaml_parser_load(&parser, &doc)) {
		rc = errmsg(err, errlen, -EINVAL, "%s:%zu: bad YAML: %s", name,
			    (size_t)parser.problem_mark.line + 1,
			    parser.problem ? parser.problem : "syntax error");
		yaml_parser_delete(&parser);
		return rc;
	}
	L.doc = &doc;
	root = yaml_document_get_root_node(&doc);
	if (!root || root->type != YAML_MAPPING_NODE) {
		rc = lfail(&L, root, "the file must be a mapping with a servers: list");
		goto cleanup;
	}
	for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
	     !rc && p < root->data.mapping.pairs.top; p++) {
		const yaml_node_t *k = yaml_document_get_node(&doc, p->key);
		const char *ks = scalar(k);

		if (ks && !strcmp(ks, "servers"))
			servers = yaml_document_get_node(&doc, p->value);
		else
			rc = lfail(&L, k, "unknown key '%.100s' (the file has servers:)",
				   ks ? ks : "(not a string)");
	}
	if (!rc && (!servers || servers->type != YAML_SEQUENCE_NODE))
		rc = lfail(&L, servers ? servers : root,
			   "servers: must be a list (- url: http://HOST:PORT)");
	for (yaml_node_item_t *i = servers && !rc ? servers->data.sequence.items.start : NULL;
	     !rc && i && i < servers->data.sequence.items.top; i++)
		rc = load_server(cfg, &L, yaml_document_get_node(&doc, *i));
cleanup:
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	return rc;
}

int coord_config__load(struct coord_config *cfg, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t len;
	int rc;

	if (!f)
		return errmsg(err, errlen, -EIO, "can't read %s: %s", path, strerror(errno));
	buf = malloc(CONFIG_MAX_BYTES + 1);
	if (!buf) {
		fclose(f);
		return errmsg(err, errlen, -ENOMEM, "can't read %s: out of memory", path);
	}
	len = fread(buf, 1, CONFIG_MAX_BYTES + 1, f);
	if (ferror(f))
		rc = errmsg(err, errlen, -EIO, "can't read %s: %s", path, strerror(errno));
	else if (len > CONFIG_MAX_BYTES)
		rc = errmsg(err, errlen, -EINVAL, "%s is over 4 MiB: is it the right file?", path);
	else
		rc = coord_config__parse(cfg, buf, len, path, err, errlen);
	fclose(f);
	free(buf);
	return rc;
}
