/*
 * Publishing: label values, the label merge patch, the GpuNodeStatus
 * create and update bodies, change detection, the backoff, and
 * agent_publish() against a small fake API server (the project's own
 * httpd) that keeps one Node and one GpuNodeStatus, checks the
 * resourceVersion of every PUT and can be told to answer 409, 403 or
 * nothing at all.
 */
#include "test_agent_util.h"

#include "agent.h"
#include "agent_publish.h"
#include "api.h"
#include "httpd.h"
#include "log.h"

#include <cjson/cJSON.h>
#include <pthread.h>

/* ---- helpers ---- */

/* Kubernetes' label value rule: (([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?, at most 63. */
static bool valid_label_value(const char *v)
{
	size_t n = strlen(v);
	if (n == 0)
		return true;
	if (n > 63)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = v[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && c != '-' && c != '_' && c != '.')
			return false;
		if (!alnum && (i == 0 || i == n - 1))
			return false;
	}
	return true;
}

/* An NVIDIA node of n GPUs (and m AMD ones), all Healthy, one island. */
static struct agent_node *make_node(const char *name, int n, int m, const char *model,
				    struct agent_vendor_result **keep)
{
	struct agent_vendor_result *nv = calloc(1, sizeof(*nv)), *amd = calloc(1, sizeof(*amd));
	assert_non_null(nv);
	assert_non_null(amd);
	agent_vendor_result_init(nv, GPU_VENDOR_NVIDIA);
	agent_vendor_result_init(amd, GPU_VENDOR_AMD);
	for (int i = 0; i < n; i++) {
		struct agent_gpu *g = &nv->gpu[nv->ngpu++];
		g->vendor = GPU_VENDOR_NVIDIA;
		g->index = i;
		g->mig_index = -1;
		g->memory_mib = 81559;
		g->health = GPU_HEALTHY;
		snprintf(g->model, sizeof(g->model), "%s", model);
		snprintf(g->arch, sizeof(g->arch), "hopper");
		snprintf(g->uuid, sizeof(g->uuid), "GPU-%d", i);
		snprintf(g->island, sizeof(g->island), "nvlink-0");
		g->bandwidth_gbps = 900;
	}
	for (int i = 0; i < m; i++) {
		struct agent_gpu *g = &amd->gpu[amd->ngpu++];
		g->vendor = GPU_VENDOR_AMD;
		g->index = i;
		g->mig_index = -1;
		g->memory_mib = 65520;
		g->health = GPU_HEALTHY;
		snprintf(g->model, sizeof(g->model), "AMD Instinct MI210");
		snprintf(g->arch, sizeof(g->arch), "gfx90a");
		snprintf(g->uuid, sizeof(g->uuid), "GPU-amd-%d", i);
	}
	const struct agent_vendor_result *vr[AGENT_NVENDOR] = { n ? nv : NULL, m ? amd : NULL, NULL };
	const enum agent_vstate st[AGENT_NVENDOR] = { n ? AGENT_V_OK : AGENT_V_ABSENT,
						      m ? AGENT_V_OK : AGENT_V_ABSENT, AGENT_V_ABSENT };
	struct agent_node *node = malloc(sizeof(*node));
	assert_non_null(node);
	agent_node_build(node, name, vr, st, NULL);
	keep[0] = nv;
	keep[1] = amd;
	return node;
}

static void free_node(struct agent_node *node, struct agent_vendor_result **keep)
{
	free(node);
	free(keep[0]);
	free(keep[1]);
}

/* ---- label values ---- */

