/*
 * kubectl gpu why POD: the extender's filter worked out again from what the
 * API server records. Every node's devices (GpuNodeStatus) with the ledgers'
 * reservations applied go through the scoring core's fit_node, as the
 * filter does; the reasons are counted per node; a gang is planned with
 * gang_plan on the same nodes.
 */
#include "kgpu.h"
#include "kgpu_impl.h"
#include "fit.h"
#include "gang.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_GNS_REASON "no GpuNodeStatus for this node (no GPUs reported; is gpu-agent running there?)"

/* Adds one node to the count of its reason. */
static void count_reason(cJSON *reasons, const char *why)
{
	cJSON *it;
	cJSON_ArrayForEach(it, reasons) {
		if (!strcmp(cJSON_GetObjectItemCaseSensitive(it, "reason")->valuestring, why)) {
			cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "nodes");
			cJSON_SetNumberValue(n, n->valuedouble + 1);
			return;
		}
	}
	it = cJSON_CreateObject();
	cJSON_AddStringToObject(it, "reason", why);
	cJSON_AddNumberToObject(it, "nodes", 1);
	cJSON_AddItemToArray(reasons, it);
}

static int by_count(const void *a, const void *b)
{
	const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
	double dx = cJSON_GetObjectItemCaseSensitive(x, "nodes")->valuedouble;
	double dy = cJSON_GetObjectItemCaseSensitive(y, "nodes")->valuedouble;
	return dx < dy ? 1 : dx > dy ? -1 : 0;
}

/* reasons sorted by how many nodes gave each, most first. */
static cJSON *sorted_reasons(cJSON *reasons)
{
	int n = cJSON_GetArraySize(reasons), i = 0;
	if (n < 2)
		return reasons;
	cJSON **v = malloc((size_t)n * sizeof(*v));
	if (!v)
		return reasons;
	while (reasons->child)
		v[i++] = cJSON_DetachItemViaPointer(reasons, reasons->child);
	qsort(v, (size_t)n, sizeof(*v), by_count);
	for (i = 0; i < n; i++)
		cJSON_AddItemToArray(reasons, v[i]);
	free(v);
	return reasons;
}

/* A copy of n with nothing held: would the claim fit the node at all? */
static bool fits_empty(const struct gpu_node *n, const struct claim *cl)
{
	struct gpu_node *e = gpu_node_clone(n);
	if (!e)
		return false;
	for (int i = 0; i < e->ndev; i++) {
		gpu_clear_usage(&e->dev[i]);
		e->dev[i].external = false;
	}
	struct fit f;
	bool ok = fit_node(e, cl, PACK_BINPACK, &f);
	gpu_node_free(e);
	return ok;
}

struct tally {
	int nodes, fit, fit_empty;
};

/* Every node through fit_node; reasons counted, nodes that fit listed. */
static void filter_nodes(const struct kg_cluster *c, const struct claim *cl, cJSON *doc, struct tally *t)
{
	cJSON *reasons = cJSON_CreateArray(), *fits = cJSON_CreateArray();
	for (int i = 0; i < c->n; i++) {
		const struct gpu_node *g = c->nodes[i].gn;
		t->nodes++;
		if (!g) {
			count_reason(reasons, NO_GNS_REASON);
			continue;
		}
		struct fit f;
		if (fit_node(g, cl, PACK_BINPACK, &f)) {
			t->fit++;
			t->fit_empty++;
			cJSON_AddItemToArray(fits, cJSON_CreateString(g->name));
			continue;
		}
		count_reason(reasons, f.reason);
		t->fit_empty += fits_empty(g, cl);
	}
	/* Nodes without any GPU record (read from the Node list, when readable). */
	const cJSON *it;
	cJSON_ArrayForEach(it, c->in.nodes) {
		const char *name = api_str(api_path(it, "metadata"), "name");
		if (name && !kg_cluster_node(c, name)) {
			t->nodes++;
			count_reason(reasons, NO_GNS_REASON);
		}
	}
	cJSON_AddNumberToObject(doc, "nodes", t->nodes);
	cJSON_AddItemToObject(doc, "reasons", sorted_reasons(reasons));
	cJSON_AddItemToObject(doc, "fitsNow", fits);
	cJSON_AddNumberToObject(doc, "fitsEmpty", t->fit_empty);
}

