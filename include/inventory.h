/*
 * inventory: the standalone cluster description. A Kubernetes `List` (JSON
 * or YAML, as `kubectl get -o json|yaml` prints it) whose items are Node,
 * GpuNodeStatus and GpuClaim objects; a bare array or a single object works too.
 */
#ifndef GPU_INVENTORY_H
#define GPU_INVENTORY_H

#include "cache.h"
#include "gpu.h"

#include <stddef.h>

#define INVENTORY_MAX_BYTES (256u << 20)

/*
 * Replaces the cache's nodes, devices and GpuClaims with the file's (the
 * allocations already recorded stay). Returns 0, or -1 with the first
 * problem in err ("items[3] (GpuNodeStatus gpu-a1): status.devices[0].id ...").
 */
int inventory_load(struct cache *c, const char *path, char *err, size_t errlen);

/*
 * Parses only the nodes of an inventory's text (labels and devices merged by
 * node name, host capacity from the Nodes' status.allocatable), for the
 * simulator, which has read the file already. *out is an array of *n nodes
 * the caller frees with inventory_free_nodes(). Returns 0 or -1 with err set.
 */
int inventory_parse_nodes(const char *text, size_t len, struct gpu_node ***out, size_t *n,
			  char *err, size_t errlen);
void inventory_free_nodes(struct gpu_node **nodes, size_t n);

#endif
