/* kubectl gpu: the nodes, node and pods reports (cJSON documents; kgpu_render.c prints them). */
#include "kgpu.h"
#include "kgpu_impl.h"
#include "cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *find_claim(const cJSON *claims, const char *ns, const char *name)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, claims) {
		const cJSON *md = api_path(it, "metadata");
		const char *n = api_str(md, "name"), *s = api_str(md, "namespace");
		if (n && s && !strcmp(n, name) && !strcmp(s, ns))
			return it;
	}
	return NULL;
}

const cJSON *kg_claim_lookup(void *ctx, const char *ns, const char *name)
{
	return find_claim(((const struct kg_cluster *)ctx)->in.claims, ns, name);
}

int kg_pod_claim(const struct kg_cluster *c, const cJSON *pod, struct claim *out, char *err, size_t errlen)
{
	struct api_resources res;
	api_resources_default(&res);
	return api_pod_claim(pod, &res, kg_claim_lookup, (void *)c, out, err, errlen);
}

void kg_claim_text(const struct claim *c, char *out, size_t size)
{
	switch (c->mode) {
	case CLAIM_SHARED:
		snprintf(out, size, "%d shared (%u MiB, %u%%)", c->count, c->mem_mib, c->core / 10);
		break;
	case CLAIM_MIG:
		snprintf(out, size, "%d MIG", c->count);
		break;
	case CLAIM_EXCLUSIVE:
		snprintf(out, size, "%d whole", c->count);
		break;
	default:
		snprintf(out, size, "none");
	}
	size_t len = strlen(out);
	if (c->models[0] && len < size)
		snprintf(out + len, size - len, " %s", c->models);
}

static void add_models(const struct gpu_node *g, cJSON *models)
{
	for (int i = 0; g && i < g->ndev; i++) {
		const char *m = g->info[i].model[0] ? g->info[i].model : "unknown";
		bool seen = false;
		const cJSON *it;
		cJSON_ArrayForEach(it, models) seen = seen || !strcmp(it->valuestring, m);
		if (!seen)
			cJSON_AddItemToArray(models, cJSON_CreateString(m));
	}
}

cJSON *kg_report_nodes(const struct kg_cluster *c, char *err, size_t errlen)
{
	cJSON *doc = cJSON_CreateObject(), *items = cJSON_AddArrayToObject(doc, "items");
	for (int i = 0; i < c->n; i++) {
		const struct kg_node *n = &c->nodes[i];
		struct kg_counts k;
		kg_node_counts(n, &k);
		cJSON *it = cJSON_CreateObject();
		cJSON_AddStringToObject(it, "node", n->name);
		cJSON_AddBoolToObject(it, "agent", n->gn != NULL);
		cJSON_AddBoolToObject(it, "ledger", n->has_ledger);
		cJSON_AddNumberToObject(it, "total", k.total);
		cJSON_AddNumberToObject(it, "whole", k.whole);
		cJSON_AddNumberToObject(it, "shared", k.shared);
		cJSON_AddNumberToObject(it, "free", k.free);
		cJSON_AddNumberToObject(it, "unhealthy", k.unhealthy);
		cJSON_AddNumberToObject(it, "external", k.external);
		cJSON_AddNumberToObject(it, "reservations", n->led.n);
		cJSON_AddNumberToObject(it, "fragmentationPercent", (double)(int)(k.frag_pct + 0.5));
		cJSON_AddNumberToObject(it, "fgdGPUs", (double)(int)(k.fgd_gpus * 100 + 0.5) / 100);
		add_models(n->gn, cJSON_AddArrayToObject(it, "models"));
		kg_node_issues(c, n, cJSON_AddArrayToObject(it, "issues"));
		cJSON_AddItemToArray(items, it);
	}
	cJSON_AddItemToObject(doc, "notes", cJSON_Duplicate(c->notes, 1));
	if (!cJSON_IsObject(doc)) {
		snprintf(err, errlen, "out of memory");
		cJSON_Delete(doc);
		return NULL;
	}
	return doc;
}

