/*
 * kubelet's own record of the devices each container got: the PodResources
 * API (podresources/v1 List on /var/lib/kubelet/pod-resources/kubelet.sock),
 * which monitoring (dcgm-exporter and the like) reads to attribute GPUs to
 * pods. The plugin reads it when it starts, so that containers kubelet
 * already gave devices to are never matched again; `gpu-agent
 * podresources` prints it.
 */
#include "devplugin.h"

#include "h2rpc.h"
#include "podresources.pb-c.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_TIMEOUT_MS 10000

/*
 * kubelet lists a container's devices in groups (by NUMA node, often one
 * device each): calls fn once per resource with all of them.
 */
static int each_resource(const V1__PodResources *pr, const V1__ContainerResources *cr, dp_podres_fn fn, void *ctx,
			 char *err, size_t errlen)
{
	size_t total = 0;
	for (size_t d = 0; d < cr->n_devices; d++)
		total += cr->devices[d]->n_device_ids;
	const char **ids = malloc((total ? total : 1) * sizeof(*ids));
	if (!ids) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (size_t d = 0; d < cr->n_devices; d++) {
		const char *res = cr->devices[d]->resource_name;
		bool seen = false;
		for (size_t e = 0; e < d && !seen; e++)
			seen = !strcmp(cr->devices[e]->resource_name, res);
		if (seen)
			continue;              /* this resource went out with its first group */
		size_t n = 0;
		for (size_t e = d; e < cr->n_devices; e++)
			if (!strcmp(cr->devices[e]->resource_name, res))
				for (size_t k = 0; k < cr->devices[e]->n_device_ids; k++)
					ids[n++] = cr->devices[e]->device_ids[k];
		fn(ctx, pr->namespace_, pr->name, cr->name, res, ids, n);
	}
	free(ids);
	return 0;
}

int dp_podresources_each(const char *socket, dp_podres_fn fn, void *ctx, char *err, size_t errlen)
{
	V1__ListPodResourcesRequest req = V1__LIST_POD_RESOURCES_REQUEST__INIT;
	uint8_t msg[16];
	size_t len = v1__list_pod_resources_request__pack(&req, msg);
	struct buf resp;
	buf_init(&resp, H2RPC_MAX_MESSAGE);
	if (h2rpc_call(socket, DP_RPC_POD_RESOURCES_LIST, msg, len, &resp, LIST_TIMEOUT_MS, err, errlen)) {
		buf_release(&resp);
		return -1;
	}
	V1__ListPodResourcesResponse *list =
		v1__list_pod_resources_response__unpack(NULL, resp.len, (const uint8_t *)resp.data);
	buf_release(&resp);
	if (!list) {
		snprintf(err, errlen, "cannot decode kubelet's ListPodResourcesResponse");
		return -1;
	}
	int rc = 0;
	for (size_t p = 0; p < list->n_pod_resources && !rc; p++) {
		const V1__PodResources *pr = list->pod_resources[p];
		for (size_t c = 0; c < pr->n_containers && !rc; c++)
			rc = each_resource(pr, pr->containers[c], fn, ctx, err, errlen);
	}
	v1__list_pod_resources_response__free_unpacked(list, NULL);
	return rc;
}

struct record_ctx {
	struct dp_record *rec;
	bool oom;
};

static void record_one(void *ctx, const char *ns, const char *pod, const char *container, const char *resource,
		       const char *const *ids, size_t nids)
{
	struct record_ctx *rc = ctx;
	if (!rc->oom && dp_record_add(rc->rec, ns, pod, container, resource, ids, nids))
		rc->oom = true;
}

int dp_record_read(const char *socket, struct dp_record *rec, char *err, size_t errlen)
{
	struct record_ctx rc = { rec, false };
	rec->n = 0;
	if (dp_podresources_each(socket, record_one, &rc, err, errlen))
		return -1;
	if (rc.oom) {
		snprintf(err, errlen, "out of memory reading kubelet's record");
		return -1;
	}
	return 0;
}