/* The object ns/name among items, or NULL. */
static const cJSON *find_object(const cJSON *items, const char *ns, const char *name)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, items) {
		const cJSON *md = api_path(it, "metadata");
		const char *n = api_str(md, "name"), *s = api_str(md, "namespace");
		if (n && s && !strcmp(n, name) && !strcmp(s, ns))
			return it;
	}
	return NULL;
}

/*
 * Members the gang needs, from its object as the extender reads it: a
 * coscheduling PodGroup's minMember, a Workload pod group's or a
 * scheduling.k8s.io PodGroup's gang.minCount. 0 when the object was not
 * read (absent, not served, refused) or sets no gang.
 */
static int gang_min(const struct kg_cluster *c, const char *ns, const struct claim *cl)
{
	const cJSON *obj;
	char wl[128], group[128], why[200];
	double min;
	int size = 0;
	switch (cl->gang_kind) {
	case GANG_POD_GROUP:
		obj = find_object(c->in.podgroups, ns, cl->gang);
		return api_whole(cJSON_GetObjectItemCaseSensitive(api_path(obj, "spec"), "minMember"), 1,
				 GANG_SIZE_MAX, &min) ? (int)min : 0;
	case GANG_WORKLOAD:   /* "workload/podGroup[/replica]" */
		if (sscanf(cl->gang, "%127[^/]/%127[^/]", wl, group) != 2)
			return 0;
		obj = find_object(c->in.workloads, ns, wl);
		return obj && api_workload_gang(obj, group, &size, why, sizeof(why)) == 1 ? size : 0;
	case GANG_SCHEDULING_GROUP:
		obj = find_object(c->in.k8s_podgroups, ns, cl->gang + strlen(CLAIM_PODGROUP_PREFIX));
		return obj && api_podgroup_gang(obj, &size, why, sizeof(why)) == 1 ? size : 0;
	default:
		return 0;
	}
}

struct gang_state {
	int present, bound, needed, places;
};

/* Members of the pod's gang in its namespace (pods whose claim names the gang), bound ones, places held. */
static void gang_count(const struct kg_cluster *c, const char *ns, const struct claim *cl, struct gang_state *g)
{
	memset(g, 0, sizeof(*g));
	g->needed = cl->gang_size ? cl->gang_size : gang_min(c, ns, cl);
	for (int i = 0; i < c->npods; i++) {
		if (strcmp(c->pods[i].ns, ns) || api_pod_finished(c->pods[i].pod))
			continue;
		struct claim m;
		char err[256];
		claim_init(&m);
		if (!kg_pod_claim(c, c->pods[i].pod, &m, err, sizeof(err)) && !strcmp(m.gang, cl->gang)) {
			g->present++;
			g->bound += api_str(api_path(c->pods[i].pod, "spec"), "nodeName") != NULL;
		}
		claim_release(&m);
	}
	for (int i = 0; i < c->n; i++)
		for (int k = 0; k < c->nodes[i].led.n; k++) {
			const struct ledger_entry *e = &c->nodes[i].led.e[k];
			g->places += ledger_entry_is_place(e) && !strcmp(e->ns, ns) && !strcmp(e->name, cl->gang);
		}
}

/* The members still to place, planned on every node as they are used now (the extender's gang_plan). */
static void gang_fit(const struct kg_cluster *c, const struct claim *cl, int members, cJSON *gj)
{
	const struct gpu_node **nodes = calloc((size_t)c->n + 1, sizeof(*nodes));
	int n = 0;
	for (int i = 0; nodes && i < c->n; i++)
		if (c->nodes[i].gn)
			nodes[n++] = c->nodes[i].gn;
	struct gang_plan p;
	memset(&p, 0, sizeof(p));
	if (nodes && members > 0 && !gang_plan(nodes, n, cl, members, "topology.kubernetes.io/zone", &p)) {
		cJSON_AddBoolToObject(gj, "fits", p.ok);
		cJSON_AddNumberToObject(gj, "placesFree", p.places);
		if (!p.ok)
			cJSON_AddStringToObject(gj, "reason", p.reason);
		gang_plan_release(&p);
	}
	free(nodes);
}

static cJSON *gang_json(const struct kg_cluster *c, const char *ns, const struct claim *cl, struct gang_state *g)
{
	gang_count(c, ns, cl, g);
	cJSON *gj = cJSON_CreateObject();
	cJSON_AddStringToObject(gj, "name", cl->gang);
	cJSON_AddNumberToObject(gj, "present", g->present);
	cJSON_AddNumberToObject(gj, "needed", g->needed);
	cJSON_AddNumberToObject(gj, "bound", g->bound);
	cJSON_AddNumberToObject(gj, "placesReserved", g->places);
	if (!g->places)
		gang_fit(c, cl, (g->needed ? g->needed : g->present) - g->bound, gj);
	return gj;
}

