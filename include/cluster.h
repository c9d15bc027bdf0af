/*
 * cluster: cluster mode's watches. Starts one reflector per resource the
 * extender reads (Nodes, GpuNodeStatus, GpuClaims; the reservation module
 * adds its own), feeds them into the cache, and says when all of them have
 * listed once (readiness).
 */
#ifndef GPU_CLUSTER_H
#define GPU_CLUSTER_H

#include "cache.h"
#include "kube.h"
#include "reflector.h"

#include <stdbool.h>
#include <stddef.h>

#define CLUSTER_MAX_REFLECTORS 8

/*
 * Told of each GpuNodeStatus the watch applies (obj NULL: deleted), on the
 * watch's thread, after the cache has it and before the cache publishes it.
 */
struct cluster_gns_hook {
	void (*seen)(void *ctx, const char *node, const cJSON *obj);
	void *ctx;
};

struct cluster {
	int n;
	struct reflector *r[CLUSTER_MAX_REFLECTORS];
	struct cache *cache;               /* the GpuNodeStatus sink's, with the hook */
	struct cluster_gns_hook gns_hook;
};

/*
 * Starts the Node, GpuNodeStatus and GpuClaim reflectors; hook (NULL: none)
 * is told of the GpuNodeStatus objects. 0, or -1 with err.
 */
int cluster_start(struct cluster *cl, struct kube_client *client, struct cache *cache,
		  const struct cluster_gns_hook *hook, char *err, size_t errlen);
/* Adds another reflector (the reservation module's), started by the caller. */
int cluster_add(struct cluster *cl, struct reflector *r);
/* True when every reflector is ready; otherwise why not, in why. */
bool cluster_ready(const struct cluster *cl, char *why, size_t size);
void cluster_stop(struct cluster *cl);

/* Sinks that write one resource into the cache (exposed for tests). */
void cluster_node_sink(struct cache *c, struct reflector_sink *out);
void cluster_gns_sink(struct cache *c, struct reflector_sink *out);
/* The GpuNodeStatus sink that also tells cl->gns_hook (cl->cache set). */
void cluster_gns_hooked_sink(struct cluster *cl, struct reflector_sink *out);
void cluster_gpuclaim_sink(struct cache *c, struct reflector_sink *out);

#endif