static void test_label_value(void **state)
{
	(void)state;
	static const struct {
		const char *in, *want;
	} cases[] = {
		{ "NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3" },
		{ "NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB" },
		{ "Intel(R) Data Center GPU Flex Series 140 [0x56c1]", "Intel-R-Data-Center-GPU-Flex-Series-140-0x56c1" },
		{ "AMD Instinct MI300X", "AMD-Instinct-MI300X" },
		{ "  _.leading junk", "leading-junk" },
		{ "trailing junk -_. ", "trailing-junk" },
		{ "a..b_c", "a..b_c" },
		{ "x -- y", "x-y" },
		{ "()[]", "" },
		{ "", "" },
		{ "gfx90a", "gfx90a" },
		{ "81920", "81920" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[64];
		assert_true(agent_label_value(out, sizeof(out), cases[i].in));
		assert_string_equal(out, cases[i].want);
		assert_true(valid_label_value(out));
	}
	/* too long: cut to 63, still ending alphanumeric */
	char out[64], in[200];
	memset(in, 'a', sizeof(in) - 1);
	in[sizeof(in) - 1] = '\0';
	in[62] = ' ';   /* a cut right after a separator must not end in '-' */
	assert_false(agent_label_value(out, sizeof(out), in));
	assert_true(strlen(out) <= 63);
	assert_true(valid_label_value(out));
	assert_int_equal(strlen(out), 62);
	/* a small buffer cuts earlier */
	char small[8];
	agent_label_value(small, sizeof(small), "NVIDIA H100");
	assert_string_equal(small, "NVIDIA");
	assert_true(agent_label_value(small, sizeof(small), NULL));
	assert_string_equal(small, "");
}

/* Any bytes at all give a valid value. */
static void test_label_value_any_bytes(void **state)
{
	(void)state;
	uint32_t x = 12345;
	for (int round = 0; round < 2000; round++) {
		char in[100], out[64];
		int n = (int)(x % 99);
		for (int i = 0; i < n; i++) {
			x = x * 1103515245u + 12345u;
			in[i] = (char)(1 + (x >> 16) % 255);
		}
		in[n] = '\0';
		agent_label_value(out, sizeof(out), in);
		if (!valid_label_value(out))
			fail_msg("'%s' from input %d is not a label value", out, round);
		x = x * 1103515245u + 12345u;
	}
}

/* ---- the labels and their patch ---- */

static void test_label_set(void **state)
{
	(void)state;
	struct agent_vendor_result *keep[2];
	struct agent_node *node = make_node("n1", 8, 0, "NVIDIA H100 80GB HBM3", keep);
	struct agent_labels ls;
	agent_node_label_set(node, &ls);
	assert_string_equal(agent_labels_get(&ls, "gpu.scheduling/model"), "NVIDIA-H100-80GB-HBM3");
	assert_string_equal(agent_labels_get(&ls, "gpu.scheduling/vendor"), "nvidia");
	assert_string_equal(agent_labels_get(&ls, "gpu.scheduling/count"), "8");
	assert_string_equal(agent_labels_get(&ls, "gpu.scheduling/nvidia.count"), "8");
	assert_string_equal(agent_labels_get(&ls, "gpu.scheduling/memory-mib"), "81559");
	assert_string_equal(agent_labels_get(&ls, "gpu.scheduling/fast-interconnect"), "true");
	assert_null(agent_labels_get(&ls, "gpu.scheduling/amd.count"));
	for (int i = 0; i < ls.n; i++) {
		assert_true(agent_label_managed(ls.l[i].key));
		assert_true(valid_label_value(ls.l[i].value));
	}
	/* the text form is the same set */
	char text[2048];
	assert_int_equal(agent_node_labels(node, text, sizeof(text)), ls.n);
	assert_non_null(strstr(text, "gpu.scheduling/model=NVIDIA-H100-80GB-HBM3\n"));
	/* equality ignores order */
	struct agent_labels rev = ls;
	for (int i = 0; i < ls.n; i++)
		rev.l[i] = ls.l[ls.n - 1 - i];
	assert_true(agent_labels_equal(&ls, &rev));
	snprintf(rev.l[0].value, sizeof(rev.l[0].value), "other");
	assert_false(agent_labels_equal(&ls, &rev));
	rev = ls;
	rev.n--;
	assert_false(agent_labels_equal(&ls, &rev));
	assert_false(agent_label_managed("gpu.scheduling/managed"));
	assert_false(agent_label_managed("kubernetes.io/hostname"));
	free_node(node, keep);
}

static void test_labels_patch(void **state)
{
	(void)state;
	struct agent_vendor_result *keep[2];
	struct agent_node *node = make_node("n1", 2, 0, "NVIDIA H100 80GB HBM3", keep);
	struct agent_labels ls;
	agent_node_label_set(node, &ls);
	struct buf b;
	buf_init(&b, 1 << 16);
	assert_int_equal(agent_labels_patch(&ls, &b), 0);
	cJSON *j = cJSON_Parse(buf_cstr(&b));
	assert_non_null(j);
	const cJSON *labels = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "metadata"), "labels");
	assert_true(cJSON_IsObject(labels));
	/* only "metadata" at the top, only "labels" in it */
	assert_int_equal(cJSON_GetArraySize(j), 1);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "metadata")), 1);
	const char *const *keys;
	int nkeys = agent_label_managed_keys(&keys);
	assert_int_equal(cJSON_GetArraySize(labels), nkeys);
	for (int i = 0; i < nkeys; i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(labels, keys[i]);
		assert_non_null(v);
		const char *want = agent_labels_get(&ls, keys[i]);
		if (want) {
			assert_true(cJSON_IsString(v));
			assert_string_equal(v->valuestring, want);
		} else {
			assert_true(cJSON_IsNull(v));   /* removes a vendor that disappeared */
		}
	}
	assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(labels, "gpu.scheduling/amd.count")));
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(labels, "gpu.scheduling/nvidia.count")->valuestring, "2");
	cJSON_Delete(j);

	/* a node without GPUs: present=false, everything else removed */
	free_node(node, keep);
	node = make_node("n1", 0, 0, "", keep);
	agent_node_label_set(node, &ls);
	assert_int_equal(ls.n, 1);
	buf_clear(&b);
	assert_int_equal(agent_labels_patch(&ls, &b), 0);
	j = cJSON_Parse(buf_cstr(&b));
	labels = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "metadata"), "labels");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(labels, "gpu.scheduling/present")->valuestring, "false");
	assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(labels, "gpu.scheduling/count")));
	cJSON_Delete(j);

	/* a tiny cap is an error, not a crash */
	struct buf tiny;
	buf_init(&tiny, 16);
	assert_int_not_equal(agent_labels_patch(&ls, &tiny), 0);
	buf_release(&tiny);
	buf_release(&b);
	free_node(node, keep);
}

