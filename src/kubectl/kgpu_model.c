/* kubectl gpu: the cluster model (GpuNodeStatus + ledgers + pods), counts and disagreements. */
#include "kgpu.h"
#include "cache.h"
#include "frag.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int node_cmp(const void *a, const void *b)
{
	return strcmp(((const struct kg_node *)a)->name, ((const struct kg_node *)b)->name);
}

static int pod_cmp(const void *a, const void *b)
{
	const struct kg_pod_key *x = a, *y = b;
	int r = strcmp(x->ns, y->ns);
	return r ? r : strcmp(x->name, y->name);
}

static void note(struct kg_cluster *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct kg_cluster *c, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	cJSON_AddItemToArray(c->notes, cJSON_CreateString(line));
}

/* The node of that name, added (empty) when new; NULL when out of memory. */
static struct kg_node *node_slot(struct kg_cluster *c, const char *name, int *cap)
{
	for (int i = 0; i < c->n; i++)
		if (!strcmp(c->nodes[i].name, name))
			return &c->nodes[i];
	if (c->n == *cap) {
		int nc = *cap ? *cap * 2 : 16;
		struct kg_node *nn = realloc(c->nodes, (size_t)nc * sizeof(*nn));
		if (!nn)
			return NULL;
		c->nodes = nn;
		*cap = nc;
	}
	struct kg_node *n = &c->nodes[c->n++];
	memset(n, 0, sizeof(*n));
	snprintf(n->name, sizeof(n->name), "%s", name);
	ledger_init(&n->led, name);
	return n;
}

static const cJSON *node_object(const cJSON *nodes, const char *name)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, nodes) {
		const char *nm = api_str(api_path(it, "metadata"), "name");
		if (nm && !strcmp(nm, name))
			return it;
	}
	return NULL;
}

static int add_gns(struct kg_cluster *c, const cJSON *gns, int *cap)
{
	const char *name = api_gns_node_name(gns);
	if (!name || !*name) {
		note(c, "a GpuNodeStatus without a node name is left out");
		return 0;
	}
	char err[256];
	const cJSON *node = node_object(c->in.nodes, name);
	struct gpu_node *gn = node ? api_node_decode(node, err, sizeof(err)) : gpu_node_new(name);
	if (!gn)
		return node ? (note(c, "Node %s: %s", name, err), 0) : -1;
	const char *nn;
	if (api_gns_decode(gns, gn, &nn, err, sizeof(err))) {
		note(c, "GpuNodeStatus %s does not decode: %s", name, err);
		gpu_node_free(gn);
		return 0;
	}
	struct kg_node *n = node_slot(c, name, cap);
	if (!n) {
		gpu_node_free(gn);
		return -1;
	}
	gpu_node_free(n->gn);
	n->gn = gn;
	return 0;
}

static int add_ledger(struct kg_cluster *c, const cJSON *lease, int *cap)
{
	const char *node = api_annotation(lease, LEDGER_ANN_NODE);
	if (!node || !*node)
		return 0;   /* not a ledger (the label selector should have kept it out) */
	struct kg_node *n = node_slot(c, node, cap);
	if (!n)
		return -1;
	struct ledger l;
	char err[224];
	n->has_ledger = true;
	if (ledger_decode(lease, &l, err, sizeof(err))) {
		snprintf(n->ledger_err, sizeof(n->ledger_err), "%s", err);
		return 0;
	}
	ledger_release(&n->led);
	n->led = l;
	return 0;
}

static int index_pods(struct kg_cluster *c)
{
	int np = cJSON_GetArraySize(c->in.pods);
	if (!np)
		return 0;
	c->pods = calloc((size_t)np, sizeof(*c->pods));
	if (!c->pods)
		return -1;
	const cJSON *it;
	cJSON_ArrayForEach(it, c->in.pods) {
		struct api_pod_ref r;
		api_pod_ref(it, &r);
		if (!r.ns || !r.name)
			continue;
		c->pods[c->npods++] = (struct kg_pod_key){ r.ns, r.name, it };
	}
	qsort(c->pods, (size_t)c->npods, sizeof(*c->pods), pod_cmp);
	return 0;
}

