/* Reflector sinks: Kubernetes objects -> the capacity cache. */
#include "api.h"
#include "cluster.h"
#include "log.h"

#include <string.h>

static void lock(void *ctx)
{
	cache_lock(ctx);
}

static void unlock(void *ctx)
{
	cache_unlock(ctx);
}

/* ---- Nodes ---- */

static void nodes_begin(void *ctx)
{
	cache_relist_begin(ctx, CACHE_NODES);
}

static void nodes_end(void *ctx)
{
	cache_relist_sweep(ctx, CACHE_NODES);
}

static void node_apply(void *ctx, bool deleted, const cJSON *obj)
{
	const char *name = api_str(api_path(obj, "metadata"), "name");
	if (!name)
		return;
	if (deleted) {
		cache_set_node(ctx, name, NULL);
		return;
	}
	char err[256];
	struct gpu_node *n = api_node_decode(obj, err, sizeof(err));
	if (!n || cache_set_node(ctx, name, n))
		log_warn("cannot store a Node", "node=%s error=\"%s\"", name, LOG_Q(n ? "out of memory" : err));
}

void cluster_node_sink(struct cache *c, struct reflector_sink *out)
{
	*out = (struct reflector_sink){ lock, unlock, nodes_begin, node_apply, nodes_end, c };
}

/* ---- GpuNodeStatus ---- */

static void gns_begin(void *ctx)
{
	cache_relist_begin(ctx, CACHE_GPUS);
}

static void gns_end(void *ctx)
{
	cache_relist_sweep(ctx, CACHE_GPUS);
}

static void gns_apply(void *ctx, bool deleted, const cJSON *obj)
{
	const char *node = api_gns_node_name(obj);
	if (!node)
		return;
	if (deleted) {
		cache_set_gpus(ctx, node, NULL);
		return;
	}
	char err[256];
	struct gpu_node *devs = gpu_node_new(node);
	if (devs && !api_gns_decode(obj, devs, &node, err, sizeof(err))) {
		if (cache_set_gpus(ctx, node, devs))
			log_warn("cannot store a GpuNodeStatus", "node=%s error=\"out of memory\"", node);
		return;
	}
	/* A bad status keeps the last good one: scheduling on garbage is worse. */
	log_warn("ignoring an invalid GpuNodeStatus", "node=%s error=\"%s\"", node, LOG_Q(devs ? err : "out of memory"));
	gpu_node_free(devs);
}

void cluster_gns_sink(struct cache *c, struct reflector_sink *out)
{
	*out = (struct reflector_sink){ lock, unlock, gns_begin, gns_apply, gns_end, c };
}

static void hooked_lock(void *ctx)
{
	lock(((struct cluster *)ctx)->cache);
}

static void hooked_unlock(void *ctx)
{
	unlock(((struct cluster *)ctx)->cache);
}

static void hooked_begin(void *ctx)
{
	gns_begin(((struct cluster *)ctx)->cache);
}

static void hooked_end(void *ctx)
{
	gns_end(((struct cluster *)ctx)->cache);
}

static void hooked_apply(void *ctx, bool deleted, const cJSON *obj)
{
	struct cluster *cl = ctx;
	gns_apply(cl->cache, deleted, obj);
	const char *node = api_gns_node_name(obj);
	if (node && cl->gns_hook.seen)
		cl->gns_hook.seen(cl->gns_hook.ctx, node, deleted ? NULL : obj);
}

void cluster_gns_hooked_sink(struct cluster *cl, struct reflector_sink *out)
{
	*out = (struct reflector_sink){ hooked_lock, hooked_unlock, hooked_begin, hooked_apply, hooked_end, cl };
}

/* ---- GpuClaims (they live under their own lock, not the node writer lock) ---- */

static void nolock(void *ctx)
{
	(void)ctx;
}

static void claims_begin(void *ctx)
{
	cache_relist_begin(ctx, CACHE_GPUCLAIMS);
}

static void claims_end(void *ctx)
{
	cache_relist_sweep(ctx, CACHE_GPUCLAIMS);
}

static void claim_apply(void *ctx, bool deleted, const cJSON *obj)
{
	struct api_pod_ref ref;
	api_pod_ref(obj, &ref);
	if (!ref.name[0])
		return;
	cJSON *copy = deleted ? NULL : cJSON_Duplicate(obj, true);
	if (!deleted && !copy)
		return;
	cache_set_gpuclaim(ctx, ref.ns, ref.name, copy);
}

void cluster_gpuclaim_sink(struct cache *c, struct reflector_sink *out)
{
	*out = (struct reflector_sink){ nolock, nolock, claims_begin, claim_apply, claims_end, c };
}