/* ---- bodies ---- */

static void test_create_body(void **state)
{
	(void)state;
	struct agent_vendor_result *keep[2];
	struct agent_node *node = make_node("n1", 4, 0, "NVIDIA H100 80GB HBM3", keep);
	node->dev[2].g.health = GPU_UNHEALTHY;
	char *desired = agent_gns_json(node, "2026-01-02T03:04:05Z", false);
	char err[256];
	char *body = agent_gns_create_body(desired, "uid-1", err, sizeof(err));
	assert_non_null(body);
	cJSON *j = cJSON_Parse(body);
	const cJSON *refs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "metadata"),
							     "ownerReferences");
	assert_int_equal(cJSON_GetArraySize(refs), 1);
	const cJSON *r = cJSON_GetArrayItem(refs, 0);
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(r, "kind")->valuestring, "Node");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(r, "apiVersion")->valuestring, "v1");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(r, "name")->valuestring, "n1");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(r, "uid")->valuestring, "uid-1");
	assert_null(cJSON_GetObjectItemCaseSensitive(r, "blockOwnerDeletion"));   /* needs more RBAC */

	/* the extender reads it: 4 devices, one unhealthy */
	struct gpu_node *gn = gpu_node_new("n1");
	const char *name = NULL;
	assert_int_equal(api_gns_decode(j, gn, &name, err, sizeof(err)), 0);
	assert_string_equal(name, "n1");
	assert_int_equal(gn->ndev, 4);
	assert_int_equal(gn->dev[gpu_node_find_device(gn, 2)].health, GPU_UNHEALTHY);
	assert_int_equal(gn->dev[gpu_node_find_device(gn, 1)].health, GPU_HEALTHY);
	gpu_node_free(gn);
	cJSON_Delete(j);
	free(body);

	/* no uid yet: no owner */
	body = agent_gns_create_body(desired, "", err, sizeof(err));
	assert_non_null(body);
	assert_null(strstr(body, "ownerReferences"));
	free(body);
	assert_null(agent_gns_create_body("{\"kind\":\"GpuNodeStatus\"}", "u", err, sizeof(err)));
	assert_non_null(strstr(err, "metadata.name"));
	assert_null(agent_gns_create_body("not json", "u", err, sizeof(err)));
	free(desired);
	free_node(node, keep);
}

static void test_update_body(void **state)
{
	(void)state;
	static const char current[] =
		"{\"apiVersion\":\"gpu.scheduling/v1\",\"kind\":\"GpuNodeStatus\","
		"\"metadata\":{\"name\":\"n1\",\"uid\":\"gns-uid\",\"resourceVersion\":\"42\","
		"\"labels\":{\"team\":\"ml\"},\"annotations\":{\"note\":\"keep me\"},"
		"\"managedFields\":[{\"manager\":\"kubectl\"}],"
		"\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"name\":\"n1\",\"uid\":\"old-uid\"},"
		"{\"apiVersion\":\"example.com/v1\",\"kind\":\"Thing\",\"name\":\"t\",\"uid\":\"t-uid\"}]},"
		"\"spec\":{\"nodeName\":\"n1\"},"
		"\"status\":{\"total\":1,\"devices\":[{\"id\":0,\"vendor\":\"nvidia\",\"health\":\"Healthy\"}],"
		"\"stale\":true}}";
	struct agent_vendor_result *keep[2];
	struct agent_node *node = make_node("n1", 2, 0, "NVIDIA H100 80GB HBM3", keep);
	char *desired = agent_gns_json(node, "2026-01-02T03:04:05Z", false);
	char err[256];
	char *body = agent_gns_update_body(current, strlen(current), desired, "new-uid", err, sizeof(err));
	assert_non_null(body);
	cJSON *j = cJSON_Parse(body);
	const cJSON *meta = cJSON_GetObjectItemCaseSensitive(j, "metadata");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(meta, "resourceVersion")->valuestring, "42");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(meta, "uid")->valuestring, "gns-uid");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(meta, "labels"), "team")->valuestring, "ml");
	assert_non_null(cJSON_GetObjectItemCaseSensitive(meta, "annotations"));
	assert_null(cJSON_GetObjectItemCaseSensitive(meta, "managedFields"));
	const cJSON *refs = cJSON_GetObjectItemCaseSensitive(meta, "ownerReferences");
	assert_int_equal(cJSON_GetArraySize(refs), 2);
	bool thing = false, nodeowner = false;
	const cJSON *r;
	cJSON_ArrayForEach(r, refs) {
		const char *kind = cJSON_GetObjectItemCaseSensitive(r, "kind")->valuestring;
		const char *uid = cJSON_GetObjectItemCaseSensitive(r, "uid")->valuestring;
		if (!strcmp(kind, "Thing"))
			thing = !strcmp(uid, "t-uid");
		if (!strcmp(kind, "Node"))
			nodeowner = !strcmp(uid, "new-uid");
	}
	assert_true(thing && nodeowner);
	const cJSON *status = cJSON_GetObjectItemCaseSensitive(j, "status");
	assert_int_equal(cJSON_GetObjectItemCaseSensitive(status, "total")->valueint, 2);
	assert_null(cJSON_GetObjectItemCaseSensitive(status, "stale"));   /* replaced, not merged */
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(status, "lastUpdated")->valuestring, "2026-01-02T03:04:05Z");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "kind")->valuestring, "GpuNodeStatus");
	cJSON_Delete(j);
	free(body);

	/* without a uid the old Node owner goes (it may name a deleted Node) */
	body = agent_gns_update_body(current, strlen(current), desired, "", err, sizeof(err));
	assert_non_null(body);
	assert_null(strstr(body, "old-uid"));
	assert_non_null(strstr(body, "t-uid"));
	free(body);

	/* no resourceVersion, or not JSON: refused */
	static const char norv[] = "{\"metadata\":{\"name\":\"n1\"}}";
	assert_null(agent_gns_update_body(norv, strlen(norv), desired, "", err, sizeof(err)));
	assert_non_null(strstr(err, "resourceVersion"));
	assert_null(agent_gns_update_body("<html>", 6, desired, "", err, sizeof(err)));
	assert_null(agent_gns_update_body(current, strlen(current), "{}", "", err, sizeof(err)));
	free(desired);
	free_node(node, keep);
}

