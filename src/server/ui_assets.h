/* ui_assets.h: the web UI's files (ui/), compiled into the binary at build
 * time by scripts/embed_ui.py (see ui/ui.mk), so that `sonde server` and
 * `sonde run` serve the UI with no files beside them and no network. */
#ifndef SONDE_SERVER_UI_ASSETS_H
#define SONDE_SERVER_UI_ASSETS_H

#include <stddef.h>

struct ui_asset {
	const char *path;	  /* "/index.html", "/js/flamegraph.js", ... */
	const char *content_type; /* "text/html; charset=utf-8", ... */
	const unsigned char *data;
	size_t len;
};

/* The asset at path (exact match, leading '/'), or NULL. */
const struct ui_asset *ui_asset_find(const char *path);
/* Every asset, terminated by an entry whose path is NULL. */
extern const struct ui_asset ui_assets[];

#endif
