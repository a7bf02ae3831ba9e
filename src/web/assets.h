/* assets.h - the page's files (HTML, script, styles), built into the
 * library at build time by page/embed.c: nothing is read or fetched at run
 * time. Constant data; any thread. */
#ifndef LR_WEB_ASSETS_H
#define LR_WEB_ASSETS_H

#include <stddef.h>

typedef struct lr_web_asset {
	const char *path;         /* "/app.js" */
	const char *content_type;
	const unsigned char *data;
	size_t len;
} lr_web_asset;

extern const lr_web_asset lr_web_assets[];
extern const size_t lr_web_n_assets;

#endif
