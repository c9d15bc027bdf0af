/*
 * libFuzzer target: a Pod object from the device plugin's watch of its
 * node's pods, through dp_pod_parse (the binding's annotations, the
 * containers' limits, admission state). A pod bound here must come out
 * within its arrays' bounds, and the matching must then find it: kubelet
 * asking each of its containers' resources with the pod's own devices
 * gets this pod (dp_prefer, then dp_match on what dp_prefer chose).
 */
#include "fuzz.h"

#include "devplugin.h"

static struct dp_inventory inv;

/* 8 NVIDIA GPUs, ids 0..7, kubelet ids GPU-0000..; the annotation may name others. */
static void setup(void)
{
	fuzz_quiet();
	for (int i = 0; i < 8; i++) {
		struct dp_device *d = &inv.dev[inv.ndev++];
		d->id = i;
		d->vendor = GPU_VENDOR_NVIDIA;
		d->index = i;
		d->healthy = true;
		snprintf(d->uuid, sizeof(d->uuid), "GPU-%04d", i);
		snprintf(d->kubelet_id, sizeof(d->kubelet_id), "GPU-%04d", i);
		d->nnode = 1;
		snprintf(d->node[0].path, sizeof(d->node[0].path), "/dev/nvidia%d", i);
		snprintf(d->node[0].host_path, sizeof(d->node[0].host_path), "/dev/nvidia%d", i);
	}
}

static void check_bounds(const struct dp_pod *p)
{
	if (p->nids < 0 || p->nids > GPU_MAX_DEVICES || p->ncontainers < 0 || p->ncontainers > DP_MAX_CONTAINERS ||
	    strnlen(p->uid, sizeof(p->uid)) == sizeof(p->uid) || strnlen(p->name, sizeof(p->name)) == sizeof(p->name))
		abort();
	for (int k = 0; k < p->ncontainers; k++)
		for (int r = 0; r < DP_NRES; r++)
			if (p->c[k].want[r] < 0)
				abort();
}

/* kubelet's calls for container k's r, with every device of the node available. */
static void match_container(const struct dp_pod *p, int k, enum dp_resource r)
{
	struct dp_config cfg;
	dp_config_default(&cfg);
	int nkdev;
	struct dp_kdev *kdev = dp_resource_devices(&inv, &cfg, r, &nkdev);
	const char **avail = calloc((size_t)nkdev + 1, sizeof(*avail));
	if (!avail)
		abort();
	for (int i = 0; i < nkdev; i++)
		avail[i] = kdev[i].id;
	struct dp_choice pref, got;
	char why[256];
	if (!dp_prefer(&inv, r, p, 1, NULL, avail, (size_t)nkdev, NULL, 0, p->c[k].want[r], &pref, why, sizeof(why))) {
		if (pref.pod != 0 || pref.nid != p->c[k].want[r])
			abort();
		const char **ids = calloc((size_t)pref.nid + 1, sizeof(*ids));
		if (!ids)
			abort();
		for (int i = 0; i < pref.nid; i++)
			ids[i] = pref.id[i];
		/* Allocate with what was preferred: the same pod */
		char err[512];
		if (!dp_match(&inv, r, p, 1, NULL, ids, (size_t)pref.nid, &got, err, sizeof(err)) && got.pod != 0)
			abort();
		dp_choice_release(&got);
		free(ids);
	}
	dp_choice_release(&pref);
	free(avail);
	free(kdev);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!inv.ndev)
		setup();
	cJSON *obj = cJSON_ParseWithLength((const char *)data, size);
	if (!obj)
		return 0;
	struct dp_pod *p = malloc(sizeof(*p));
	char err[256];
	if (p && dp_pod_parse(obj, "n1", p, err, sizeof(err)) == 1) {
		check_bounds(p);
		if (dp_pod_order(p, p))
			abort();
		for (int k = 0; k < p->ncontainers; k++)
			for (int r = 0; r < DP_NRES; r++)
				if (p->c[k].want[r] > 0)
					match_container(p, k, (enum dp_resource)r);
	}
	free(p);
	cJSON_Delete(obj);
	return 0;
}
