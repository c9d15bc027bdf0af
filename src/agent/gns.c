/*
 * The GpuNodeStatus object (gpu.scheduling/v1) the agent publishes and
 * the extender reads (src/api/objects.c decodes the same names). Pure.
 */
#include "agent.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

static const char *link_name(unsigned char t)
{
	switch (t) {
	case AGENT_LINK_SELF:
		return "self";
	case AGENT_LINK_PCIE:
		return "pcie";
	case AGENT_LINK_NVLINK:
		return "nvlink";
	case AGENT_LINK_XGMI:
		return "xgmi";
	case AGENT_LINK_XELINK:
		return "xelink";
	default:
		return "unknown";
	}
}

static bool add_str(cJSON *o, const char *k, const char *v)
{
	return cJSON_AddStringToObject(o, k, v ? v : "") != NULL;
}

static bool add_num(cJSON *o, const char *k, double v)
{
	return cJSON_AddNumberToObject(o, k, v) != NULL;
}

static cJSON *device_json(const struct agent_device *d)
{
	const struct agent_gpu *g = &d->g;
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	bool ok = add_num(o, "id", d->id) && add_num(o, "index", g->index) &&
		  add_str(o, "uuid", g->uuid) && add_str(o, "vendor", gpu_vendor_name(g->vendor)) &&
		  add_str(o, "model", g->model) && add_str(o, "architecture", g->arch) &&
		  add_num(o, "memoryMiB", g->memory_mib) && add_str(o, "driverVersion", g->driver) &&
		  add_str(o, "health", gpu_health_name(g->health));
	if (ok && g->health != GPU_HEALTHY && g->health_reason[0])
		ok = add_str(o, "healthReason", g->health_reason);
	if (ok && g->island[0])
		ok = add_str(o, "island", g->island);
	if (ok)
		ok = add_num(o, "bandwidthGBps", g->island[0] ? g->bandwidth_gbps : 0);
	if (ok)
		ok = cJSON_AddArrayToObject(o, "inUseBy") != NULL;
	if (ok && g->pci_bus[0])
		ok = add_str(o, "pciBusId", g->pci_bus);
	if (ok && g->compute_cap[0])
		ok = add_str(o, "computeCapability", g->compute_cap);
	if (ok && g->mig_profile[0])
		ok = add_str(o, "migProfile", g->mig_profile) && add_num(o, "parentId", d->parent_id);
	if (!ok) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

static bool add_links(cJSON *arr, const struct agent_vendor_result *vr)
{
	if (!vr || !vr->have_topo)
		return true;
	const struct agent_topo *t = &vr->topo;
	for (int a = 0; a < t->n; a++) {
		for (int b = a + 1; b < t->n; b++) {
			unsigned char ty = t->type[a][b];
			if (ty != AGENT_LINK_NVLINK && ty != AGENT_LINK_XGMI && ty != AGENT_LINK_XELINK)
				continue;   /* PCIe paths are the default; only fast links are listed */
			cJSON *l = cJSON_CreateObject();
			if (!l || !cJSON_AddItemToArray(arr, l))
				return false;
			if (!add_str(l, "vendor", gpu_vendor_name(vr->vendor)) || !add_num(l, "a", a) ||
			    !add_num(l, "b", b) || !add_str(l, "type", link_name(ty)) ||
			    !add_str(l, "code", t->code[a][b]))
				return false;
			if (t->links[a][b] && !add_num(l, "links", t->links[a][b]))
				return false;
		}
	}
	return true;
}

static cJSON *build(const struct agent_node *node, const char *timestamp)
{
	cJSON *root = cJSON_CreateObject();
	if (!root)
		return NULL;
	cJSON *meta, *spec, *status, *devs, *islands, *links, *vendors;
	/* "free" for kubectl's column: healthy devices (the extender's allocations live in its ledgers). */
	if (!add_str(root, "apiVersion", "gpu.scheduling/v1") || !add_str(root, "kind", "GpuNodeStatus") ||
	    !(meta = cJSON_AddObjectToObject(root, "metadata")) || !add_str(meta, "name", node->name) ||
	    !(spec = cJSON_AddObjectToObject(root, "spec")) || !add_str(spec, "nodeName", node->name) ||
	    !(status = cJSON_AddObjectToObject(root, "status")) || !add_num(status, "total", node->ndev) ||
	    !add_num(status, "free", agent_node_healthy(node)) || !(devs = cJSON_AddArrayToObject(status, "devices")))
		goto fail;
	for (int i = 0; i < node->ndev; i++) {
		cJSON *d = device_json(&node->dev[i]);
		if (!d || !cJSON_AddItemToArray(devs, d)) {
			cJSON_Delete(d);
			goto fail;
		}
	}
	if (!(islands = cJSON_AddArrayToObject(status, "islands")))
		goto fail;
	for (int i = 0; i < node->nisland; i++) {
		const struct agent_island *is = &node->island[i];
		cJSON *o = cJSON_CreateObject();
		cJSON *m;
		if (!o || !cJSON_AddItemToArray(islands, o) || !add_str(o, "name", is->name) ||
		    !add_str(o, "vendor", gpu_vendor_name(is->vendor)) ||
		    !add_num(o, "bandwidthGBps", is->bandwidth_gbps) ||
		    !(m = cJSON_AddArrayToObject(o, "devices")))
			goto fail;
		for (int k = 0; k < is->nmember; k++) {
			cJSON *n = cJSON_CreateNumber(is->member[k]);
			if (!n || !cJSON_AddItemToArray(m, n)) {
				cJSON_Delete(n);
				goto fail;
			}
		}
	}
	if (!(links = cJSON_AddArrayToObject(status, "links")))
		goto fail;
	for (int v = 0; v < AGENT_NVENDOR; v++) {
		if (!add_links(links, node->vr[v]))
			goto fail;
	}
	if (!(vendors = cJSON_AddObjectToObject(status, "vendors")))
		goto fail;
	for (int v = 0; v < AGENT_NVENDOR; v++) {
		cJSON *o = cJSON_AddObjectToObject(vendors, gpu_vendor_name((enum gpu_vendor)(v + 1)));
		if (!o || !add_str(o, "state", agent_vstate_name(node->vstate[v])))
			goto fail;
		const char *msg = node->vmsg[v];
		if (msg[0] && !add_str(o, "message", msg))
			goto fail;
	}
	if (node->dropped && !add_num(status, "droppedDevices", node->dropped))
		goto fail;
	/* the device plugin's share slots per GPU: the extender places no more shares on one */
	if (node->share_slots && !add_num(status, "shareSlots", node->share_slots))
		goto fail;
	if (!add_str(status, "agentVersion", AGENT_VERSION))
		goto fail;
	if (timestamp && !add_str(status, "lastUpdated", timestamp))
		goto fail;
	return root;
fail:
	cJSON_Delete(root);
	return NULL;
}

char *agent_gns_json(const struct agent_node *node, const char *timestamp, bool pretty)
{
	cJSON *root = build(node, timestamp);
	if (!root)
		return NULL;
	char *s = pretty ? cJSON_Print(root) : cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	return s;
}
