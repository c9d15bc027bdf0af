/*
 * The node: ids across vendors and MIG, islands, labels, and the
 * GpuNodeStatus JSON, read back through the extender's own decoder.
 */
#include "test_agent_util.h"

#include "agent_parse.h"
#include "api.h"

#include <cjson/cJSON.h>

static struct agent_vendor_result *vendor(enum gpu_vendor v, int n, const char *model, const char *arch,
					  uint32_t mib)
{
	struct agent_vendor_result *vr = calloc(1, sizeof(*vr));
	assert_non_null(vr);
	agent_vendor_result_init(vr, v);
	for (int i = 0; i < n; i++) {
		struct agent_gpu *g = &vr->gpu[vr->ngpu++];
		g->vendor = v;
		g->index = i;
		g->mig_index = -1;
		g->memory_mib = mib;
		g->health = GPU_HEALTHY;
		snprintf(g->model, sizeof(g->model), "%s", model);
		snprintf(g->arch, sizeof(g->arch), "%s", arch);
		snprintf(g->uuid, sizeof(g->uuid), "%s-%d", gpu_vendor_name(v), i);
	}
	return vr;
}

/* The 8x A100 NVLink box of the fixtures, with its recorded matrix. */
static struct agent_vendor_result *a100_box(void)
{
	struct agent_vendor_result *vr = vendor(GPU_VENDOR_NVIDIA, 8, "NVIDIA A100-SXM4-80GB", "ampere", 81920);
	char *t = ta_read("nvidia/a100-sxm4-80gb-8gpu.topo.txt");
	char err[256];
	assert_int_equal(nvsmi_parse_topo(t, &vr->topo, err, sizeof(err)), 0);
	free(t);
	vr->have_topo = true;
	for (int i = 0; i < 8; i++)
		snprintf(vr->gpu[i].compute_cap, sizeof(vr->gpu[i].compute_cap), "8.0");
	agent_compute_islands(vr);
	return vr;
}

static void test_ids_mixed_vendors(void **state)
{
	(void)state;
	struct agent_vendor_result *nv = a100_box();
	struct agent_vendor_result *amd = vendor(GPU_VENDOR_AMD, 4, "AMD Instinct MI210", "gfx90a", 65520);
	struct agent_vendor_result *in = vendor(GPU_VENDOR_INTEL, 1, "Intel(R) Data Center GPU Max 1550",
						"xe-hpc", 65536);
	const struct agent_vendor_result *vr[AGENT_NVENDOR] = { nv, amd, in };
	const enum agent_vstate st[AGENT_NVENDOR] = { AGENT_V_OK, AGENT_V_OK, AGENT_V_OK };
	struct agent_node *node = malloc(sizeof(*node));
	agent_node_build(node, "n1", vr, st, NULL);
	assert_int_equal(node->ndev, 13);
	assert_int_equal(node->dev[0].id, 0);
	assert_int_equal(node->dev[7].id, 7);
	assert_int_equal(node->dev[8].id, 100);
	assert_int_equal(node->dev[8].g.index, 0);
	assert_int_equal(node->dev[11].id, 103);
	assert_int_equal(node->dev[12].id, 200);
	assert_int_equal(node->nisland, 1);
	assert_string_equal(node->island[0].name, "nvlink-0");
	assert_int_equal(node->island[0].nmember, 8);

	/* AMD alone starts at 0 */
	const struct agent_vendor_result *only_amd[AGENT_NVENDOR] = { NULL, amd, NULL };
	agent_node_build(node, "n2", only_amd, st, NULL);
	assert_int_equal(node->ndev, 4);
	assert_int_equal(node->dev[0].id, 0);
	assert_int_equal(node->dev[3].id, 3);
	free(node);
	free(nv);
	free(amd);
	free(in);
}