/* The extender's counts (status.allocation, src/nodesum) survive the agent's update; the rest of status is the agent's. */
static void test_update_keeps_allocation(void **state)
{
	(void)state;
	static const char current[] =
		"{\"apiVersion\":\"gpu.scheduling/v1\",\"kind\":\"GpuNodeStatus\","
		"\"metadata\":{\"name\":\"n1\",\"resourceVersion\":\"7\"},\"spec\":{\"nodeName\":\"n1\"},"
		"\"status\":{\"total\":1,\"free\":1,\"allocation\":{\"allocated\":1,\"whole\":1,\"shared\":0,"
		"\"free\":0,\"unhealthy\":0,\"reservations\":1,\"countedAt\":\"2026-01-02T03:04:00Z\","
		"\"countedBy\":\"ext-0\"}}}";
	struct agent_vendor_result *keep[2];
	struct agent_node *node = make_node("n1", 2, 0, "NVIDIA H100 80GB HBM3", keep);
	char *desired = agent_gns_json(node, "2026-01-02T03:04:05Z", false);
	assert_null(strstr(desired, "allocation"));   /* the agent never writes them itself */
	char err[256];
	char *body = agent_gns_update_body(current, strlen(current), desired, "", err, sizeof(err));
	assert_non_null(body);
	cJSON *j = cJSON_Parse(body);
	const cJSON *status = cJSON_GetObjectItemCaseSensitive(j, "status");
	assert_int_equal(cJSON_GetObjectItemCaseSensitive(status, "total")->valueint, 2);
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(status, "allocation");
	assert_non_null(a);
	assert_int_equal(cJSON_GetObjectItemCaseSensitive(a, "allocated")->valueint, 1);
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(a, "countedBy")->valuestring, "ext-0");
	cJSON_Delete(j);
	free(body);
	free(desired);
	free_node(node, keep);
}

/* ---- change detection ---- */

static void test_change_detection(void **state)
{
	(void)state;
	struct agent_vendor_result *keep[2];
	struct agent_node *node = make_node("n1", 4, 0, "NVIDIA H100 80GB HBM3", keep);
	char *fp1 = agent_gns_json(node, NULL, false);
	/* the fingerprint leaves lastUpdated out, so two rounds agree */
	char *fp1b = agent_gns_json(node, NULL, false);
	assert_string_equal(fp1, fp1b);
	assert_null(strstr(fp1, "lastUpdated"));

	struct agent_pub_state s;
	agent_pub_state_init(&s);
	assert_true(agent_pub_gns_due(&s, fp1, "", 0, 10000));   /* never written */
	s.gns = strdup(fp1);
	s.gns_at_ms = 1000;
	assert_false(agent_pub_gns_due(&s, fp1b, "", 5000, 10000));
	assert_true(agent_pub_gns_due(&s, fp1b, "", 11000, 10000));   /* resync: liveness */
	assert_false(agent_pub_gns_due(&s, fp1b, "", 1000000, 0));    /* no resync */
	assert_true(agent_pub_gns_due(&s, fp1b, "uid-2", 5000, 10000));   /* the Node was recreated */
	/* a device going unhealthy is a change */
	node->dev[3].g.health = GPU_UNHEALTHY;
	snprintf(node->dev[3].g.health_reason, sizeof(node->dev[3].g.health_reason), "4 uncorrected ECC errors");
	char *fp2 = agent_gns_json(node, NULL, false);
	assert_string_not_equal(fp1, fp2);
	assert_true(agent_pub_gns_due(&s, fp2, "", 5000, 10000));

	struct agent_labels ls;
	agent_node_label_set(node, &ls);
	assert_true(agent_pub_labels_due(&s, &ls, 0, 10000));
	s.labels = ls;
	s.labels_ok = true;
	s.labels_at_ms = 1000;
	assert_false(agent_pub_labels_due(&s, &ls, 5000, 10000));   /* health is not a label */
	assert_true(agent_pub_labels_due(&s, &ls, 11000, 10000));
	struct agent_labels other = ls;
	snprintf(other.l[1].value, sizeof(other.l[1].value), "3");
	assert_true(agent_pub_labels_due(&s, &other, 5000, 10000));

	agent_pub_state_release(&s);
	assert_null(s.gns);
	free(fp1);
	free(fp1b);
	free(fp2);
	free_node(node, keep);
}

