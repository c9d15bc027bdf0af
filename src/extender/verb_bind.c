/*
 * POST /bind: carries out kube-scheduler's choice through the binder
 * (extender_opts.bind, to the contract of bind.h) with the claim the
 * pod's filter decoded (or, after a restart, the pod read again). Its
 * arrival step counts the devices in the cache before the bind waits its
 * turn (assume_binds). And the binder of standalone mode.
 */
#include "extender_impl.h"
#include "jsonarena.h"
#include "log.h"
#include "metrics.h"

#include <stdio.h>
#include <string.h>

static void bind_reply(struct http_response *resp, const char *err)
{
	buf_clear(&resp->body);
	buf_adds(&resp->body, "{\"Error\":");
	buf_add_json_str(&resp->body, err);
	buf_adds(&resp->body, "}\n");
}

/* The pod and node of a bind request (strings in root); false unless all are there. */
struct bind_args {
	const char *name, *ns, *uid, *node;
};

static bool bind_args(const cJSON *root, struct bind_args *a)
{
	/* Any casing of the keys, as kube-scheduler's own decoder accepts. */
	a->name = cJSON_GetStringValue(cJSON_GetObjectItem(root, "PodName"));
	a->ns = cJSON_GetStringValue(cJSON_GetObjectItem(root, "PodNamespace"));
	a->uid = cJSON_GetStringValue(cJSON_GetObjectItem(root, "PodUID"));
	a->node = cJSON_GetStringValue(cJSON_GetObjectItem(root, "Node"));
	return cJSON_IsObject(root) && a->name && a->ns && a->uid && a->node && *a->name && *a->node;
}

void extender_bind_arrive(void *ctx, const struct http_request *req)
{
	struct extender *x = ctx;
	backlog_arrive(&x->backlog);
	if (!x->o.assume_binds)
		return;
	cJSON *root = cJSON_ParseWithLength(req->body, req->body_len);
	struct bind_args a;
	struct claim c;
	claim_init(&c);
	bool have_args = bind_args(root, &a);
	bool counted = have_args && x->assume_choices && extender_choice_to_bind(x, a.uid, a.node);
	/* (A gang member's devices are its gang's place, counted already.) */
	if (have_args && !counted && pending_get(&x->pending, a.uid, &c) && claim_wants_gpu(&c) && !c.gang[0]) {
		/* kube-scheduler places its next pods while this bind waits on the API
		 * server: they must see these devices taken. */
		struct api_pod_ref pod = { .ns = a.ns, .name = a.name, .uid = a.uid };
		extender_assume_devices(x, &pod, a.node, &c);
	}
	claim_release(&c);
	jsonarena_delete(root);
}

/* The pod's claim: the one its filter decoded, else (cluster mode, after a restart) read again. 0, or -1 with err. */
static int bind_claim(struct extender *x, const struct bind_args *a, struct claim *c, char *err, size_t errlen)
{
	if (pending_get(&x->pending, a->uid, c))
		return 0;
	if (!x->o.fetch) {
		snprintf(err, errlen, "pod %s/%s (uid %s) was not seen in filter; its GPU request is unknown",
			 a->ns, a->name, a->uid);
		return -1;
	}
	return x->o.fetch(x->o.fetch_ctx, a->ns, a->name, a->uid, c, err, errlen) ? -1 : 0;
}

/* Hands the bind to the binder, under the pod's policy and the learned workload. A BIND_* result. */
static int bind_through(struct extender *x, const struct bind_args *a, const struct claim *c, char *err,
			size_t errlen)
{
	struct wl_copy *w = extender_wl_acquire(x);
	struct bind_request br = {
		.ns = a->ns, .name = a->name, .uid = a->uid, .node = a->node, .claim = c,
		.policy = { .id = extender_policy(x, c), .wl = w ? &w->wl : NULL, .seed = policy_hash(a->uid) },
	};
	int result = x->o.bind(x->o.bind_ctx, &br, err, errlen);
	extender_wl_release(w);
	if (result == BIND_OK) {
		/* The pending entry stays (it ages out): a retried bind must succeed again. */
		extender_wl_observe(x, c);
		err[0] = '\0';
	}
	return result;
}

void extender_bind(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct extender *x = ctx;
	cJSON *root = cJSON_ParseWithLength(req->body, req->body_len);
	struct bind_args a;
	bool have_args = bind_args(root, &a);
	char err[512] = "";
	struct claim c;
	claim_init(&c);
	int result = BIND_ERROR;
	if (extender_not_ready(x, resp, 200))
		goto out;
	if (!have_args) {
		httpd_error(resp, 400, cJSON_IsObject(root) ? "bind needs PodName, PodNamespace, PodUID and Node"
							     : "request body is not a JSON object (an ExtenderBindingArgs)");
		goto out;
	}
	if (!bind_claim(x, &a, &c, err, sizeof(err)))
		result = bind_through(x, &a, &c, err, sizeof(err));
	metrics_inc(M_BINDS, result);
	if (result == BIND_OK)
		log_info("bound", "pod=%s/%s node=%s", a.ns, a.name, a.node);
	else
		log_warn("bind refused", "pod=%s/%s node=%s reason=\"%s\"", a.ns, a.name, a.node, LOG_Q(err));
	bind_reply(resp, err);
out:
	/* What the arrival step assumed: the bind's own record (or nothing) stands now. */
	if (x->o.assume_binds && have_args)
		extender_forget_assumed(x, a.uid, a.node);
	backlog_answer(&x->backlog);
	claim_release(&c);
	jsonarena_delete(root);
}

int extender_bind_local(void *ctx, const struct bind_request *req, char *err, size_t errlen)
{
	struct cache *c = ctx;
	if (!claim_wants_gpu(req->claim))
		return BIND_OK;      /* nothing to reserve, and no API server to tell */
	int rc = BIND_OK;
	cache_lock(c);
	struct alloc a;
	char where[256];
	if (cache_find_alloc(c, req->uid, &a, where, sizeof(where))) {
		if (strcmp(where, req->node)) {
			snprintf(err, errlen, "pod already holds GPUs on node %s", where);
			rc = BIND_CONFLICT;
		}
		goto out;   /* the same bind again: already done */
	}
	const struct gpu_node *n = cache_peek(c, req->node);
	struct fit f;
	double score;
	if (!n) {
		snprintf(err, errlen, "node %s is not in the inventory", req->node);
		rc = BIND_NO_FIT;
	} else if (!policy_place(&req->policy, n, req->claim, &f, &score)) {
		snprintf(err, errlen, "node %s no longer fits: %s", req->node, f.reason);
		rc = BIND_NO_FIT;
	} else if (bind_alloc(&a, req, n, &f, err, errlen)) {
		rc = BIND_ERROR;
	} else if (cache_add_alloc(c, req->node, &a)) {
		snprintf(err, errlen, "out of memory");
		rc = BIND_ERROR;
	}
out:
	cache_unlock(c);
	return rc;
}

