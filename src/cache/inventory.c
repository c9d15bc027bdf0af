#include "inventory.h"
#include "api.h"
#include "log.h"
#include "strmap.h"
#include "strnum.h"
#include "yamljson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What to do with each decoded object of an inventory file. */
struct inventory_sink {
	int (*node)(void *ctx, struct gpu_node *labels, const cJSON *obj);   /* takes ownership */
	int (*gpus)(void *ctx, const char *node, struct gpu_node *devs);  /* takes ownership */
	int (*gpuclaim)(void *ctx, const cJSON *obj);
	void *ctx;
};

static int walk(const cJSON *root, const struct inventory_sink *sink, char *err, size_t errlen)
{
	/* A List, a bare array, or one object. */
	const cJSON *items = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "items") : root;
	const cJSON *single = items ? NULL : root;
	if (items && !cJSON_IsArray(items)) {
		snprintf(err, errlen, "items must be a list");
		return -1;
	}
	int idx = 0;
	const cJSON *it = single;
	if (items)
		it = items->child;
	for (; it; it = single ? NULL : it->next, idx++) {
		const char *kind = api_str(it, "kind");
		const char *name = api_str(api_path(it, "metadata"), "name");
		char why[256] = "";
		int rc = 0;
		if (!kind) {
			snprintf(why, sizeof(why), "no kind");
			rc = -1;
		} else if (!strcmp(kind, "Node")) {
			struct gpu_node *n = api_node_decode(it, why, sizeof(why));
			rc = n ? sink->node(sink->ctx, n, it) : -1;
		} else if (!strcmp(kind, "GpuNodeStatus")) {
			const char *node = api_gns_node_name(it);
			struct gpu_node *devs = gpu_node_new(node ? node : "");
			if (!devs)
				snprintf(why, sizeof(why), "out of memory");
			rc = devs ? api_gns_decode(it, devs, &node, why, sizeof(why)) : -1;
			if (!rc)
				rc = sink->gpus(sink->ctx, node, devs);
			else
				gpu_node_free(devs);
		} else if (!strcmp(kind, "GpuClaim")) {
			/*
			 * Kept even when invalid, as the API server would keep it: the
			 * pods that reference it are rejected with the reason.
			 */
			if (sink->gpuclaim) {
				struct claim c;
				if (api_gpuclaim_decode(it, &c, why, sizeof(why)))
					log_warn("inventory: invalid GpuClaim", "index=%d name=%s error=\"%s\"",
						 idx, name ? name : "?", LOG_Q(why));
				claim_release(&c);
				why[0] = '\0';
				rc = sink->gpuclaim(sink->ctx, it);
			}
		} else {
			log_warn("inventory: skipping an object of an unknown kind", "kind=%s index=%d", kind, idx);
		}
		if (rc) {
			snprintf(err, errlen, "items[%d] (%s %s): %s", idx, kind ? kind : "?",
				 name ? name : "?", why[0] ? why : "could not be stored");
			return -1;
		}
	}
	return 0;
}

/* ---- into the cache ---- */

static int cache_node_cb(void *ctx, struct gpu_node *n, const cJSON *obj)
{
	(void)obj;   /* host resources: kube-scheduler checks them, the cache does not track them */
	struct cache *c = ctx;
	char *name = strdup(n->name);
	int rc = name ? cache_set_node(c, name, n) : -1;
	if (!name)
		gpu_node_free(n);
	free(name);
	return rc;
}

static int cache_gpus_cb(void *ctx, const char *node, struct gpu_node *devs)
{
	struct cache *c = ctx;
	return cache_set_gpus(c, node, devs);
}

static int cache_claim_cb(void *ctx, const cJSON *obj)
{
	struct api_pod_ref ref;
	api_pod_ref(obj, &ref);
	cJSON *copy = cJSON_Duplicate(obj, true);
	return copy ? cache_set_gpuclaim(ctx, ref.ns, ref.name, copy) : -1;
}

/* ---- into a node list ---- */

struct node_list {
	struct gpu_node **v;
	size_t n, cap;
	struct strmap by_name;
};

static struct gpu_node *list_find(struct node_list *l, const char *name)
{
	struct gpu_node *n = strmap_get(&l->by_name, name);
	if (n)
		return n;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct gpu_node **v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return NULL;
		l->v = v;
		l->cap = cap;
	}
	n = gpu_node_new(name);
	if (n && strmap_put(&l->by_name, name, n, NULL)) {
		gpu_node_free(n);
		n = NULL;
	}
	if (n)
		l->v[l->n++] = n;
	return n;
}