/* ---- backoff ---- */

static void test_backoff(void **state)
{
	(void)state;
	struct agent_backoff b = { 0, 0 };
	/* r = 0: the fixed half; doubling up to the cap */
	int64_t want[] = { 500, 1000, 2000, 4000, 8000, 15000, 15000, 15000 };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		assert_int_equal(agent_backoff_fail(&b, 100 + (int64_t)i, 1000, 30000, 0.0), want[i]);
	assert_int_equal(b.failures, 8);
	assert_int_equal(b.since_ms, 100);   /* the streak's start */
	/* r near 1: the whole delay, never more than the cap */
	int64_t d = agent_backoff_fail(&b, 200, 1000, 30000, 0.9999999);
	assert_true(d > 29000 && d <= 30000);
	d = agent_backoff_fail(&b, 200, 1000, 30000, 7.0);   /* out-of-range r is clamped */
	assert_true(d <= 30000);
	assert_int_equal(agent_backoff_ok(&b), 10);
	assert_int_equal(b.failures, 0);
	assert_int_equal(agent_backoff_ok(&b), 0);
	/* a new streak starts small again */
	assert_int_equal(agent_backoff_fail(&b, 999, 1000, 30000, 0.5), 750);
	assert_int_equal(b.since_ms, 999);
	/* many failures do not overflow */
	for (int i = 0; i < 5000; i++)
		d = agent_backoff_fail(&b, 0, 1000, 60000, 0.5);
	assert_int_equal(d, 45000);
}

static void test_node_name(void **state)
{
	(void)state;
	assert_true(agent_node_name_valid("n1"));
	assert_true(agent_node_name_valid("gpu-a100.example.com"));
	assert_false(agent_node_name_valid(""));
	assert_false(agent_node_name_valid(NULL));
	assert_false(agent_node_name_valid("Upper"));
	assert_false(agent_node_name_valid("-lead"));
	assert_false(agent_node_name_valid("trail."));
	assert_false(agent_node_name_valid("has space"));
	assert_false(agent_node_name_valid("a/b"));
	char big[300];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_false(agent_node_name_valid(big));
	big[253] = '\0';
	assert_true(agent_node_name_valid(big));
}

/* ---- agent_publish() against a fake API server ---- */

struct fake_api {
	pthread_mutex_t mu;
	bool node_exists;
	bool crd_missing;
	cJSON *labels;           /* the Node's labels */
	char *gns;               /* the stored object (with metadata.resourceVersion), NULL = none */
	int rv;
	int put_conflicts;       /* answer 409 to this many PUTs (and bump rv: "someone else wrote") */
	int put_status;          /* answer this to every PUT (0: normal) */
	int patches, gets, posts, puts;
	char last_put_rv[32];
};

static struct fake_api fake;

static void reply(struct http_response *resp, int status, const char *body)
{
	resp->status = status;
	buf_adds(&resp->body, body);
}

static void status_reply(struct http_response *resp, int code, const char *reason, const char *name, const char *msg)
{
	char b[512];
	snprintf(b, sizeof(b),
		 "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"message\":\"%s\","
		 "\"reason\":\"%s\",\"details\":{%s%s%s},\"code\":%d}",
		 msg, reason, name ? "\"name\":\"" : "", name ? name : "", name ? "\"" : "", code);
	reply(resp, code, b);
}

/* Stores obj with the next resourceVersion; answers it. */
static void store(struct http_response *resp, cJSON *obj, int status)
{
	char rv[32];
	snprintf(rv, sizeof(rv), "%d", ++fake.rv);
	cJSON *meta = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
	cJSON_DeleteItemFromObjectCaseSensitive(meta, "resourceVersion");
	cJSON_AddStringToObject(meta, "resourceVersion", rv);
	free(fake.gns);
	fake.gns = cJSON_PrintUnformatted(obj);
	reply(resp, status, fake.gns);
}