static void test_mig_ids(void **state)
{
	(void)state;
	/* the telegraf node: GPU 0 in MIG mode with four 1g.20gb, GPUs 1-3 whole */
	struct agent_vendor_result *nv = vendor(GPU_VENDOR_NVIDIA, 0, "", "", 0);
	char *t = ta_read("nvidia/a100-mig-telegraf.list.txt");
	struct nvsmi_list *l = calloc(1, sizeof(*l));
	char err[256];
	assert_int_equal(nvsmi_parse_list(t, l, err, sizeof(err)), 0);
	free(t);
	for (int i = 0; i < l->ngpu; i++) {
		struct agent_gpu g;
		memset(&g, 0, sizeof(g));
		g.vendor = GPU_VENDOR_NVIDIA;
		g.index = l->gpu[i].index;
		g.mig_index = -1;
		g.memory_mib = 81920;
		snprintf(g.uuid, sizeof(g.uuid), "%s", l->gpu[i].uuid);
		if (!l->gpu[i].nmig) {
			nv->gpu[nv->ngpu++] = g;
			continue;
		}
		for (int k = 0; k < l->gpu[i].nmig; k++) {
			struct agent_gpu m = g;
			m.mig_index = l->gpu[i].mig[k].dev;
			m.memory_mib = 19968;
			snprintf(m.uuid, sizeof(m.uuid), "%s", l->gpu[i].mig[k].uuid);
			snprintf(m.mig_profile, sizeof(m.mig_profile), "%s", l->gpu[i].mig[k].profile);
			nv->gpu[nv->ngpu++] = m;
		}
	}
	free(l);
	struct agent_vendor_result *amd = vendor(GPU_VENDOR_AMD, 2, "AMD Instinct MI210", "gfx90a", 65520);
	const struct agent_vendor_result *vr[AGENT_NVENDOR] = { nv, amd, NULL };
	struct agent_node *node = malloc(sizeof(*node));
	agent_node_build(node, "n1", vr, NULL, NULL);
	assert_int_equal(node->ndev, 3 + 4 + 2);
	/* sorted by id: whole GPUs 1-3, AMD 100-101, MIG 1000-1003 */
	assert_int_equal(node->dev[0].id, 1);
	assert_int_equal(node->dev[2].id, 3);
	assert_int_equal(node->dev[3].id, 100);
	assert_int_equal(node->dev[5].id, 1000);
	assert_int_equal(node->dev[5].parent_id, 0);
	assert_string_equal(node->dev[5].g.mig_profile, "1g.20gb");
	assert_string_equal(node->dev[8].g.uuid, "MIG-930574a9-d43a-5d2b-95da-3e68384c8d6b");
	assert_int_equal(node->dev[8].id, 1003);
	char labels[2048];
	agent_node_labels(node, labels, sizeof(labels));
	assert_non_null(strstr(labels, "gpu.scheduling/mig=true\n"));
	assert_non_null(strstr(labels, "gpu.scheduling/vendor=mixed\n"));
	assert_non_null(strstr(labels, "gpu.scheduling/nvidia.count=7\n"));
	assert_non_null(strstr(labels, "gpu.scheduling/amd.count=2\n"));
	assert_non_null(strstr(labels, "gpu.scheduling/memory-mib=19968\n"));
	free(node);
	free(nv);
	free(amd);
}

