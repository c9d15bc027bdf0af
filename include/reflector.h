/*
 * reflector: keeps a local copy of one resource in step with the API
 * server. LIST with limit/continue paging, then WATCH from the list's
 * resourceVersion with bookmarks. ADDED/MODIFIED/DELETED go to the sink;
 * BOOKMARK only moves the resourceVersion; a 410 (HTTP or an ERROR event)
 * relists; a watch silent past idle_timeout_s (the API server sends a
 * bookmark about once a minute) is taken for a half-open connection: the
 * reflector is not ready until it listed again on a new connection; any other failure retries with exponential backoff and jitter
 * (honouring Retry-After). Runs on its own thread.
 */
#ifndef GPU_REFLECTOR_H
#define GPU_REFLECTOR_H

#include "kube.h"

#include <stdbool.h>

/* Where the objects go. lock/unlock bracket every batch of applies. */
struct reflector_sink {
	void (*lock)(void *ctx);
	void (*unlock)(void *ctx);
	/* A full list starts; objects not applied again before list_end are gone.
	 * list_end follows only a list that completed: one that broke off has no end. */
	void (*list_begin)(void *ctx);
	void (*apply)(void *ctx, bool deleted, const cJSON *obj);
	void (*list_end)(void *ctx);
	void *ctx;
};

struct reflector_opts {
	const char *name;           /* for logs: "nodes" */
	int resource;               /* RES_* of metrics.h */
	const char *path;           /* "/api/v1/nodes" */
	const char *label_selector; /* NULL: none */
	const char *field_selector;
	int page_limit;             /* 0: 500 */
	int watch_timeout_s;        /* 0: 300 (at most idle_timeout_s * 3/4: a quiet watch ends before it counts as silent) */
	int idle_timeout_s;         /* a watch silent this long (no event, no bookmark) is watched again on a new
				     * connection after a relist, and not ready meanwhile; 0: 120, < 0: no bound */
	struct reflector_sink sink;
};

struct reflector;

/* Starts the thread; o and its strings are copied. */
struct reflector *reflector_start(struct kube_client *c, const struct reflector_opts *o,
				  char *err, size_t errlen);
/* True once a full list arrived and the API server has not refused us since. */
bool reflector_ready(const struct reflector *r);
/* The last problem, for /readyz ("" if none). */
void reflector_problem(const struct reflector *r, char *out, size_t size);
/* Stops the thread (interrupts a watch) and frees r. */
void reflector_stop(struct reflector *r);

#endif