static void on_node(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)ctx;
	pthread_mutex_lock(&fake.mu);
	fake.patches++;
	if (!fake.node_exists) {
		status_reply(resp, 404, "NotFound", "n1", "nodes \\\"n1\\\" not found");
		goto out;
	}
	cJSON *patch = cJSON_Parse(req->body);
	const cJSON *l;
	cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(patch, "metadata"), "labels")) {
		cJSON_DeleteItemFromObjectCaseSensitive(fake.labels, l->string);
		if (cJSON_IsString(l))
			cJSON_AddStringToObject(fake.labels, l->string, l->valuestring);
	}
	cJSON_Delete(patch);
	char *ls = cJSON_PrintUnformatted(fake.labels);
	char b[4096];
	snprintf(b, sizeof(b), "{\"kind\":\"Node\",\"metadata\":{\"name\":\"n1\",\"uid\":\"node-uid-1\",\"labels\":%s}}", ls);
	free(ls);
	reply(resp, 200, b);
out:
	pthread_mutex_unlock(&fake.mu);
}

static void on_gns_get(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)ctx;
	(void)req;
	pthread_mutex_lock(&fake.mu);
	fake.gets++;
	if (fake.crd_missing)
		status_reply(resp, 404, "NotFound", NULL, "the server could not find the requested resource");
	else if (!fake.gns)
		status_reply(resp, 404, "NotFound", "n1", "gpunodestatuses.gpu.scheduling \\\"n1\\\" not found");
	else
		reply(resp, 200, fake.gns);
	pthread_mutex_unlock(&fake.mu);
}

static void on_gns_post(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)ctx;
	pthread_mutex_lock(&fake.mu);
	fake.posts++;
	cJSON *obj = cJSON_Parse(req->body);
	if (fake.gns)
		status_reply(resp, 409, "AlreadyExists", "n1", "already exists");
	else if (!obj)
		status_reply(resp, 400, "BadRequest", NULL, "not JSON");
	else
		store(resp, obj, 201);
	cJSON_Delete(obj);
	pthread_mutex_unlock(&fake.mu);
}

static void on_gns_put(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)ctx;
	pthread_mutex_lock(&fake.mu);
	fake.puts++;
	cJSON *obj = cJSON_Parse(req->body);
	const cJSON *rv = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"),
							   "resourceVersion");
	char cur[32];
	snprintf(cur, sizeof(cur), "%d", fake.rv);
	snprintf(fake.last_put_rv, sizeof(fake.last_put_rv), "%s", cJSON_IsString(rv) ? rv->valuestring : "");
	if (fake.put_status) {
		status_reply(resp, fake.put_status, "Forbidden", "n1", "gpunodestatuses is forbidden: nope");
	} else if (fake.put_conflicts > 0) {
		fake.put_conflicts--;
		cJSON *stored = cJSON_Parse(fake.gns);   /* someone else wrote it: a new resourceVersion */
		store(resp, stored, 409);
		cJSON_Delete(stored);
		buf_clear(&resp->body);
		status_reply(resp, 409, "Conflict", "n1", "the object has been modified");
	} else if (!cJSON_IsString(rv) || strcmp(rv->valuestring, cur)) {
		status_reply(resp, 409, "Conflict", "n1", "the object has been modified");
	} else {
		store(resp, obj, 200);
	}
	cJSON_Delete(obj);
	pthread_mutex_unlock(&fake.mu);
}

struct fixture {
	struct httpd *h;
	struct kube_client *kube;
	struct agent_publisher pub;
};

static int setup(void **state)
{
	log_setup(LOG_ERROR, false);
	memset(&fake, 0, sizeof(fake));
	pthread_mutex_init(&fake.mu, NULL);
	fake.node_exists = true;
	fake.labels = cJSON_CreateObject();
	cJSON_AddStringToObject(fake.labels, "kubernetes.io/hostname", "n1");
	cJSON_AddStringToObject(fake.labels, "gpu.scheduling/managed", "true");   /* an operator's */
	cJSON_AddStringToObject(fake.labels, "gpu.scheduling/intel.count", "1");  /* left from before */
	static const struct http_route routes[] = {
		{ .method = "PATCH", .path = "/api/v1/nodes/n1", .handler = on_node, .ctx = NULL, .verb = VERB_OTHER },
		{ .method = "GET", .path = AGENT_GNS_API "/n1", .handler = on_gns_get, .ctx = NULL, .verb = VERB_OTHER },
		{ .method = "PUT", .path = AGENT_GNS_API "/n1", .handler = on_gns_put, .ctx = NULL, .verb = VERB_OTHER },
		{ .method = "POST", .path = AGENT_GNS_API, .handler = on_gns_post, .ctx = NULL, .verb = VERB_OTHER },
	};
	struct httpd_config hc = { .host = "127.0.0.1", .port = 0, .url_prefix = "", .max_body = 1 << 20, .threads = 1 };
	char err[256];
	struct fixture *f = calloc(1, sizeof(*f));
	f->h = httpd_start(&hc, routes, sizeof(routes) / sizeof(routes[0]), err, sizeof(err));
	if (!f->h)
		fail_msg("httpd_start: %s", err);
	struct kube_config kc;
	kube_config_init(&kc);
	snprintf(kc.server, sizeof(kc.server), "http://127.0.0.1:%d", httpd_port(f->h));
	f->kube = kube_client_new(&kc, err, sizeof(err));
	kube_config_release(&kc);
	assert_non_null(f->kube);
	agent_publisher_init(&f->pub, f->kube, "n1");
	f->pub.timeout_s = 5;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	agent_publisher_release(&f->pub);
	kube_client_free(f->kube);
	httpd_stop(f->h);
	cJSON_Delete(fake.labels);
	free(fake.gns);
	pthread_mutex_destroy(&fake.mu);
	free(f);
	return 0;
}