static cJSON *holder_json(const struct kg_cluster *c, const struct ledger_entry *e)
{
	char who[320];
	kg_holder(c, e, who, sizeof(who));
	cJSON *h = cJSON_CreateObject();
	cJSON_AddStringToObject(h, "holder", who);
	cJSON_AddStringToObject(h, "mode", claim_mode_name(e->a.mode));
	if (e->a.mode == CLAIM_SHARED) {
		cJSON_AddNumberToObject(h, "memoryMiB", e->a.mem_mib);
		cJSON_AddNumberToObject(h, "corePercent", e->a.core / 10);
	}
	return h;
}

static cJSON *device_json(const struct kg_cluster *c, const struct kg_node *n, int i)
{
	const struct gpu_device *d = &n->gn->dev[i];
	const struct gpu_device_info *in = &n->gn->info[i];
	cJSON *dj = cJSON_CreateObject();
	cJSON_AddNumberToObject(dj, "id", d->id);
	cJSON_AddStringToObject(dj, "uuid", in->uuid);
	cJSON_AddStringToObject(dj, "model", in->mig_profile[0] ? in->mig_profile : in->model);
	cJSON_AddNumberToObject(dj, "memoryMiB", d->memory_mib);
	cJSON_AddStringToObject(dj, "island", d->island >= 0 ? n->gn->islands[d->island].name : "");
	cJSON_AddStringToObject(dj, "health", gpu_health_name(d->health));
	cJSON_AddBoolToObject(dj, "inUseOutside", d->external);
	cJSON_AddNumberToObject(dj, "usedMiB", d->used_mib);
	cJSON_AddNumberToObject(dj, "usedCorePercent", d->exclusive ? 100 : d->used_core / 10);
	cJSON *hs = cJSON_AddArrayToObject(dj, "holders");
	for (int k = 0; k < n->led.n; k++)
		for (int j = 0; j < n->led.e[k].a.ndev; j++)
			if (alloc_id(&n->led.e[k].a, j) == d->id)
				cJSON_AddItemToArray(hs, holder_json(c, &n->led.e[k]));
	return dj;
}

cJSON *kg_report_node(const struct kg_cluster *c, const char *node, char *err, size_t errlen)
{
	const struct kg_node *n = kg_cluster_node(c, node);
	if (!n) {
		snprintf(err, errlen, "node %s has neither a GpuNodeStatus nor a ledger", node);
		return NULL;
	}
	struct kg_counts k;
	kg_node_counts(n, &k);
	cJSON *doc = cJSON_CreateObject();
	cJSON_AddStringToObject(doc, "node", n->name);
	cJSON_AddNumberToObject(doc, "total", k.total);
	cJSON_AddNumberToObject(doc, "free", k.free);
	cJSON_AddNumberToObject(doc, "fragmentationPercent", (double)(int)(k.frag_pct + 0.5));
	cJSON *devs = cJSON_AddArrayToObject(doc, "devices");
	for (int i = 0; n->gn && i < n->gn->ndev; i++)
		cJSON_AddItemToArray(devs, device_json(c, n, i));
	/* The ledger as it is: what a reader without GpuNodeStatus sees, and gang places. */
	cJSON *res = cJSON_AddArrayToObject(doc, "reservations");
	for (int e = 0; e < n->led.n; e++) {
		char ids[256];
		cJSON *h = holder_json(c, &n->led.e[e]);
		alloc_ids(&n->led.e[e].a, ids, sizeof(ids));
		cJSON_AddStringToObject(h, "devices", ids);
		cJSON_AddItemToArray(res, h);
	}
	kg_node_issues(c, n, cJSON_AddArrayToObject(doc, "issues"));
	cJSON_AddItemToObject(doc, "notes", cJSON_Duplicate(c->notes, 1));
	if (!cJSON_IsObject(doc)) {
		snprintf(err, errlen, "out of memory");
		cJSON_Delete(doc);
		return NULL;
	}
	return doc;
}