static void test_json_contract_and_extender_decode(void **state)
{
	(void)state;
	struct agent_vendor_result *nv = a100_box();
	nv->gpu[3].health = GPU_UNHEALTHY;
	snprintf(nv->gpu[3].health_reason, sizeof(nv->gpu[3].health_reason), "row remapping failed");
	snprintf(nv->gpu[0].pci_bus, sizeof(nv->gpu[0].pci_bus), "00000000:3F:00.0");
	struct agent_vendor_result *amd = vendor(GPU_VENDOR_AMD, 2, "AMD Instinct MI210", "gfx90a", 65520);
	const struct agent_vendor_result *vr[AGENT_NVENDOR] = { nv, amd, NULL };
	const enum agent_vstate st[AGENT_NVENDOR] = { AGENT_V_OK, AGENT_V_STALE, AGENT_V_ABSENT };
	const char *msg[AGENT_NVENDOR] = { "", "rocminfo timed out after 10000 ms and was killed", "" };
	struct agent_node *node = malloc(sizeof(*node));
	agent_node_build(node, "gpu-node-7", vr, st, msg);
	node->share_slots = 48;                 /* as the device plugin sets it */
	char *json = agent_gns_json(node, "2026-01-02T03:04:05Z", false);
	assert_non_null(json);

	cJSON *root = cJSON_Parse(json);
	assert_non_null(root);
	assert_string_equal(api_str(root, "apiVersion"), "gpu.scheduling/v1");
	assert_string_equal(api_str(root, "kind"), "GpuNodeStatus");
	assert_string_equal(api_str(api_path(root, "metadata"), "name"), "gpu-node-7");
	assert_string_equal(api_str(api_path(root, "spec"), "nodeName"), "gpu-node-7");
	const cJSON *status = api_path(root, "status");
	assert_int_equal(cJSON_GetObjectItem(status, "total")->valueint, 10);
	assert_string_equal(api_str(status, "lastUpdated"), "2026-01-02T03:04:05Z");
	assert_string_equal(api_str(status, "agentVersion"), AGENT_VERSION);
	assert_int_equal(cJSON_GetObjectItem(status, "shareSlots")->valueint, 48);
	const cJSON *d0 = cJSON_GetArrayItem(cJSON_GetObjectItem(status, "devices"), 0);
	assert_int_equal(cJSON_GetObjectItem(d0, "id")->valueint, 0);
	assert_string_equal(api_str(d0, "vendor"), "nvidia");
	assert_string_equal(api_str(d0, "architecture"), "ampere");
	assert_string_equal(api_str(d0, "island"), "nvlink-0");
	assert_int_equal(cJSON_GetObjectItem(d0, "bandwidthGBps")->valueint, 600);
	assert_int_equal(cJSON_GetObjectItem(d0, "memoryMiB")->valueint, 81920);
	assert_true(cJSON_IsArray(cJSON_GetObjectItem(d0, "inUseBy")));
	assert_string_equal(api_str(d0, "pciBusId"), "00000000:3F:00.0");
	assert_string_equal(api_str(d0, "computeCapability"), "8.0");
	assert_null(cJSON_GetObjectItem(d0, "migProfile"));
	const cJSON *d3 = cJSON_GetArrayItem(cJSON_GetObjectItem(status, "devices"), 3);
	assert_string_equal(api_str(d3, "health"), "Unhealthy");
	assert_string_equal(api_str(d3, "healthReason"), "row remapping failed");
	const cJSON *d8 = cJSON_GetArrayItem(cJSON_GetObjectItem(status, "devices"), 8);
	assert_int_equal(cJSON_GetObjectItem(d8, "id")->valueint, 100);
	assert_null(cJSON_GetObjectItem(d8, "island"));   /* no fast links: no island */
	assert_int_equal(cJSON_GetObjectItem(d8, "bandwidthGBps")->valueint, 0);
	const cJSON *vend = cJSON_GetObjectItem(status, "vendors");
	assert_string_equal(api_str(cJSON_GetObjectItem(vend, "amd"), "state"), "stale");
	assert_non_null(strstr(api_str(cJSON_GetObjectItem(vend, "amd"), "message"), "timed out"));
	assert_string_equal(api_str(cJSON_GetObjectItem(vend, "intel"), "state"), "absent");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(status, "links")), 28);
	const cJSON *is = cJSON_GetArrayItem(cJSON_GetObjectItem(status, "islands"), 0);
	assert_string_equal(api_str(is, "name"), "nvlink-0");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(is, "devices")), 8);

	/* what the extender makes of it */
	struct gpu_node *gn = gpu_node_new("x");
	const char *name = NULL;
	char err[256];
	assert_int_equal(api_gns_decode(root, gn, &name, err, sizeof(err)), 0);
	assert_string_equal(name, "gpu-node-7");
	assert_int_equal(gn->ndev, 10);
	assert_int_equal(gn->share_slots, 48);
	assert_int_equal(gn->nisland, 1);
	assert_string_equal(gn->islands[0].name, "nvlink-0");
	assert_true(gn->islands[0].bandwidth_gbps == 600.0);
	int i3 = gpu_node_find_device(gn, 3);
	assert_int_equal(gn->dev[i3].health, GPU_UNHEALTHY);
	int i100 = gpu_node_find_device(gn, 100);
	assert_true(i100 >= 0);
	assert_int_equal(gn->dev[i100].vendor, GPU_VENDOR_AMD);
	assert_int_equal(gn->dev[i100].island, -1);
	assert_string_equal(gn->info[i100].arch, "gfx90a");
	assert_int_equal(gn->dev[i100].memory_mib, 65520);
	gpu_node_free(gn);
	cJSON_Delete(root);
	free(json);
	free(node);
	free(nv);
	free(amd);
}