static const char *fake_label(const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(fake.labels, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static cJSON *fake_gns(void)
{
	cJSON *j = cJSON_Parse(fake.gns);
	assert_non_null(j);
	return j;
}

static void test_publish_create_then_update(void **state)
{
	struct fixture *f = *state;
	struct agent_vendor_result *keep[2];
	struct agent_node *node = make_node("n1", 4, 0, "NVIDIA H100 80GB HBM3", keep);
	struct agent_pub_result res;
	char err[1024];
	const int64_t resync = 100000;

	/* first round: labels patched, status created with the Node as owner */
	assert_int_equal(agent_publish(&f->pub, node, "2026-01-01T00:00:00Z", 1000, resync, false, &res, err, sizeof(err)), 0);
	assert_true(res.labels_patched && res.gns_written && res.gns_created);
	assert_int_equal(fake.posts, 1);
	assert_string_equal(f->pub.node_uid, "node-uid-1");
	assert_string_equal(fake_label("gpu.scheduling/count"), "4");
	assert_string_equal(fake_label("gpu.scheduling/model"), "NVIDIA-H100-80GB-HBM3");
	assert_null(fake_label("gpu.scheduling/intel.count"));               /* gone vendor removed */
	assert_string_equal(fake_label("gpu.scheduling/managed"), "true");   /* not ours: kept */
	assert_string_equal(fake_label("kubernetes.io/hostname"), "n1");
	cJSON *j = fake_gns();
	assert_non_null(strstr(fake.gns, "node-uid-1"));
	assert_int_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "status"), "total")->valueint, 4);
	cJSON_Delete(j);

	/* nothing changed: no request at all */
	int before = fake.patches + fake.gets + fake.posts + fake.puts;
	assert_int_equal(agent_publish(&f->pub, node, "2026-01-01T00:00:30Z", 31000, resync, false, &res, err, sizeof(err)), 0);
	assert_false(res.labels_patched || res.gns_written);
	assert_int_equal(fake.patches + fake.gets + fake.posts + fake.puts, before);

	/* a device goes unhealthy: one GET + PUT with the stored resourceVersion; labels untouched */
	node->dev[1].g.health = GPU_UNHEALTHY;
	snprintf(node->dev[1].g.health_reason, sizeof(node->dev[1].g.health_reason), "nvidia-smi reports [GPU is lost]");
	int patches = fake.patches;
	assert_int_equal(agent_publish(&f->pub, node, "2026-01-01T00:01:00Z", 61000, resync, false, &res, err, sizeof(err)), 0);
	assert_true(res.gns_written && !res.gns_created && res.gns_changed);
	assert_false(res.labels_patched);
	assert_int_equal(fake.patches, patches);
	assert_int_equal(fake.puts, 1);
	assert_string_equal(fake.last_put_rv, "1");
	j = fake_gns();
	const cJSON *devs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "status"), "devices");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(devs, 1), "health")->valuestring, "Unhealthy");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "status"), "lastUpdated")->valuestring,
			    "2026-01-01T00:01:00Z");
	cJSON_Delete(j);

	/* resync: written again although nothing changed (lastUpdated = liveness) */
	assert_int_equal(agent_publish(&f->pub, node, "2026-01-01T00:03:00Z", 61000 + resync, resync, false, &res, err, sizeof(err)), 0);
	assert_true(res.gns_written && res.labels_patched && !res.gns_changed);
	assert_non_null(strstr(fake.gns, "2026-01-01T00:03:00Z"));

	/* force (SIGHUP) writes everything */
	assert_int_equal(agent_publish(&f->pub, node, "2026-01-01T00:03:01Z", 61001 + resync, resync, true, &res, err, sizeof(err)), 0);
	assert_true(res.gns_written && res.labels_patched);
	free_node(node, keep);
}

static void test_publish_conflicts(void **state)
{
	struct fixture *f = *state;
	struct agent_vendor_result *keep[2];
	struct agent_node *node = make_node("n1", 2, 0, "NVIDIA H100 80GB HBM3", keep);
	struct agent_pub_result res;
	char err[1024];
	assert_int_equal(agent_publish(&f->pub, node, "t0", 0, 0, false, &res, err, sizeof(err)), 0);
	/* two 409s: read again, retry, succeed */
	fake.put_conflicts = 2;
	node->dev[0].g.health = GPU_UNHEALTHY;
	assert_int_equal(agent_publish(&f->pub, node, "t1", 1, 0, false, &res, err, sizeof(err)), 0);
	assert_int_equal(res.conflicts, 2);
	assert_true(res.gns_written);
	assert_string_equal(fake.last_put_rv, "3");   /* created as 1, written by others as 2 and 3 */
	/* it keeps conflicting: a bounded number of tries, then an error */
	fake.put_conflicts = 100;
	node->dev[1].g.health = GPU_UNHEALTHY;
	int puts = fake.puts;
	assert_int_equal(agent_publish(&f->pub, node, "t2", 2, 0, false, &res, err, sizeof(err)), -1);
	assert_int_equal(fake.puts - puts, AGENT_PUT_TRIES);
	assert_non_null(strstr(err, "still conflicting"));
	/* not recorded as written: the next round tries again */
	fake.put_conflicts = 0;
	assert_int_equal(agent_publish(&f->pub, node, "t3", 3, 0, false, &res, err, sizeof(err)), 0);
	assert_true(res.gns_written);
	free_node(node, keep);
}