/* Whether a pod is a GPU pod: labelled by the webhook, allocated, or asking for GPUs. */
static bool gpu_pod(const struct kg_cluster *c, const cJSON *pod, struct claim *cl, char *err, size_t errlen)
{
	claim_init(cl);
	int rc = kg_pod_claim(c, pod, cl, err, errlen);
	const char *managed = api_label(pod, LABEL_MANAGED);
	return (managed && !strcmp(managed, "true")) || api_annotation(pod, ANN_ALLOCATED) ||
	       api_annotation(pod, ANN_CLAIM) || (!rc && claim_wants_gpu(cl));
}

/* The pod's reservation in the ledger of its node: "ok", "missing", "differs" or "" (not bound, or unknown). */
static const char *reservation_state(const struct kg_cluster *c, const cJSON *pod, const char *node,
				     const char *alloc)
{
	const struct kg_node *n = node ? kg_cluster_node(c, node) : NULL;
	const char *uid = api_str(api_path(pod, "metadata"), "uid");
	if (!node || !c->in.ledgers || !uid)
		return "";
	int k = n ? ledger_find(&n->led, uid) : -1;
	if (k < 0)
		return alloc ? "missing" : "";
	char ids[256], want[600];
	alloc_ids(&n->led.e[k].a, ids, sizeof(ids));
	snprintf(want, sizeof(want), "%s:%s", node, ids);
	return !alloc || !strcmp(alloc, want) ? "ok" : "differs";
}

static cJSON *pod_json(const struct kg_cluster *c, const cJSON *pod)
{
	struct claim cl;
	char err[256] = "", what[224];
	if (!gpu_pod(c, pod, &cl, err, sizeof(err))) {
		claim_release(&cl);
		return NULL;
	}
	struct api_pod_ref r;
	api_pod_ref(pod, &r);
	const char *node = api_str(api_path(pod, "spec"), "nodeName"), *alloc = api_pod_allocated(pod, NULL, 0);
	const char *phase = api_str(api_path(pod, "status"), "phase"), *colon = alloc ? strrchr(alloc, ':') : NULL;
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "namespace", r.ns);
	cJSON_AddStringToObject(p, "name", r.name);
	cJSON_AddStringToObject(p, "phase", phase ? phase : "");
	cJSON_AddStringToObject(p, "node", node ? node : "");
	cJSON_AddStringToObject(p, "devices", colon ? colon + 1 : "");
	const char *uuids = api_annotation(pod, ANN_UUIDS);
	cJSON_AddStringToObject(p, "uuids", uuids ? uuids : "");
	if (err[0])
		snprintf(what, sizeof(what), "invalid: %s", err);
	else
		kg_claim_text(&cl, what, sizeof(what));
	cJSON_AddStringToObject(p, "asks", what);
	cJSON_AddStringToObject(p, "claim", cl.gpuclaim);
	cJSON_AddStringToObject(p, "gang", cl.gang);
	cJSON_AddStringToObject(p, "reservation", reservation_state(c, pod, node, alloc));
	claim_release(&cl);
	return p;
}

cJSON *kg_report_pods(const struct kg_cluster *c, char *err, size_t errlen)
{
	cJSON *doc = cJSON_CreateObject(), *items = cJSON_AddArrayToObject(doc, "items");
	for (int i = 0; i < c->npods; i++) {
		cJSON *p = pod_json(c, c->pods[i].pod);
		if (p)
			cJSON_AddItemToArray(items, p);
	}
	/* The pods' GPUs come from their annotations and the ledgers: what the agents publish is not missed here. */
	cJSON *notes = cJSON_AddArrayToObject(doc, "notes");
	const cJSON *it;
	cJSON_ArrayForEach(it, c->notes)
		if (strncmp(it->valuestring, "GpuNodeStatus", 13))
			cJSON_AddItemToArray(notes, cJSON_CreateString(it->valuestring));
	if (!cJSON_IsObject(doc)) {
		snprintf(err, errlen, "out of memory");
		cJSON_Delete(doc);
		return NULL;
	}
	return doc;
}