static void test_empty_node(void **state)
{
	(void)state;
	struct agent_node *node = malloc(sizeof(*node));
	agent_node_build(node, "cpu-only", NULL, NULL, NULL);
	char *json = agent_gns_json(node, NULL, true);
	assert_non_null(json);
	cJSON *root = cJSON_Parse(json);
	const cJSON *status = api_path(root, "status");
	assert_int_equal(cJSON_GetObjectItem(status, "total")->valueint, 0);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(status, "devices")), 0);
	assert_null(cJSON_GetObjectItem(status, "lastUpdated"));
	char labels[256];
	assert_int_equal(agent_node_labels(node, labels, sizeof(labels)), 1);
	assert_string_equal(labels, "gpu.scheduling/present=false\n");
	cJSON_Delete(root);
	free(json);
	free(node);
}

static void test_label_values_are_valid(void **state)
{
	(void)state;
	struct agent_vendor_result *in = vendor(GPU_VENDOR_INTEL, 1, "Intel(R) Data Center GPU Flex Series 140 [0x56c1]",
						"xe-hpg", 0);
	const struct agent_vendor_result *vr[AGENT_NVENDOR] = { NULL, NULL, in };
	struct agent_node *node = malloc(sizeof(*node));
	agent_node_build(node, "n", vr, NULL, NULL);
	char labels[2048];
	agent_node_labels(node, labels, sizeof(labels));
	assert_non_null(strstr(labels, "gpu.scheduling/model=Intel-R-Data-Center-GPU-Flex-Series-140-0x56c1\n"));
	assert_non_null(strstr(labels, "gpu.scheduling/architecture=xe-hpg\n"));
	free(node);
	free(in);
}

static void test_too_many_devices_are_dropped(void **state)
{
	(void)state;
	struct agent_vendor_result *nv = vendor(GPU_VENDOR_NVIDIA, 40, "NVIDIA A100-SXM4-80GB", "ampere", 81920);
	struct agent_vendor_result *amd = vendor(GPU_VENDOR_AMD, 40, "AMD Instinct MI300X", "gfx942", 196592);
	const struct agent_vendor_result *vr[AGENT_NVENDOR] = { nv, amd, NULL };
	struct agent_node *node = malloc(sizeof(*node));
	agent_node_build(node, "big", vr, NULL, NULL);
	assert_int_equal(node->ndev, AGENT_MAX_GPUS);
	assert_int_equal(node->dropped, 80 - AGENT_MAX_GPUS);
	char *json = agent_gns_json(node, NULL, false);
	assert_non_null(strstr(json, "\"droppedDevices\":16"));
	free(json);
	free(node);
	free(nv);
	free(amd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ids_mixed_vendors),
		cmocka_unit_test(test_mig_ids),
		cmocka_unit_test(test_json_contract_and_extender_decode),
		cmocka_unit_test(test_empty_node),
		cmocka_unit_test(test_label_values_are_valid),
		cmocka_unit_test(test_too_many_devices_are_dropped),
	};
	return cmocka_run_group_tests_name("agent_node", tests, NULL, NULL);
}