static void test_publish_vendor_disappears(void **state)
{
	struct fixture *f = *state;
	struct agent_vendor_result *keep[2];
	struct agent_node *node = make_node("n1", 2, 3, "NVIDIA H100 80GB HBM3", keep);
	struct agent_pub_result res;
	char err[1024];
	assert_int_equal(agent_publish(&f->pub, node, "t0", 0, 0, false, &res, err, sizeof(err)), 0);
	assert_string_equal(fake_label("gpu.scheduling/amd.count"), "3");
	assert_string_equal(fake_label("gpu.scheduling/vendor"), "mixed");
	free_node(node, keep);
	node = make_node("n1", 2, 0, "NVIDIA H100 80GB HBM3", keep);
	assert_int_equal(agent_publish(&f->pub, node, "t1", 1, 0, false, &res, err, sizeof(err)), 0);
	assert_true(res.labels_patched && res.gns_written);
	assert_null(fake_label("gpu.scheduling/amd.count"));
	assert_string_equal(fake_label("gpu.scheduling/vendor"), "nvidia");
	assert_string_equal(fake_label("gpu.scheduling/managed"), "true");
	free_node(node, keep);
}

static void test_publish_errors(void **state)
{
	struct fixture *f = *state;
	struct agent_vendor_result *keep[2];
	struct agent_node *node = make_node("n1", 2, 0, "NVIDIA H100 80GB HBM3", keep);
	struct agent_pub_result res;
	char err[1024];

	/* no such Node: no status is created for it */
	fake.node_exists = false;
	assert_int_equal(agent_publish(&f->pub, node, "t0", 0, 0, false, &res, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "node n1 does not exist"));
	assert_int_equal(fake.posts + fake.gets, 0);
	fake.node_exists = true;

	/* no CRD: says how to install it */
	fake.crd_missing = true;
	assert_int_equal(agent_publish(&f->pub, node, "t1", 1, 0, false, &res, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "CRD is not installed"));
	assert_true(res.labels_patched);   /* the labels step still worked */
	fake.crd_missing = false;

	/* RBAC: the message says what is missing */
	assert_int_equal(agent_publish(&f->pub, node, "t2", 2, 0, false, &res, err, sizeof(err)), 0);
	fake.put_status = 403;
	node->dev[0].g.health = GPU_UNHEALTHY;
	assert_int_equal(agent_publish(&f->pub, node, "t3", 3, 0, false, &res, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "HTTP 403"));
	assert_non_null(strstr(err, "RBAC"));
	fake.put_status = 0;
	free_node(node, keep);
}

static void test_publish_no_server(void **state)
{
	(void)state;
	/* a port nobody listens on: an error quickly, no crash */
	struct kube_config kc;
	kube_config_init(&kc);
	snprintf(kc.server, sizeof(kc.server), "http://127.0.0.1:1");
	char err[1024];
	struct kube_client *kube = kube_client_new(&kc, err, sizeof(err));
	kube_config_release(&kc);
	struct agent_publisher p;
	agent_publisher_init(&p, kube, "n1");
	p.timeout_s = 2;
	struct agent_vendor_result *keep[2];
	struct agent_node *node = make_node("n1", 1, 0, "NVIDIA H100 80GB HBM3", keep);
	struct agent_pub_result res;
	assert_int_equal(agent_publish(&p, node, "t0", 0, 0, false, &res, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "patching the labels of node n1"));
	assert_null(strstr(err, "GpuNodeStatus"));   /* one cause, one message */
	assert_false(res.gns_written || res.labels_patched);
	agent_publisher_release(&p);
	kube_client_free(kube);
	free_node(node, keep);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_label_value),
		cmocka_unit_test(test_label_value_any_bytes),
		cmocka_unit_test(test_label_set),
		cmocka_unit_test(test_labels_patch),
		cmocka_unit_test(test_create_body),
		cmocka_unit_test(test_update_body),
		cmocka_unit_test(test_update_keeps_allocation),
		cmocka_unit_test(test_change_detection),
		cmocka_unit_test(test_backoff),
		cmocka_unit_test(test_node_name),
		cmocka_unit_test_setup_teardown(test_publish_create_then_update, setup, teardown),
		cmocka_unit_test_setup_teardown(test_publish_conflicts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_publish_vendor_disappears, setup, teardown),
		cmocka_unit_test_setup_teardown(test_publish_errors, setup, teardown),
		cmocka_unit_test(test_publish_no_server),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
