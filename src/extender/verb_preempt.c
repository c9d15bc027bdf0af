/*
 * POST /preempt: of the victims kube-scheduler proposes on each node, the
 * nodes where the pod's claim would fit once their GPUs are free.
 */
#include "extender_impl.h"

/* The victims' UIDs of one node entry (meta form or full pods). */
static int victim_uids(const cJSON *entry, const char **uids, int max)
{
	int n = 0;
	const cJSON *p;
	cJSON_ArrayForEach(p, cJSON_GetObjectItem(entry, "Pods")) {
		const char *uid = cJSON_GetStringValue(cJSON_GetObjectItem(p, "UID"));
		if (!uid)
			uid = api_str(api_path(p, "metadata"), "uid");
		if (uid && n < max)
			uids[n++] = uid;
	}
	return n;
}

/* Would the claim fit on the node once the victims' GPUs are free? */
static bool fits_without(const struct cache_node *cn, const struct claim *c, const char **uids, int nv)
{
	if (!claim_wants_gpu(c))
		return true;
	if (!cn || !cn->has_gns)
		return false;
	struct gpu_node *n = gpu_node_clone(cn->node);
	if (!n)
		return false;
	extender_unapply_pods(n, cn, uids, nv);
	bool ok = fit_possible(n, c);
	gpu_node_free(n);
	return ok;
}

void extender_preempt(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct extender *x = ctx;
	if (extender_not_ready(x, resp, 503))
		return;
	struct verb_args a;
	memset(&a, 0, sizeof(a));
	claim_init(&a.claim);
	a.root = cJSON_ParseWithLength(req->body, req->body_len);
	if (!cJSON_IsObject(a.root)) {
		httpd_error(resp, 400, "request body is not a JSON object");
		goto out;
	}
	if (extender_parse_pod(x, &a, cJSON_GetObjectItem(a.root, "Pod"), resp))
		goto out;
	const cJSON *map = cJSON_GetObjectItem(a.root, "NodeNameToMetaVictims");
	if (!cJSON_IsObject(map))
		map = cJSON_GetObjectItem(a.root, "NodeNameToVictims");
	struct buf *out = &resp->body;
	buf_adds(out, "{\"NodeNameToMetaVictims\":{");
	bool first = true;
	struct snapshot *snap = cache_acquire(x->o.cache);
	const cJSON *entry;
	cJSON_ArrayForEach(entry, map) {
		const char *uids[512];
		int nv = victim_uids(entry, uids, 512);
		if (!a.claim_ok || !nv || !fits_without(snapshot_find(snap, entry->string), &a.claim, uids, nv))
			continue;
		if (!first)
			buf_addc(out, ',');
		first = false;
		buf_add_json_str(out, entry->string);
		buf_adds(out, ":{\"Pods\":[");
		for (int k = 0; k < nv; k++) {
			buf_adds(out, k ? ",{\"UID\":" : "{\"UID\":");
			buf_add_json_str(out, uids[k]);
			buf_addc(out, '}');
		}
		double pdbs = 0;
		api_whole(cJSON_GetObjectItem(entry, "NumPDBViolations"), 0, 1e9, &pdbs);
		buf_printf(out, "],\"NumPDBViolations\":%lld}", (long long)pdbs);
	}
	snapshot_release(snap);
	if (buf_adds(out, "}}\n"))
		httpd_error(resp, 500, "reply too large");
out:
	extender_args_release(&a);
}