int kg_cluster_build(struct kg_cluster *c, const struct kg_inputs *in, char *err, size_t errlen)
{
	memset(c, 0, sizeof(*c));
	c->in = *in;
	c->notes = cJSON_CreateArray();
	int cap = 0;
	const cJSON *it;
	int rc = c->notes ? 0 : -1;
	cJSON_ArrayForEach(it, in->gns) {
		if (rc || (rc = add_gns(c, it, &cap)))
			break;
	}
	cJSON_ArrayForEach(it, in->ledgers) {
		if (rc || (rc = add_ledger(c, it, &cap)))
			break;
	}
	if (!rc)
		rc = index_pods(c);
	if (rc) {
		snprintf(err, errlen, "out of memory");
		kg_cluster_release(c);
		return -1;
	}
	if (c->n)
		qsort(c->nodes, (size_t)c->n, sizeof(*c->nodes), node_cmp);
	/* The devices' usage: every reservation of the node's ledger (as the extender's cache has it). */
	for (int i = 0; i < c->n; i++)
		for (int k = 0; c->nodes[i].gn && k < c->nodes[i].led.n; k++)
			alloc_apply(c->nodes[i].gn, &c->nodes[i].led.e[k].a);
	if (!in->gns)
		note(c, "GpuNodeStatus not readable: devices unknown");
	if (!in->ledgers)
		note(c, "ledger Leases not readable: what the extender reserved is unknown (counted free)");
	if (in->pods_refused && in->ledgers)
		note(c, "pods of namespaces other than %s not readable: their reservations show as \"other\"",
		     in->pods_ns);
	return 0;
}

void kg_cluster_release(struct kg_cluster *c)
{
	for (int i = 0; i < c->n; i++) {
		gpu_node_free(c->nodes[i].gn);
		ledger_release(&c->nodes[i].led);
	}
	free(c->nodes);
	free(c->pods);
	cJSON_Delete(c->notes);
	memset(c, 0, sizeof(*c));
}

const struct kg_node *kg_cluster_node(const struct kg_cluster *c, const char *name)
{
	struct kg_node key;
	snprintf(key.name, sizeof(key.name), "%s", name);
	return c->n ? bsearch(&key, c->nodes, (size_t)c->n, sizeof(*c->nodes), node_cmp) : NULL;
}

const cJSON *kg_cluster_pod(const struct kg_cluster *c, const char *ns, const char *name)
{
	struct kg_pod_key key = { ns, name, NULL };
	const struct kg_pod_key *k =
		c->npods ? bsearch(&key, c->pods, (size_t)c->npods, sizeof(*c->pods), pod_cmp) : NULL;
	return k ? k->pod : NULL;
}

bool kg_ns_readable(const struct kg_cluster *c, const char *ns)
{
	return c->in.pods && (!c->in.pods_ns || !strcmp(c->in.pods_ns, ns));
}

void kg_holder(const struct kg_cluster *c, const struct ledger_entry *e, char *out, size_t size)
{
	if (!kg_ns_readable(c, e->ns))
		snprintf(out, size, "other");
	else if (ledger_entry_is_place(e))
		snprintf(out, size, "%s/%s (gang place)", e->ns, e->name);
	else if (!kg_cluster_pod(c, e->ns, e->name))
		snprintf(out, size, "%s/%s (no such pod)", e->ns, e->name);
	else
		snprintf(out, size, "%s/%s", e->ns, e->name);
}

void kg_node_counts(const struct kg_node *n, struct kg_counts *out)
{
	memset(out, 0, sizeof(*out));
	if (!n->gn)
		return;
	for (int i = 0; i < n->gn->ndev; i++) {
		const struct gpu_device *d = &n->gn->dev[i];
		out->total++;
		if (d->health != GPU_HEALTHY)
			out->unhealthy++;
		else if (d->external)
			out->external++;
		if (d->exclusive)
			out->whole++;
		else if (d->shared)
			out->shared++;
		else if (gpu_usable(d))
			out->free++;
	}
	/* Idle compute that only shares can use: on devices a share already holds. */
	int64_t idle = 0, partial = 0;
	for (int i = 0; i < n->gn->ndev; i++) {
		const struct gpu_device *d = &n->gn->dev[i];
		if (!gpu_usable(d) || d->mig || d->exclusive)
			continue;
		idle += gpu_free_core(d);
		partial += d->shared ? gpu_free_core(d) : 0;
	}
	out->frag_pct = idle ? 100.0 * (double)partial / (double)idle : 0;
	/* The FGD measure with its default workload, also for the shape of the node (a 2-GPU node strands 8-GPU tasks). */
	struct frag_node fn;
	frag_node_init(&fn, n->gn, NULL);
	out->fgd_gpus = frag_amount(&fn, NULL, 0) / GPU_CORE_FULL;
}