/* The simulator checks host resources too: a Node's allocatable cpu and memory. */
static void host_capacity(struct gpu_node *n, const cJSON *node)
{
	const cJSON *alloc = api_path(node, "status.allocatable");
	const char *cpu = api_str(alloc, "cpu"), *mem = api_str(alloc, "memory");
	int64_t v;
	if (cpu && strnum_quantity(cpu, 1000, &v))
		n->cpu_cap = v;
	if (mem && strnum_quantity(mem, 1, &v))
		n->mem_cap = v / (1024 * 1024);
}

static int list_node_cb(void *ctx, struct gpu_node *labels, const cJSON *obj)
{
	struct gpu_node *n = list_find(ctx, labels->name);
	int rc = n ? 0 : -1;
	if (n)
		host_capacity(n, obj);
	for (int i = 0; n && !rc && i < labels->nlabels; i++)
		rc = gpu_node_set_label(n, labels->labels[i].key, labels->labels[i].value);
	gpu_node_free(labels);
	return rc;
}

/* Moves the devices and islands of devs into the node of that name. */
static int list_gpus_cb(void *ctx, const char *node, struct gpu_node *devs)
{
	struct gpu_node *n = list_find(ctx, node);
	int rc = n && !n->ndev ? 0 : -1;   /* -1 also for a second GpuNodeStatus */
	if (!rc) {
		n->dev = devs->dev;
		n->info = devs->info;
		n->ndev = devs->ndev;
		n->islands = devs->islands;
		n->nisland = devs->nisland;
		devs->dev = NULL;
		devs->info = NULL;
		devs->islands = NULL;
		devs->ndev = devs->nisland = 0;
	}
	gpu_node_free(devs);
	return rc;
}

/* Decodes every item of root into l; the nodes' labels and devices merged. */
static int read_nodes(const cJSON *root, struct node_list *l, char *err, size_t errlen)
{
	memset(l, 0, sizeof(*l));
	strmap_init(&l->by_name);
	struct inventory_sink sink = { list_node_cb, list_gpus_cb, NULL, l };
	int rc = walk(root, &sink, err, errlen);
	strmap_release(&l->by_name);
	if (rc) {
		inventory_free_nodes(l->v, l->n);
		l->v = NULL;
		l->n = 0;
	}
	return rc;
}

int inventory_load(struct cache *c, const char *path, char *err, size_t errlen)
{
	cJSON *root = yamljson_load(path, INVENTORY_MAX_BYTES, err, errlen);
	if (!root)
		return -1;
	/* Decode the whole file first, so that a bad file changes nothing. */
	struct node_list check;
	int rc = read_nodes(root, &check, err, errlen);
	inventory_free_nodes(check.v, check.n);
	if (!rc) {
		struct inventory_sink sink = { cache_node_cb, cache_gpus_cb, cache_claim_cb, c };
		cache_lock(c);
		cache_relist_begin(c, CACHE_NODES);
		cache_relist_begin(c, CACHE_GPUS);
		cache_relist_begin(c, CACHE_GPUCLAIMS);
		rc = walk(root, &sink, err, errlen);
		/* Validated above, so the walk stored everything: drop what the file no longer has. */
		cache_relist_sweep(c, CACHE_NODES);
		cache_relist_sweep(c, CACHE_GPUS);
		cache_relist_sweep(c, CACHE_GPUCLAIMS);
		cache_unlock(c);
	}
	cJSON_Delete(root);
	return rc;
}

int inventory_parse_nodes(const char *text, size_t len, struct gpu_node ***out, size_t *n,
			  char *err, size_t errlen)
{
	*out = NULL;
	*n = 0;
	cJSON *root = yamljson_parse(text, len, err, errlen);
	if (!root)
		return -1;
	struct node_list l;
	int rc = read_nodes(root, &l, err, errlen);
	cJSON_Delete(root);
	*out = l.v;
	*n = l.n;
	return rc;
}

void inventory_free_nodes(struct gpu_node **nodes, size_t n)
{
	for (size_t i = 0; i < n; i++)
		gpu_node_free(nodes[i]);
	free(nodes);
}
