#include "cluster.h"
#include "metrics.h"

#include <stdio.h>
#include <string.h>

int cluster_add(struct cluster *cl, struct reflector *r)
{
	if (!r || cl->n >= CLUSTER_MAX_REFLECTORS)
		return -1;
	cl->r[cl->n++] = r;
	return 0;
}

int cluster_start(struct cluster *cl, struct kube_client *client, struct cache *cache,
		  const struct cluster_gns_hook *hook, char *err, size_t errlen)
{
	memset(cl, 0, sizeof(*cl));
	cl->cache = cache;
	if (hook)
		cl->gns_hook = *hook;
	struct reflector_opts o[3] = {
		{ .name = "nodes", .resource = RES_NODES, .path = "/api/v1/nodes" },
		{ .name = "gpunodestatuses", .resource = RES_GNS, .path = "/apis/gpu.scheduling/v1/gpunodestatuses" },
		{ .name = "gpuclaims", .resource = RES_GPUCLAIMS, .path = "/apis/gpu.scheduling/v1/gpuclaims" },
	};
	cluster_node_sink(cache, &o[0].sink);
	cluster_gns_hooked_sink(cl, &o[1].sink);
	cluster_gpuclaim_sink(cache, &o[2].sink);
	for (int i = 0; i < 3; i++) {
		if (cluster_add(cl, reflector_start(client, &o[i], err, errlen))) {
			cluster_stop(cl);
			return -1;
		}
	}
	return 0;
}

bool cluster_ready(const struct cluster *cl, char *why, size_t size)
{
	for (int i = 0; i < cl->n; i++) {
		if (!reflector_ready(cl->r[i])) {
			reflector_problem(cl->r[i], why, size);
			return false;
		}
	}
	if (size)
		why[0] = '\0';
	return true;
}

void cluster_stop(struct cluster *cl)
{
	for (int i = 0; i < cl->n; i++)
		reflector_stop(cl->r[i]);
	cl->n = 0;
}
