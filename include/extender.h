/*
 * extender: the kube-scheduler extender verbs (filter, prioritize, bind,
 * preempt) over HTTP. Request JSON -> claim + candidate nodes -> scoring
 * core on one cache snapshot -> reply JSON, in the exact wire format of
 * k8s.io/kube-scheduler/extender/v1 (docs/api.md).
 *
 * How a bind is carried out is the caller's choice (extender_opts.bind, to
 * the contract of bind.h): in memory in standalone mode
 * (extender_bind_local), through Leases and the binding subresource in
 * cluster mode (reserve_bind).
 */
#ifndef GPU_EXTENDER_H
#define GPU_EXTENDER_H

#include "api.h"
#include "bind.h"
#include "cache.h"
#include "claim.h"
#include "httpd.h"
#include "policy.h"

struct events;
struct nudge;

/* Carries out a bind; returns a BIND_* result (bind.h); on failure err says why in one line. */
typedef int (*extender_bind_fn)(void *ctx, const struct bind_request *req, char *err, size_t errlen);

/*
 * Cluster mode: fetch a pod the extender has not seen in filter (after a
 * restart) and return its claim. 0, or -1 with err.
 */
typedef int (*extender_fetch_fn)(void *ctx, const char *ns, const char *name, const char *uid,
				 struct claim *out, char *err, size_t errlen);

/* Where a gang member may go (struct gang_route, bind.h). */
typedef void (*extender_gang_fn)(void *ctx, const struct api_pod_ref *pod, const struct claim *c,
				 const struct gpu_node *const *nodes, int n, struct gang_route *out);
/* Whether the cache can be trusted yet; else why not. */
typedef bool (*extender_ready_fn)(void *ctx, char *why, size_t size);

struct extender_opts {
	struct cache *cache;
	const struct api_resources *res;
	enum policy_id default_policy;
	extender_bind_fn bind;
	void *bind_ctx;
	extender_fetch_fn fetch;     /* may be NULL (standalone) */
	void *fetch_ctx;
	extender_gang_fn gang;       /* may be NULL: gangs are then placed pod by pod */
	void *gang_ctx;
	/*
	 * May be NULL (always ready). Until it says ready, every verb answers with
	 * an error: kube-scheduler retries the pod instead of taking an empty
	 * cache's "no GPUs here" for the truth.
	 */
	extender_ready_fn ready;
	void *ready_ctx;
	/*
	 * Cluster mode: a bind's devices count in the cache from the moment the
	 * request arrives (extender_bind_arrive) until it is answered, because
	 * the bind runs apart and kube-scheduler does not wait for it.
	 */
	bool assume_binds;
	/*
	 * filterKeepsBest: filter passes only this many of the nodes that fit,
	 * those the policy rates best; 0 passes every node that fits.
	 */
	int filter_keeps_best;
	/* ...except for a pod that states a soft preference (api_pod_soft_preferences): every node that fits. */
	bool keep_all_for_preferences;
	/*
	 * A GPU pod's filter waits, this long at most, while the oldest bind in
	 * flight has waited longer than this (backlog.h); 0: never.
	 */
	int bind_queue_limit_ms;
	/* May be NULL (no Events): a pod no node fits gets a GPUClaimUnsatisfiable Event, once a minute at most. */
	struct events *events;
	/* May be NULL (no nudges): told of each pod no node fits and each pod that fits (nudge.h). */
	struct nudge *nudge;
};

struct extender;

struct extender *extender_new(const struct extender_opts *opts);
void extender_free(struct extender *x);

/* http_handler functions; ctx is the struct extender. */
void extender_filter(void *ctx, const struct http_request *req, struct http_response *resp);
void extender_prioritize(void *ctx, const struct http_request *req, struct http_response *resp);
void extender_bind(void *ctx, const struct http_request *req, struct http_response *resp);
/* The bind's http_arrival step: counts the devices it will take (assume_binds). */
void extender_bind_arrive(void *ctx, const struct http_request *req);
void extender_preempt(void *ctx, const struct http_request *req, struct http_response *resp);
/*
 * GET /debug/nodes[?node=NAME][&format=html|json]: what the cache believes, per
 * node; JSON, or the HTML page of html.h when asked for it or when the
 * Accept header names text/html (a browser). ctx is the struct cache.
 */
void extender_debug_nodes(void *ctx, const struct http_request *req, struct http_response *resp);

/*
 * The in-memory binder of standalone mode (ctx: the struct cache): chooses
 * the devices under the cache's writer lock and records the allocation, so
 * of two binds that want the last free devices exactly one wins.
 */
int extender_bind_local(void *ctx, const struct bind_request *req, char *err, size_t errlen);

#endif