static void issue(cJSON *issues, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void issue(cJSON *issues, const char *fmt, ...)
{
	char line[640];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	cJSON_AddItemToArray(issues, cJSON_CreateString(line));
}

/* Ledger against the agent: devices it does not list, held twice, unhealthy or used outside, over capacity. */
static void ledger_vs_agent(const struct kg_cluster *c, const struct kg_node *n, cJSON *issues)
{
	const struct gpu_node *g = n->gn;
	char who[320];
	for (int k = 0; k < n->led.n; k++) {
		const struct ledger_entry *e = &n->led.e[k];
		kg_holder(c, e, who, sizeof(who));
		for (int j = 0; j < e->a.ndev; j++) {
			int id = alloc_id(&e->a, j), i = gpu_node_find_device(g, id);
			if (i < 0)
				issue(issues, "ledger: %s holds GPU %d, which the agent does not list", who, id);
			else if (g->dev[i].health != GPU_HEALTHY)
				issue(issues, "ledger: %s holds GPU %d, which the agent reports %s", who, id,
				      gpu_health_name(g->dev[i].health));
			else if (g->dev[i].external)
				issue(issues, "ledger: %s holds GPU %d, which the agent reports in use outside the extender",
				      who, id);
		}
	}
	for (int i = 0; i < g->ndev; i++) {
		const struct gpu_device *d = &g->dev[i];
		if (d->exclusive > 1 || (d->exclusive && d->shared))
			issue(issues, "ledger: GPU %d held by %d reservations, one of them whole", d->id,
			      d->exclusive + d->shared);
		if (d->shared && (d->used_mib > d->memory_mib || d->used_core > GPU_CORE_FULL))
			issue(issues, "ledger: GPU %d shares take %u MiB and %u%% of %u MiB and 100%%", d->id,
			      d->used_mib, d->used_core / 10, d->memory_mib);
	}
}

/* Pods bound here with an allocation (that the reader can read) against the ledger. */
static void pods_vs_ledger(const struct kg_cluster *c, const struct kg_node *n, cJSON *issues)
{
	char want[64 + 254 + 2];
	snprintf(want, sizeof(want), "%s:", n->name);
	for (int i = 0; i < c->npods; i++) {
		const cJSON *pod = c->pods[i].pod;
		char why[256] = "";
		const char *alloc = api_pod_allocated(pod, why, sizeof(why));
		const char *on = api_str(api_path(pod, "spec"), "nodeName");
		if (why[0] && on && !strcmp(on, n->name))
			issue(issues, "pod %s/%s: %s", c->pods[i].ns, c->pods[i].name, why);
		if (!alloc || !on || strcmp(on, n->name) || api_pod_finished(pod))
			continue;
		const char *uid = api_str(api_path(pod, "metadata"), "uid");
		int k = uid ? ledger_find(&n->led, uid) : -1;
		if (k < 0) {
			issue(issues, "ledger: pod %s/%s is bound here with GPUs %s but has no reservation",
			      c->pods[i].ns, c->pods[i].name, strncmp(alloc, want, strlen(want)) ? alloc : alloc + strlen(want));
			continue;
		}
		char ids[256];
		alloc_ids(&n->led.e[k].a, ids, sizeof(ids));
		if (strncmp(alloc, want, strlen(want)) || strcmp(alloc + strlen(want), ids))
			issue(issues, "ledger: pod %s/%s is bound with %s, its reservation holds %s", c->pods[i].ns,
			      c->pods[i].name, alloc, ids);
	}
}

void kg_node_issues(const struct kg_cluster *c, const struct kg_node *n, cJSON *issues)
{
	if (n->ledger_err[0])
		issue(issues, "ledger does not decode: %s", n->ledger_err);
	if (!n->gn && n->led.n && c->in.gns)
		issue(issues, "ledger holds %d reservation%s but the agent publishes no GpuNodeStatus", n->led.n,
		      n->led.n == 1 ? "" : "s");
	if (n->gn)
		ledger_vs_agent(c, n, issues);
	char who[320];
	for (int k = 0; k < n->led.n; k++) {
		const struct ledger_entry *e = &n->led.e[k];
		kg_holder(c, e, who, sizeof(who));
		if (strstr(who, "(no such pod)"))
			issue(issues, "ledger: %s reserved here, the pod is gone (the extender's reaper releases it)",
			      who);
	}
	if (c->in.ledgers)
		pods_vs_ledger(c, n, issues);
}
