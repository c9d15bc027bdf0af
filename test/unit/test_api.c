/* Decoding pods, GpuClaims, Nodes and GpuNodeStatus objects into the core model. */
#include "testutil.h"

#include "api.h"
#include "policy.h"

#include <stdio.h>

static const cJSON *lookup_one(void *ctx, const char *ns, const char *name);

static cJSON *J(const char *text)
{
	cJSON *j = cJSON_Parse(text);
	assert_non_null(j);
	return j;
}

static struct api_resources res;

static int setup(void **state)
{
	(void)state;
	api_resources_default(&res);
	return 0;
}

static int pod_claim(const char *pod_json, struct claim *c, char *err)
{
	cJSON *pod = J(pod_json);
	int rc = api_pod_claim(pod, &res, NULL, NULL, c, err, 256);
	cJSON_Delete(pod);
	return rc;
}

static void test_pod_without_gpus(void **state)
{
	(void)state;
	struct claim c;
	char err[256];
	assert_int_equal(pod_claim("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":{\"cpu\":\"2\"}}}]}}", &c, err), 0);
	assert_false(claim_wants_gpu(&c));
}

static void test_pod_whole_gpus_summed(void **state)
{
	(void)state;
	struct claim c;
	char err[256];
	assert_int_equal(pod_claim("{\"spec\":{\"containers\":["
				   "{\"name\":\"a\",\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"2\"}}},"
				   "{\"name\":\"b\",\"resources\":{\"requests\":{\"gpu.scheduling/gpu\":1}}}],"
				   "\"initContainers\":[{\"name\":\"i\",\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"1\"}}}]}}",
				   &c, err), 0);
	assert_int_equal(c.mode, CLAIM_EXCLUSIVE);
	assert_int_equal(c.count, 3);
	assert_string_equal(c.pod_version, "");       /* a pod without one: its binding carries none */
}

/* The pod's resourceVersion, the precondition of its binding; one too long to be one is not taken. */
static void test_pod_version(void **state)
{
	(void)state;
	struct claim c;
	char err[256];
	assert_int_equal(pod_claim("{\"metadata\":{\"resourceVersion\":\"48213\"},\"spec\":{\"containers\":["
				   "{\"name\":\"a\",\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"1\"}}}]}}", &c, err), 0);
	assert_string_equal(c.pod_version, "48213");
	assert_int_equal(pod_claim("{\"metadata\":{\"resourceVersion\":\"123456789012345678901234567890123\"},"
				   "\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
				   "{\"gpu.scheduling/gpu\":\"1\"}}}]}}", &c, err), 0);
	assert_string_equal(c.pod_version, "");
}

static void test_pod_init_container_max(void **state)
{
	(void)state;
	struct claim c;
	char err[256];
	assert_int_equal(pod_claim("{\"spec\":{\"containers\":["
				   "{\"name\":\"a\",\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"1\"}}}],"
				   "\"initContainers\":[{\"name\":\"i\",\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"4\"}}}]}}",
				   &c, err), 0);
	assert_int_equal(c.count, 4);
}

/* A container named n asking g whole GPUs; SIDECAR: the same with restartPolicy Always. */
#define CTR(n, g) "{\"name\":\"" n "\",\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"" g "\"}}}"
#define SIDECAR(n, g) "{\"name\":\"" n "\",\"restartPolicy\":\"Always\"," \
	"\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"" g "\"}}}"

static int64_t pod_count(const char *containers, const char *init)
{
	char text[2048];
	snprintf(text, sizeof(text), "{\"spec\":{\"containers\":[%s],\"initContainers\":[%s]}}", containers, init);
	struct claim c;
	char err[256];
	assert_int_equal(pod_claim(text, &c, err), 0);
	return c.count;
}

/*
 * Sidecars (restartable init containers) run beside everything after them:
 * each init container counts with the sidecars started before it, the app
 * containers with all of them (Kubernetes' effective request).
 */
static void test_pod_sidecars_added(void **state)
{
	(void)state;
	/* 1-GPU sidecar beside a 1-GPU main container: 2. */
	assert_int_equal(pod_count(CTR("main", "1"), SIDECAR("side", "1")), 2);
	/* A sidecar alone is held while the app runs. */
	assert_int_equal(pod_count("{\"name\":\"main\"}", SIDECAR("side", "2")), 2);
	/* Init after a sidecar: max(2+1, 1+1) = 3. */
	assert_int_equal(pod_count(CTR("main", "1"), SIDECAR("side", "1") "," CTR("i", "2")), 3);
	/* Init before the sidecar runs alone: max(2, 1+1) = 2. */
	assert_int_equal(pod_count(CTR("main", "1"), CTR("i", "2") "," SIDECAR("side", "1")), 2);
	/* Two sidecars, an init between them and one after: max(4+1, 3+(1+2), app 1+3) = 6. */
	assert_int_equal(pod_count(CTR("main", "1"),
				   SIDECAR("s1", "1") "," CTR("i1", "4") "," SIDECAR("s2", "2") "," CTR("i2", "3")),
			 6);
	/* The same with a larger app: max(5, 1+3, app 5+3) = 8. */
	assert_int_equal(pod_count(CTR("main", "5"),
				   SIDECAR("s1", "1") "," CTR("i1", "4") "," SIDECAR("s2", "2") "," CTR("i2", "1")),
			 8);
	/* restartPolicy other than Always is an ordinary init container: max. */
	assert_int_equal(pod_count(CTR("main", "1"),
				   "{\"name\":\"i\",\"restartPolicy\":\"OnFailure\",\"resources\":{\"limits\":"
				   "{\"gpu.scheduling/gpu\":\"1\"}}}"), 1);
}

/* Shares and their memory follow the same rule. */
static void test_pod_sidecar_shares(void **state)
{
	(void)state;
	struct claim c;
	char err[256];
	assert_int_equal(pod_claim("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
				   "{\"gpu.scheduling/gpu-share\":\"1\",\"gpu.scheduling/gpu-memory\":\"4096\"}}}],"
				   "\"initContainers\":[{\"name\":\"s\",\"restartPolicy\":\"Always\",\"resources\":"
				   "{\"limits\":{\"gpu.scheduling/gpu-share\":\"1\",\"gpu.scheduling/gpu-memory\":\"2048\"}}}]}}",
				   &c, err), 0);
	assert_int_equal(c.mode, CLAIM_SHARED);
	assert_int_equal(c.count, 2);
	assert_int_equal(c.mem_mib, 6144);
}

static void test_pod_shared_memory_only_and_core_only(void **state)
{
	(void)state;
	struct claim c;
	char err[256];
	assert_int_equal(pod_claim("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
				   "{\"gpu.scheduling/gpu-memory\":\"4096\"}}},{\"name\":\"b\",\"resources\":{\"limits\":"
				   "{\"gpu.scheduling/gpu-memory\":\"1024\"}}}]}}", &c, err), 0);
	assert_int_equal(c.mode, CLAIM_SHARED);
	assert_int_equal(c.count, 1);
	assert_int_equal(c.mem_mib, 5120);
	assert_int_equal(c.core, 0);
	assert_int_equal(pod_claim("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
				   "{\"gpu.scheduling/gpu-core\":\"30\"}}}]}}", &c, err), 0);
	assert_int_equal(c.mode, CLAIM_SHARED);
	assert_int_equal(c.mem_mib, 0);
	assert_int_equal(c.core, 300);
	assert_int_equal(pod_claim("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
				   "{\"gpu.scheduling/gpu\":\"2\",\"gpu.scheduling/gpu-core\":\"50\"}}}]}}", &c, err), 0);
	assert_int_equal(c.mode, CLAIM_SHARED);
	assert_int_equal(c.count, 2);
	assert_int_equal(c.core, 500);
}

static void test_pod_bad_quantities(void **state)
{
	(void)state;
	struct claim c;
	char err[256];
	assert_int_equal(pod_claim("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
				   "{\"gpu.scheduling/gpu\":\"two\"}}}]}}", &c, err), -1);
	assert_string_equal(err, "container a: gpu.scheduling/gpu is not a valid quantity");
	assert_int_equal(pod_claim("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
				   "{\"gpu.scheduling/gpu-core\":\"150\"}}}]}}", &c, err), -1);
	assert_non_null(strstr(err, "over 100"));
	assert_int_equal(pod_claim("{\"metadata\":{}}", &c, err), -1);
	assert_string_equal(err, "Pod has no spec");
}

static void test_resource_aliases(void **state)
{
	(void)state;
	char err[256];
	assert_int_equal(api_resources_set(&res, "core", "gpu.scheduling/gpu-core, nano-gpu/gpu-percent", err, sizeof(err)), 0);
	struct claim c;
	assert_int_equal(pod_claim("{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
				   "{\"nano-gpu/gpu-percent\":\"20\"}}}]}}", &c, err), 0);
	assert_int_equal(c.core, 200);
	assert_true(api_resources_has(&res, "nano-gpu/gpu-percent"));
	assert_int_equal(api_resources_set(&res, "core", "no-domain", err, sizeof(err)), -1);
	assert_int_equal(api_resources_set(&res, "bogus", "a/b", err, sizeof(err)), -1);
	api_resources_default(&res);
}

#define SHARE_POD(limits) "{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":" limits "}}]}}"

static void test_pod_share_slots(void **state)
{
	(void)state;
	struct claim c;
	char err[256];
	/* gpu-share is how many GPUs a share spans (what kubelet counts in slots) */
	assert_int_equal(pod_claim(SHARE_POD("{\"gpu.scheduling/gpu-share\":\"2\",\"gpu.scheduling/gpu-memory\":\"1024\"}"),
				   &c, err), 0);
	assert_int_equal(c.mode, CLAIM_SHARED);
	assert_int_equal(c.count, 2);
	assert_int_equal(c.mem_mib, 1024);
	assert_true(api_resources_has(&res, "gpu.scheduling/gpu-share"));
	/* whole GPUs and shares in one pod, and a share of nothing: refused with the reason */
	const char *pod = "{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"1\"}}},"
			  "{\"name\":\"b\",\"resources\":{\"limits\":{\"gpu.scheduling/gpu-share\":\"1\",\"gpu.scheduling/gpu-core\":\"10\"}}}]}}";
	assert_int_equal(pod_claim(pod, &c, err), -1);
	assert_string_equal(err, "pod asks whole GPUs (gpu.scheduling/gpu) and shares (gpu.scheduling/gpu-share): "
				 "a pod gets one or the other");
	assert_int_equal(pod_claim(SHARE_POD("{\"gpu.scheduling/gpu-share\":\"1\"}"), &c, err), -1);
	assert_string_equal(err, "gpu.scheduling/gpu-share needs gpu.scheduling/gpu-memory or gpu.scheduling/gpu-core: "
				 "say how much of each GPU the share takes");
	assert_int_equal(pod_claim(SHARE_POD("{\"gpu.scheduling/gpu-share\":\"65\",\"gpu.scheduling/gpu-core\":\"1\"}"),
				   &c, err), -1);
	char e2[128];
	assert_int_equal(api_resources_set(&res, "share", "a/b, c/d", e2, sizeof(e2)), 0);
	assert_int_equal(res.nshare, 2);
	api_resources_default(&res);
}

/* A claim pod's gpu / gpu-share count (the webhook adds it) must say what the claim says. */
static void test_pod_claim_with_counts(void **state)
{
	(void)state;
	cJSON *excl = J("{\"metadata\":{\"name\":\"c1\"},\"spec\":{\"devices\":{\"count\":2}}}");
	cJSON *shared = J("{\"metadata\":{\"name\":\"c1\"},\"spec\":{\"devices\":{\"count\":1,"
			  "\"exclusivity\":\"Shared\",\"memoryMiB\":1024}}}");
	const struct {
		cJSON *claim;
		const char *limits;
		int rc;
	} cases[] = {
		{ excl, "{\"gpu.scheduling/gpu\":\"2\"}", 0 },
		{ excl, "{\"gpu.scheduling/claim\":\"1\"}", 0 },
		{ excl, "{\"gpu.scheduling/gpu\":\"1\"}", -1 },
		{ excl, "{\"gpu.scheduling/gpu-share\":\"2\",\"gpu.scheduling/gpu-memory\":\"1\"}", -1 },
		{ shared, "{\"gpu.scheduling/gpu-share\":\"1\"}", 0 },
		{ shared, "{\"gpu.scheduling/gpu\":\"1\"}", -1 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char text[512], err[256] = "";
		snprintf(text, sizeof(text), "{\"metadata\":{\"name\":\"p\",\"namespace\":\"ml\",\"annotations\":"
			 "{\"gpu.scheduling/claim\":\"c1\"}},\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":"
			 "{\"limits\":%s}}]}}", cases[i].limits);
		cJSON *pod = J(text);
		struct claim c;
		int rc = api_pod_claim(pod, &res, lookup_one, cases[i].claim, &c, err, sizeof(err));
		if (rc != cases[i].rc)
			fail_msg("case %zu: rc %d (%s)", i, rc, err);
		if (rc)
			assert_non_null(strstr(err, "GpuClaim c1 is"));
		else
			claim_release(&c);
		cJSON_Delete(pod);
	}
	cJSON_Delete(excl);
	cJSON_Delete(shared);
}

static const cJSON *lookup_one(void *ctx, const char *ns, const char *name)
{
	return !strcmp(ns, "ml") && !strcmp(name, "c1") ? ctx : NULL;
}

static void test_pod_claim_annotation(void **state)
{
	(void)state;
	cJSON *gc = J("{\"metadata\":{\"name\":\"c1\",\"namespace\":\"ml\"},\"spec\":{"
		      "\"devices\":{\"count\":2,\"policy\":\"preferIds\",\"preferIds\":[3,1],\"exclusivity\":\"Exclusive\","
		      "\"vendor\":\"nvidia\",\"model\":\"H100|A100\",\"architecture\":\"hopper\",\"minMemoryMiB\":40000},"
		      "\"selector\":{\"matchLabels\":{\"zone\":\"a\"}},"
		      "\"topology\":{\"mode\":\"Required\",\"minBandwidthGBps\":300},\"gangRef\":\"g1\"}}");
	cJSON *pod = J("{\"metadata\":{\"name\":\"p\",\"namespace\":\"ml\",\"annotations\":"
		       "{\"gpu.scheduling/claim\":\"c1\",\"gpu.scheduling/policy\":\"spread\"}},\"spec\":{\"containers\":[]}}");
	struct claim c;
	char err[256];
	assert_int_equal(api_pod_claim(pod, &res, lookup_one, gc, &c, err, sizeof(err)), 0);
	assert_int_equal(c.mode, CLAIM_EXCLUSIVE);
	assert_int_equal(c.count, 2);
	assert_int_equal(c.placement, PLACE_PREFER_IDS);
	assert_int_equal(c.nprefer, 2);
	assert_int_equal(c.prefer_ids[0], 3);
	assert_int_equal(c.vendor, GPU_VENDOR_NVIDIA);
	assert_string_equal(c.models, "H100|A100");
	assert_string_equal(c.arch, "hopper");
	assert_int_equal(c.min_mem_mib, 40000);
	assert_int_equal(c.nmatch, 1);
	assert_string_equal(c.match[0].key, "zone");
	assert_int_equal(c.topo, TOPO_REQUIRED);
	assert_true(c.min_bw_gbps == 300);
	assert_int_equal(c.policy, POLICY_SPREAD);
	assert_string_equal(c.gang, "g1");
	assert_int_equal(c.gang_size, 0);
	claim_release(&c);
	/* Missing claim, unknown policy: clear errors. */
	cJSON_Delete(pod);
	pod = J("{\"metadata\":{\"name\":\"p\",\"namespace\":\"ml\",\"annotations\":"
		"{\"gpu.scheduling/claim\":\"nope\"}},\"spec\":{\"containers\":[]}}");
	assert_int_equal(api_pod_claim(pod, &res, lookup_one, gc, &c, err, sizeof(err)), -1);
	assert_string_equal(err, "GpuClaim ml/nope not found");
	cJSON_Delete(pod);
	pod = J("{\"metadata\":{\"name\":\"p\",\"annotations\":{\"gpu.scheduling/policy\":\"fastest\"}},\"spec\":{}}");
	assert_int_equal(api_pod_claim(pod, &res, lookup_one, gc, &c, err, sizeof(err)), -1);
	assert_string_equal(err, "annotation gpu.scheduling/policy: unknown policy 'fastest'");
	cJSON_Delete(pod);
	cJSON_Delete(gc);
}

static void check_bad_claim(const char *spec, const char *want)
{
	char text[512], err[256];
	snprintf(text, sizeof(text), "{\"spec\":%s}", spec);
	cJSON *gc = J(text);
	struct claim c;
	assert_int_equal(api_gpuclaim_decode(gc, &c, err, sizeof(err)), -1);
	if (!strstr(err, want))
		fail_msg("for %s: got '%s', want '%s'", spec, err, want);
	cJSON_Delete(gc);
}

static void test_gpuclaim_validation(void **state)
{
	(void)state;
	check_bad_claim("{}", "no spec.devices");
	check_bad_claim("{\"devices\":{\"count\":0}}", "spec.devices.count must be an integer in 1..64");
	check_bad_claim("{\"devices\":{\"count\":1.5}}", "spec.devices.count");
	check_bad_claim("{\"devices\":{\"count\":\"2\"}}", "spec.devices.count");
	check_bad_claim("{\"devices\":{\"exclusivity\":\"Mine\"}}", "must be one of Exclusive, Shared, MIG");
	check_bad_claim("{\"devices\":{\"policy\":\"random\"}}", "spec.devices.policy must be one of");
	check_bad_claim("{\"devices\":{\"policy\":\"preferIds\"}}", "needs spec.devices.preferIds");
	check_bad_claim("{\"devices\":{\"exclusivity\":\"Shared\"}}", "needs memoryMiB or corePercent");
	check_bad_claim("{\"devices\":{\"exclusivity\":\"Shared\",\"corePercent\":101}}", "corePercent");
	check_bad_claim("{\"devices\":{\"memoryMiB\":100}}", "apply only to exclusivity Shared");
	check_bad_claim("{\"devices\":{\"vendor\":\"acme\"}}", "vendor must be nvidia, amd or intel");
	check_bad_claim("{\"devices\":{},\"topology\":{\"mode\":\"Always\"}}", "spec.topology.mode");
	check_bad_claim("{\"devices\":{},\"topology\":{\"minBandwidthGBps\":-1}}", "minBandwidthGBps");
	check_bad_claim("{\"devices\":{},\"selector\":{\"matchLabels\":{\"a\":1}}}", "matchLabels.a must be a string");
	check_bad_claim("{\"devices\":{},\"gangSize\":4}", "spec.gangSize needs spec.gangRef");
	check_bad_claim("{\"devices\":{},\"gangRef\":\"j\",\"gangSize\":0}", "spec.gangSize must be an integer in 1..1024");
	check_bad_claim("{\"devices\":{},\"gangRef\":\"j\",\"gangTimeoutSeconds\":1e9}", "gangTimeoutSeconds");
	check_bad_claim("{\"devices\":{},\"gangRef\":7}", "spec.gangRef must be a string");
	/* Defaults: one exclusive GPU, topology preferred. */
	cJSON *gc = J("{\"spec\":{\"devices\":{}}}");
	struct claim c;
	char err[256];
	assert_int_equal(api_gpuclaim_decode(gc, &c, err, sizeof(err)), 0);
	assert_int_equal(c.count, 1);
	assert_int_equal(c.mode, CLAIM_EXCLUSIVE);
	assert_int_equal(c.topo, TOPO_PREFERRED);
	claim_release(&c);
	cJSON_Delete(gc);
	gc = J("{\"spec\":{\"devices\":{\"exclusivity\":\"Shared\",\"memoryMiB\":2048,\"corePercent\":10}}}");
	assert_int_equal(api_gpuclaim_decode(gc, &c, err, sizeof(err)), 0);
	assert_int_equal(c.mode, CLAIM_SHARED);
	assert_int_equal(c.mem_mib, 2048);
	assert_int_equal(c.core, 100);
	claim_release(&c);
	cJSON_Delete(gc);
}

/* A gang: from the GpuClaim (gangRef, gangSize, gangTimeoutSeconds) or the coscheduling label. */
static void test_gangs(void **state)
{
	(void)state;
	cJSON *gc = J("{\"spec\":{\"devices\":{\"count\":8},\"gangRef\":\"job-7\",\"gangSize\":4,"
		      "\"gangTimeoutSeconds\":90}}");
	struct claim c;
	char err[256];
	assert_int_equal(api_gpuclaim_decode(gc, &c, err, sizeof(err)), 0);
	assert_string_equal(c.gang, "job-7");
	assert_int_equal(c.gang_size, 4);
	assert_int_equal(c.gang_timeout_s, 90);
	claim_release(&c);
	cJSON_Delete(gc);
	assert_int_equal(pod_claim("{\"metadata\":{\"name\":\"w\",\"namespace\":\"ml\",\"labels\":"
				   "{\"scheduling.x-k8s.io/pod-group\":\"pg-1\"}},\"spec\":{\"containers\":[{\"name\":\"c\","
				   "\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"2\"}}}]}}", &c, err), 0);
	assert_string_equal(c.gang, "pg-1");
	assert_int_equal(c.gang_size, 0);     /* the PodGroup's minMember, read when the gang is placed */
	claim_release(&c);
	/* A pod without GPUs is in no gang of ours, label or not. */
	assert_int_equal(pod_claim("{\"metadata\":{\"name\":\"w\",\"labels\":{\"scheduling.x-k8s.io/pod-group\":\"pg-1\"}},"
				   "\"spec\":{\"containers\":[]}}", &c, err), 0);
	assert_string_equal(c.gang, "");
	claim_release(&c);
	assert_int_equal(pod_claim("{\"metadata\":{\"name\":\"w\",\"labels\":{\"scheduling.x-k8s.io/pod-group\":\"\"}},"
				   "\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":"
				   "{\"gpu.scheduling/gpu\":\"1\"}}}]}}", &c, err), -1);
	assert_non_null(strstr(err, "must be a PodGroup name"));
}

/*
 * Kubernetes' own gang API in both shapes: 1.35's spec.workloadRef to a
 * scheduling.k8s.io/v1alpha1 Workload, and 1.36's spec.schedulingGroup to a
 * PodGroup object (v1alpha2, v1alpha3, v1beta1: one shape).
 */
static void test_k8s_gangs(void **state)
{
	(void)state;
	struct claim c;
	char err[256];
	const char *gpu = "\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"2\"}}}]";
	char pod[512];
	snprintf(pod, sizeof(pod), "{\"metadata\":{\"name\":\"w\"},\"spec\":{\"workloadRef\":{\"name\":\"w7\","
		 "\"podGroup\":\"workers\",\"podGroupReplicaKey\":\"r1\"},%s}}", gpu);
	assert_int_equal(pod_claim(pod, &c, err), 0);
	assert_string_equal(c.gang, "w7/workers/r1");
	assert_int_equal(c.gang_kind, GANG_WORKLOAD);
	claim_release(&c);
	snprintf(pod, sizeof(pod), "{\"metadata\":{\"name\":\"w\"},\"spec\":{\"schedulingGroup\":"
		 "{\"podGroupName\":\"train\"},%s}}", gpu);
	assert_int_equal(pod_claim(pod, &c, err), 0);
	assert_string_equal(c.gang, CLAIM_PODGROUP_PREFIX "train");
	assert_int_equal(c.gang_kind, GANG_SCHEDULING_GROUP);
	assert_int_equal(c.gang_size, 0);     /* the PodGroup's minCount, read when the gang is placed */
	claim_release(&c);
	snprintf(pod, sizeof(pod), "{\"metadata\":{\"name\":\"w\"},\"spec\":{\"schedulingGroup\":{},%s}}", gpu);
	assert_int_equal(pod_claim(pod, &c, err), -1);
	assert_non_null(strstr(err, "spec.schedulingGroup.podGroupName"));
	/* A pod without GPUs is in no gang of ours. */
	assert_int_equal(pod_claim("{\"spec\":{\"schedulingGroup\":{\"podGroupName\":\"t\"},\"containers\":[]}}", &c, err),
			 0);
	assert_string_equal(c.gang, "");
	claim_release(&c);

	/* v1alpha1 Workload: spec.podGroups[].policy.gang.minCount; basic is no gang. */
	int size = 0;
	cJSON *wl = J("{\"spec\":{\"podGroups\":[{\"name\":\"ps\",\"policy\":{\"basic\":{}}},"
		      "{\"name\":\"workers\",\"policy\":{\"gang\":{\"minCount\":3}}},"
		      "{\"name\":\"bad\",\"policy\":{\"gang\":{\"minCount\":0}}}]}}");
	assert_int_equal(api_workload_gang(wl, "workers", &size, err, sizeof(err)), 1);
	assert_int_equal(size, 3);
	assert_int_equal(api_workload_gang(wl, "ps", &size, err, sizeof(err)), 0);
	assert_int_equal(api_workload_gang(wl, "none", &size, err, sizeof(err)), -1);
	assert_string_equal(err, "no pod group none");
	assert_int_equal(api_workload_gang(wl, "bad", &size, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "pod group bad: policy.gang.minCount must be 1..1024"));
	cJSON_Delete(wl);

	/* PodGroup (v1alpha2..v1beta1): spec.schedulingPolicy.gang.minCount; basic is no gang. */
	cJSON *pg = J("{\"apiVersion\":\"scheduling.k8s.io/v1beta1\",\"kind\":\"PodGroup\",\"spec\":{\"workloadRef\":"
		      "{\"workloadName\":\"w\",\"templateName\":\"t\"},\"schedulingPolicy\":{\"gang\":{\"minCount\":4}}}}");
	assert_int_equal(api_podgroup_gang(pg, &size, err, sizeof(err)), 1);
	assert_int_equal(size, 4);
	cJSON_Delete(pg);
	pg = J("{\"spec\":{\"schedulingPolicy\":{\"basic\":{}}}}");
	assert_int_equal(api_podgroup_gang(pg, &size, err, sizeof(err)), 0);
	cJSON_Delete(pg);
	const char *bad[] = { "{\"spec\":{\"schedulingPolicy\":{\"gang\":{\"minCount\":0}}}}",
			      "{\"spec\":{\"schedulingPolicy\":{\"gang\":{\"minCount\":2.5}}}}",
			      "{\"spec\":{\"schedulingPolicy\":{\"gang\":{}}}}",
			      "{\"spec\":{\"schedulingPolicy\":{\"gang\":{\"minCount\":\"3\"}}}}" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		pg = J(bad[i]);
		assert_int_equal(api_podgroup_gang(pg, &size, err, sizeof(err)), -1);
		assert_string_equal(err, "spec.schedulingPolicy.gang.minCount must be 1..1024");
		cJSON_Delete(pg);
	}
}

/* Discovery: which versions of a group are served, and whether one serves a resource. */
static void test_discovery(void **state)
{
	(void)state;
	/* GET /apis/scheduling.k8s.io of 1.37 with v1beta1 on. */
	cJSON *group = J("{\"kind\":\"APIGroup\",\"name\":\"scheduling.k8s.io\",\"versions\":["
			 "{\"groupVersion\":\"scheduling.k8s.io/v1\",\"version\":\"v1\"},"
			 "{\"groupVersion\":\"scheduling.k8s.io/v1beta1\",\"version\":\"v1beta1\"}],"
			 "\"preferredVersion\":{\"groupVersion\":\"scheduling.k8s.io/v1\",\"version\":\"v1\"}}");
	assert_true(api_group_serves(group, "v1beta1"));
	assert_true(api_group_serves(group, "v1"));
	assert_false(api_group_serves(group, "v1alpha3"));
	assert_false(api_group_serves(NULL, "v1"));
	cJSON_Delete(group);
	/* GET /apis/scheduling.k8s.io/v1beta1 */
	cJSON *list = J("{\"kind\":\"APIResourceList\",\"groupVersion\":\"scheduling.k8s.io/v1beta1\",\"resources\":["
			"{\"name\":\"podgroups\",\"namespaced\":true,\"kind\":\"PodGroup\"},"
			"{\"name\":\"podgroups/status\",\"namespaced\":true,\"kind\":\"PodGroup\"},"
			"{\"name\":\"workloads\",\"namespaced\":true,\"kind\":\"Workload\"}]}");
	assert_true(api_resource_list_has(list, "podgroups"));
	assert_true(api_resource_list_has(list, "workloads"));
	assert_false(api_resource_list_has(list, "podgroup"));
	assert_false(api_resource_list_has(NULL, "podgroups"));
	cJSON_Delete(list);
}

/* A claim packed and unpacked again has every field it had; a plain one packs small. */
static void test_claim_pack(void **state)
{
	(void)state;
	struct claim c, back;
	claim_init(&c);
	c.mode = CLAIM_SHARED;
	c.count = 3;
	c.mem_mib = 12345;
	c.core = 250;
	c.placement = PLACE_PREFER_IDS;
	c.nprefer = 2;
	c.prefer_ids[0] = 7;
	c.prefer_ids[1] = 1003;
	c.vendor = GPU_VENDOR_AMD;
	snprintf(c.models, sizeof(c.models), "MI300X|MI250");
	snprintf(c.arch, sizeof(c.arch), "gfx942");
	c.min_mem_mib = 65536;
	assert_int_equal(claim_add_match(&c, "pool", "train"), 0);
	assert_int_equal(claim_add_match(&c, "zone", ""), 0);
	c.topo = TOPO_REQUIRED;
	c.min_bw_gbps = 450.5;
	c.policy = 3;
	c.cpu_milli = 4000;
	c.mem_mib_host = 1 << 20;
	snprintf(c.gpuclaim, sizeof(c.gpuclaim), "big-job");
	c.gang_kind = GANG_WORKLOAD;
	snprintf(c.gang, sizeof(c.gang), "wl/pg/0");
	c.gang_size = 16;
	c.gang_timeout_s = 90;
	snprintf(c.pod_version, sizeof(c.pod_version), "184467");
	struct buf packed;
	buf_init(&packed, 4096);
	assert_int_equal(claim_pack(&c, &packed), 0);
	size_t size = packed.len;
	struct buf small_cap;
	buf_init(&small_cap, size - 1);
	assert_int_equal(claim_pack(&c, &small_cap), -1);       /* no room: refused */
	buf_release(&small_cap);
	unsigned char *buf = malloc(size);                     /* exactly its size: reads nothing past it */
	memcpy(buf, packed.data, size);
	buf_release(&packed);
	assert_int_equal(claim_unpack(buf, &back), 0);
	assert_int_equal(back.mode, c.mode);
	assert_int_equal(back.count, c.count);
	assert_int_equal(back.mem_mib, c.mem_mib);
	assert_int_equal(back.core, c.core);
	assert_int_equal(back.placement, c.placement);
	assert_int_equal(back.nprefer, 2);
	assert_int_equal(back.prefer_ids[0], 7);
	assert_int_equal(back.prefer_ids[1], 1003);
	assert_int_equal(back.vendor, c.vendor);
	assert_string_equal(back.models, c.models);
	assert_string_equal(back.arch, c.arch);
	assert_int_equal(back.min_mem_mib, c.min_mem_mib);
	assert_int_equal(back.nmatch, 2);
	assert_string_equal(back.match[0].key, "pool");
	assert_string_equal(back.match[0].value, "train");
	assert_string_equal(back.match[1].key, "zone");
	assert_string_equal(back.match[1].value, "");
	assert_int_equal(back.topo, c.topo);
	assert_true(back.min_bw_gbps == c.min_bw_gbps);
	assert_int_equal(back.policy, c.policy);
	assert_int_equal(back.cpu_milli, c.cpu_milli);
	assert_int_equal(back.mem_mib_host, c.mem_mib_host);
	assert_string_equal(back.gpuclaim, c.gpuclaim);
	assert_int_equal(back.gang_kind, c.gang_kind);
	assert_string_equal(back.gang, c.gang);
	assert_int_equal(back.gang_size, c.gang_size);
	assert_int_equal(back.gang_timeout_s, c.gang_timeout_s);
	assert_string_equal(back.pod_version, "184467");
	claim_release(&back);
	claim_release(&c);
	free(buf);
	/* A plain claim: a tenth of a struct claim. */
	claim_init(&c);
	c.mode = CLAIM_EXCLUSIVE;
	c.count = 1;
	buf_init(&packed, 100);
	assert_int_equal(claim_pack(&c, &packed), 0);          /* within 100 bytes */
	assert_int_equal(claim_unpack(packed.data, &back), 0);
	buf_release(&packed);
	assert_int_equal(back.policy, -1);
	assert_int_equal(back.count, 1);
	assert_string_equal(back.models, "");
	claim_release(&back);
}

static void test_gns_decode(void **state)
{
	(void)state;
	cJSON *gns = J("{\"metadata\":{\"name\":\"x\"},\"spec\":{\"nodeName\":\"n1\"},\"status\":{\"devices\":["
		       "{\"id\":1,\"uuid\":\"GPU-b\",\"vendor\":\"nvidia\",\"model\":\"H100\",\"memoryMiB\":81559,"
		       "\"health\":\"Healthy\",\"island\":\"nvlink-0\",\"bandwidthGBps\":900,\"inUseBy\":[]},"
		       "{\"id\":0,\"uuid\":\"GPU-a\",\"vendor\":\"nvidia\",\"model\":\"H100\",\"memoryMiB\":81559,"
		       "\"health\":\"Unhealthy\",\"island\":\"nvlink-0\",\"inUseBy\":[\"pod-1\"]},"
		       "{\"id\":1000,\"uuid\":\"MIG-x\",\"vendor\":\"nvidia\",\"model\":\"A100\",\"migProfile\":\"1g.5gb\"}]}}");
	struct gpu_node *n = gpu_node_new("n1");
	const char *name;
	char err[256];
	assert_int_equal(api_gns_decode(gns, n, &name, err, sizeof(err)), 0);
	assert_string_equal(name, "n1");
	assert_int_equal(n->ndev, 3);
	assert_int_equal(n->dev[0].id, 0);       /* sorted by id */
	assert_int_equal(n->dev[0].health, GPU_UNHEALTHY);
	assert_true(n->dev[0].external);
	assert_false(n->dev[1].external);
	assert_int_equal(n->nisland, 1);
	assert_true(n->islands[0].bandwidth_gbps == 900);
	assert_int_equal(n->dev[0].island, 0);
	assert_int_equal(n->dev[2].island, -1);
	assert_string_equal(n->info[2].mig_profile, "1g.5gb");
	assert_true(n->dev[2].mig);
	assert_string_equal(n->info[0].uuid, "GPU-a");
	assert_string_equal(n->info[1].uuid, "GPU-b");
	assert_string_equal(n->info[2].uuid, "MIG-x");
	/* Device strings are shared; absent ones are "". */
	assert_ptr_equal(n->info[0].model, n->info[1].model);
	assert_string_equal(n->info[0].model, "H100");
	assert_string_equal(n->info[0].arch, "");
	assert_string_equal(n->info[0].driver, "");
	assert_string_equal(n->info[0].mig_profile, "");
	assert_false(n->dev[0].mig);
	gpu_node_free(n);
	cJSON_Delete(gns);

	/* A UUID too long to keep whole is an error, not a cut one. */
	char uuid[100], text2[256];
	memset(uuid, 'g', sizeof(uuid) - 1);
	uuid[sizeof(uuid) - 1] = '\0';
	snprintf(text2, sizeof(text2), "{\"spec\":{\"nodeName\":\"n\"},\"status\":{\"devices\":[{\"id\":0,\"uuid\":\"%s\"}]}}", uuid);
	gns = J(text2);
	n = gpu_node_new("n");
	assert_int_equal(api_gns_decode(gns, n, &name, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "status.devices[0].uuid is longer than 79 bytes"));
	gpu_node_free(n);
	cJSON_Delete(gns);
	/* One byte less is kept whole. */
	uuid[GPU_UUID_MAX] = '\0';
	snprintf(text2, sizeof(text2), "{\"spec\":{\"nodeName\":\"n\"},\"status\":{\"devices\":[{\"id\":0,\"uuid\":\"%s\"}]}}", uuid);
	gns = J(text2);
	n = gpu_node_new("n");
	assert_int_equal(api_gns_decode(gns, n, &name, err, sizeof(err)), 0);
	assert_string_equal(n->info[0].uuid, uuid);
	gpu_node_free(n);
	cJSON_Delete(gns);

	/* A string of INTERN_MAX_LEN bytes is kept whole; one byte more is an error that names it. */
	char model[INTERN_MAX_LEN + 2], text[512];
	for (int len = INTERN_MAX_LEN; len <= INTERN_MAX_LEN + 1; len++) {
		memset(model, 'M', (size_t)len);
		model[len] = '\0';
		snprintf(text, sizeof(text), "{\"spec\":{\"nodeName\":\"n\"},\"status\":{\"devices\":[{\"id\":0,"
			 "\"driverVersion\":\"1\"},{\"id\":1,\"driverVersion\":\"%s\"}]}}", model);
		gns = J(text);
		n = gpu_node_new("n");
		int rc = api_gns_decode(gns, n, &name, err, sizeof(err));
		if (len == INTERN_MAX_LEN) {
			assert_int_equal(rc, 0);
			assert_int_equal(strlen(n->info[1].driver), INTERN_MAX_LEN);
		} else {
			assert_int_equal(rc, -1);
			assert_non_null(strstr(err, "status.devices[1].driverVersion is longer than"));
		}
		gpu_node_free(n);
		cJSON_Delete(gns);
	}

	const char *bad[] = {
		"{\"spec\":{\"nodeName\":\"n\"},\"status\":{\"devices\":[{\"id\":-1}]}}",
		"{\"spec\":{\"nodeName\":\"n\"},\"status\":{\"devices\":[{\"id\":0},{\"id\":0}]}}",
		"{\"spec\":{\"nodeName\":\"n\"},\"status\":{\"devices\":[{\"id\":0,\"vendor\":\"acme\"}]}}",
		"{\"spec\":{\"nodeName\":\"n\"},\"status\":{\"devices\":[{\"id\":0,\"health\":\"Meh\"}]}}",
		"{\"spec\":{\"nodeName\":\"n\"},\"status\":{\"devices\":{}}}",
		"{\"spec\":{\"nodeName\":\"n\"},\"status\":{\"devices\":[7]}}",
		"{\"status\":{}}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		gns = J(bad[i]);
		n = gpu_node_new("n");
		assert_int_equal(api_gns_decode(gns, n, &name, err, sizeof(err)), -1);
		assert_true(err[0] != '\0');
		gpu_node_free(n);
		cJSON_Delete(gns);
	}
}

static void test_node_decode(void **state)
{
	(void)state;
	cJSON *node = J("{\"metadata\":{\"name\":\"n1\",\"labels\":{\"b\":\"2\",\"a\":\"1\"}}}");
	char err[256];
	struct gpu_node *n = api_node_decode(node, err, sizeof(err));
	assert_non_null(n);
	assert_string_equal(n->name, "n1");
	assert_string_equal(gpu_node_label(n, "a"), "1");
	assert_string_equal(gpu_node_label(n, "b"), "2");
	assert_null(gpu_node_label(n, "c"));
	gpu_node_free(n);
	cJSON_Delete(node);
	node = J("{\"metadata\":{}}");
	assert_null(api_node_decode(node, err, sizeof(err)));
	cJSON_Delete(node);
}

/* A pod's allocation is read when its format version is missing (0.2.0) or known; a newer one is not guessed at. */
static void test_pod_allocated_versions(void **state)
{
	(void)state;
	const char *pods[] = {
		"{\"metadata\":{\"annotations\":{\"gpu.scheduling/allocated\":\"n1:0,1\"}}}",
		"{\"metadata\":{\"annotations\":{\"gpu.scheduling/allocation-version\":\"1\","
		"\"gpu.scheduling/allocated\":\"n1:0,1\"}}}",
		"{\"metadata\":{\"annotations\":{\"gpu.scheduling/allocation-version\":\"2\","
		"\"gpu.scheduling/allocated\":\"n1:0,1\"}}}",
		"{\"metadata\":{\"annotations\":{\"gpu.scheduling/allocation-version\":\"1 \","
		"\"gpu.scheduling/allocated\":\"n1:0,1\"}}}",
		"{\"metadata\":{}}",
	};
	const char *want[] = { "n1:0,1", "n1:0,1", NULL, NULL, NULL };
	const char *why[] = { "", "", "allocation-version 2 is newer than this program reads (up to 1)",
			      "is not a format version", "" };
	for (size_t i = 0; i < sizeof(pods) / sizeof(pods[0]); i++) {
		cJSON *pod = cJSON_Parse(pods[i]);
		char err[256] = "";
		const char *got = api_pod_allocated(pod, err, sizeof(err));
		if (want[i])
			assert_string_equal(got, want[i]);
		else
			assert_null(got);
		assert_non_null(strstr(err, why[i]));
		assert_true(why[i][0] || !err[0]);
		cJSON_Delete(pod);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pod_allocated_versions),
		cmocka_unit_test(test_pod_without_gpus),
		cmocka_unit_test(test_pod_whole_gpus_summed),
		cmocka_unit_test(test_pod_version),
		cmocka_unit_test(test_pod_init_container_max),
		cmocka_unit_test(test_pod_sidecars_added),
		cmocka_unit_test(test_pod_sidecar_shares),
		cmocka_unit_test(test_pod_shared_memory_only_and_core_only),
		cmocka_unit_test(test_pod_bad_quantities),
		cmocka_unit_test(test_resource_aliases),
		cmocka_unit_test(test_pod_share_slots),
		cmocka_unit_test(test_pod_claim_with_counts),
		cmocka_unit_test(test_pod_claim_annotation),
		cmocka_unit_test(test_gpuclaim_validation),
		cmocka_unit_test_setup(test_gangs, setup),
		cmocka_unit_test_setup(test_k8s_gangs, setup),
		cmocka_unit_test(test_discovery),
		cmocka_unit_test(test_claim_pack),
		cmocka_unit_test(test_gns_decode),
		cmocka_unit_test(test_node_decode),
	};
	return cmocka_run_group_tests_name("api", tests, setup, NULL);
}