static const char *verdict(const struct tally *t, const struct gang_state *g, bool gang, char *out, size_t size)
{
	if (gang && g->needed && g->present < g->needed)
		snprintf(out, size, "waits for its gang: %d of %d members exist; none is placed before all are there",
			 g->present, g->needed);
	else if (gang && g->places)
		snprintf(out, size, "its gang holds %d reserved place%s: kube-scheduler binds the members into them",
			 g->places, g->places == 1 ? "" : "s");
	else if (t->fit)
		snprintf(out, size, "fits on %d node%s now: kube-scheduler retries it after its backoff, or another of "
			 "its filters refuses those nodes (see the pod's events)", t->fit, t->fit == 1 ? "" : "s");
	else if (t->fit_empty)
		snprintf(out, size, "no node has room now; %d node%s would take it once GPUs there are freed",
			 t->fit_empty, t->fit_empty == 1 ? "" : "s");
	else
		snprintf(out, size, "fits nowhere in the cluster, even on empty nodes: change the claim or add GPUs");
	return out;
}

/* A pod that is not waiting: where it runs. */
static void bound_doc(cJSON *doc, const cJSON *pod, const char *node)
{
	const char *alloc = api_pod_allocated(pod, NULL, 0);
	char line[640];
	snprintf(line, sizeof(line), "bound to %s%s%s", node, alloc ? " with GPUs " : "",
		 alloc ? (strchr(alloc, ':') ? strchr(alloc, ':') + 1 : alloc) : "");
	cJSON_AddStringToObject(doc, "verdict", line);
}

cJSON *kg_report_why(const struct kg_cluster *c, const char *ns, const char *name, char *err, size_t errlen)
{
	const cJSON *pod = kg_cluster_pod(c, ns, name);
	if (!pod) {
		snprintf(err, errlen, "pod %s/%s not found", ns, name);
		return NULL;
	}
	cJSON *doc = cJSON_CreateObject();
	cJSON_AddStringToObject(doc, "pod", name);
	cJSON_AddStringToObject(doc, "namespace", ns);
	struct claim cl;
	char why[256] = "", text[640];
	claim_init(&cl);
	int rc = kg_pod_claim(c, pod, &cl, why, sizeof(why));
	kg_claim_text(&cl, text, sizeof(text));
	cJSON_AddStringToObject(doc, "asks", rc ? "" : text);
	cJSON_AddStringToObject(doc, "claim", cl.gpuclaim);
	const char *node = api_str(api_path(pod, "spec"), "nodeName");
	const cJSON *cond;
	cJSON_ArrayForEach(cond, api_path(pod, "status.conditions")) {
		const char *type = api_str(cond, "type"), *msg = api_str(cond, "message");
		if (type && !strcmp(type, "PodScheduled") && msg && !node)
			cJSON_AddStringToObject(doc, "schedulerMessage", msg);
	}
	if (node) {
		bound_doc(doc, pod, node);
	} else if (rc) {
		snprintf(text, sizeof(text), "its GPU request is refused on every node: %s", why);
		cJSON_AddStringToObject(doc, "verdict", text);
	} else if (!claim_wants_gpu(&cl)) {
		cJSON_AddStringToObject(doc, "verdict", "asks for no GPUs: the extender passes it on every node");
	} else if (!c->in.gns) {
		cJSON_AddStringToObject(doc, "verdict", "cannot tell where it fits: GpuNodeStatus is not readable "
							"with these credentials (see the pod's events)");
	} else {
		struct tally t = { 0, 0, 0 };
		struct gang_state g = { 0, 0, 0, 0 };
		filter_nodes(c, &cl, doc, &t);
		if (cl.gang[0])
			cJSON_AddItemToObject(doc, "gang", gang_json(c, ns, &cl, &g));
		cJSON_AddStringToObject(doc, "verdict", verdict(&t, &g, cl.gang[0] != 0, text, sizeof(text)));
	}
	claim_release(&cl);
	cJSON_AddItemToObject(doc, "notes", cJSON_Duplicate(c->notes, 1));
	if (!cJSON_IsObject(doc) || !cJSON_GetObjectItemCaseSensitive(doc, "verdict")) {
		snprintf(err, errlen, "out of memory");
		cJSON_Delete(doc);
		return NULL;
	}
	return doc;
}
