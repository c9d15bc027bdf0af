/* The extender verbs, called in-process on a cache loaded from an inventory. */
#include "testutil.h"

#include "choices.h"
#include "clock.h"
#include "events.h"
#include "extender.h"
#include "inventory.h"
#include "kube.h"
#include "metrics.h"
#include "nudge.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *inventory_json =
	"{\"kind\":\"List\",\"items\":["
	"{\"kind\":\"Node\",\"metadata\":{\"name\":\"big\",\"labels\":{\"zone\":\"a\"}}},"
	"{\"kind\":\"Node\",\"metadata\":{\"name\":\"small\",\"labels\":{\"zone\":\"b\"}}},"
	"{\"kind\":\"Node\",\"metadata\":{\"name\":\"cpu\"}},"
	"{\"kind\":\"GpuNodeStatus\",\"metadata\":{\"name\":\"big\"},\"spec\":{\"nodeName\":\"big\"},\"status\":{\"devices\":["
	"{\"id\":0,\"vendor\":\"nvidia\",\"model\":\"H100\",\"memoryMiB\":81559,\"island\":\"nv0\",\"bandwidthGBps\":900},"
	"{\"id\":1,\"vendor\":\"nvidia\",\"model\":\"H100\",\"memoryMiB\":81559,\"island\":\"nv0\",\"bandwidthGBps\":900},"
	"{\"id\":2,\"vendor\":\"nvidia\",\"model\":\"H100\",\"memoryMiB\":81559,\"island\":\"nv1\",\"bandwidthGBps\":900},"
	"{\"id\":3,\"vendor\":\"nvidia\",\"model\":\"H100\",\"memoryMiB\":81559,\"island\":\"nv1\",\"bandwidthGBps\":900}]}},"
	"{\"kind\":\"GpuNodeStatus\",\"metadata\":{\"name\":\"small\"},\"status\":{\"devices\":["
	"{\"id\":0,\"vendor\":\"nvidia\",\"model\":\"T4\",\"memoryMiB\":15360}]}},"
	"{\"kind\":\"GpuClaim\",\"metadata\":{\"name\":\"pair\",\"namespace\":\"ml\"},\"spec\":{\"devices\":{\"count\":2},"
	"\"topology\":{\"mode\":\"Required\"}}},"
	"{\"kind\":\"GpuClaim\",\"metadata\":{\"name\":\"broken\",\"namespace\":\"ml\"},\"spec\":{\"devices\":{\"count\":99}}}"
	"]}";

struct fixture {
	struct cache *cache;
	struct extender *x;
	struct api_resources res;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char path[] = "/tmp/test-inventory-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, inventory_json, strlen(inventory_json)), (ssize_t)strlen(inventory_json));
	close(fd);
	f->cache = cache_new();
	char err[256];
	int rc = inventory_load(f->cache, path, err, sizeof(err));
	unlink(path);
	if (rc)
		fail_msg("inventory: %s", err);
	api_resources_default(&f->res);
	struct extender_opts o = {
		.cache = f->cache, .res = &f->res, .default_policy = POLICY_BINPACK,
		.bind = extender_bind_local, .bind_ctx = f->cache,
	};
	f->x = extender_new(&o);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	extender_free(f->x);
	cache_free(f->cache);
	free(f);
	return 0;
}

/* Calls a verb; returns the parsed reply (caller deletes) and the status. */
static cJSON *call(http_handler h, void *ctx, const char *body, int *status)
{
	struct http_request req = { "POST", "/", body, strlen(body), NULL };
	struct http_response resp = { .status = 200 };
	buf_init(&resp.body, 1 << 24);
	h(ctx, &req, &resp);
	*status = resp.status;
	cJSON *j = cJSON_Parse(buf_cstr(&resp.body));
	buf_release(&resp.body);
	assert_non_null(j);
	return j;
}

static char *args(const char *uid, const char *pod_extra, const char *nodes)
{
	static _Thread_local char out[4096];
	snprintf(out, sizeof(out),
		 "{\"Pod\":{\"metadata\":{\"name\":\"%s\",\"namespace\":\"ml\",\"uid\":\"%s\"%s},"
		 "\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{%s}}}]}},"
		 "\"NodeNames\":[\"big\",\"small\",\"cpu\",\"ghost\"]}",
		 uid, uid, pod_extra, nodes);
	return out;
}

static int in_names(const cJSON *names, const char *n)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, names)
		if (!strcmp(it->valuestring, n))
			return 1;
	return 0;
}

static void test_filter_reasons(void **state)
{
	struct fixture *f = *state;
	int st;
	cJSON *r = call(extender_filter, f->x, args("p1", "", "\"gpu.scheduling/gpu\":\"2\""), &st);
	assert_int_equal(st, 200);
	const cJSON *names = cJSON_GetObjectItem(r, "NodeNames");
	assert_int_equal(cJSON_GetArraySize(names), 1);
	assert_true(in_names(names, "big"));
	const cJSON *un = cJSON_GetObjectItem(r, "FailedAndUnresolvableNodes");
	assert_string_equal(cJSON_GetObjectItem(un, "small")->valuestring, "node has 1 matching GPU, claim needs 2");
	assert_non_null(strstr(cJSON_GetObjectItem(un, "cpu")->valuestring, "no GpuNodeStatus"));
	assert_non_null(cJSON_GetObjectItem(un, "ghost"));
	assert_string_equal(cJSON_GetObjectItem(r, "Error")->valuestring, "");
	cJSON_Delete(r);
}

static void test_filter_no_gpu_pod_passes_all(void **state)
{
	struct fixture *f = *state;
	int st;
	cJSON *r = call(extender_filter, f->x, args("p0", "", "\"cpu\":\"1\""), &st);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "NodeNames")), 4);
	cJSON_Delete(r);
}

static void test_filter_nodes_form_echoes_objects(void **state)
{
	struct fixture *f = *state;
	int st;
	const char *body = "{\"Pod\":{\"metadata\":{\"name\":\"p\",\"uid\":\"u\"},\"spec\":{\"containers\":[{\"name\":\"c\","
			   "\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"1\"}}}]}},"
			   "\"Nodes\":{\"metadata\":{},\"items\":[{\"metadata\":{\"name\":\"big\",\"labels\":{\"x\":\"y\"}}},"
			   "{\"metadata\":{\"name\":\"cpu\"}}]},\"NodeNames\":null}";
	cJSON *r = call(extender_filter, f->x, body, &st);
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(r, "NodeNames")));
	const cJSON *items = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "Nodes"), "items");
	assert_int_equal(cJSON_GetArraySize(items), 1);
	const cJSON *labels = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(items, 0), "metadata"), "labels");
	assert_string_equal(cJSON_GetObjectItem(labels, "x")->valuestring, "y");
	cJSON_Delete(r);
}

static void test_filter_invalid_requests(void **state)
{
	struct fixture *f = *state;
	int st;
	const char *bad[] = { "", "{", "[]", "{\"Pod\":3}", "{\"Pod\":{\"spec\":{}},\"NodeNames\":[1]}",
			      "{\"Pod\":{\"spec\":{}}}", "{\"Pod\":{\"spec\":{}},\"Nodes\":{\"items\":[{}]}}",
			      /* broken JSON anywhere: in the names, after them, in a member nobody reads */
			      "{\"Pod\":{\"spec\":{}},\"NodeNames\":[\"a\",]}", "{\"Pod\":{\"spec\":{}},\"NodeNames\":[\"a\"",
			      "{\"Pod\":{\"spec\":{}},\"NodeNames\":[\"a\"]} x", "{\"Pod\":{\"spec\":{}},\"NodeNames\":\"a\"}",
			      "{\"Pod\":{\"spec\":{}},\"NodeNames\":[\"\\udc00\"]}", "{\"Pod\":{\"spec\":{}},\"NodeNames\":[\"a\\q\"]}",
			      "{\"Pod\":{\"spec\":{}},\"Other\":[1,,2],\"NodeNames\":[]}", "{\"Pod\":{\"spec\":{}}, \"NodeNames\":[\"a\nb\"]}" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cJSON *r = call(extender_filter, f->x, bad[i], &st);
		assert_int_equal(st, 400);
		assert_true(strlen(cJSON_GetObjectItem(r, "Error")->valuestring) > 0);
		cJSON_Delete(r);
	}
	/* A missing or invalid claim rejects every node, with the reason. */
	cJSON *r = call(extender_filter, f->x, args("p2", ",\"annotations\":{\"gpu.scheduling/claim\":\"broken\"}", ""), &st);
	assert_int_equal(st, 200);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "NodeNames")), 0);
	const cJSON *un = cJSON_GetObjectItem(r, "FailedAndUnresolvableNodes");
	assert_int_equal(cJSON_GetArraySize(un), 4);
	assert_non_null(strstr(cJSON_GetObjectItem(un, "big")->valuestring, "GpuClaim ml/broken is invalid"));
	cJSON_Delete(r);
}

/* An API server that takes every Event and keeps the bodies of the POSTs. */
struct event_sink {
	pthread_mutex_t mu;
	int posts;
	char body[4][2048];
};

static int take_event(void *ctx, const char *method, const char *path, const char *body, const char *content_type,
		      long timeout_s, struct kube_response *r, char *err, size_t errlen)
{
	(void)path, (void)content_type, (void)timeout_s, (void)err, (void)errlen;
	struct event_sink *k = ctx;
	pthread_mutex_lock(&k->mu);
	if (!strcmp(method, "POST") && k->posts < 4)
		snprintf(k->body[k->posts++], sizeof(k->body[0]), "%s", body);
	pthread_mutex_unlock(&k->mu);
	r->status = strcmp(method, "POST") ? 200 : 201;
	buf_adds(&r->body, "{\"metadata\":{\"name\":\"ev\"}}");
	return 0;
}

/* No node fits: one GPUClaimUnsatisfiable Event on the pod, the reasons counted; again within a minute, none. */
static void test_filter_unsatisfiable_event(void **state)
{
	struct fixture *f = *state;
	struct event_sink k = { .posts = 0 };
	pthread_mutex_init(&k.mu, NULL);
	struct kube_client *c = kube_client_new_transport(take_event, &k);
	struct events_opts eo = { .component = "gpu-extender", .instance = "t" };
	struct events *ev = events_new(c, &eo);
	struct extender_opts o = { .cache = f->cache, .res = &f->res, .default_policy = POLICY_BINPACK,
				   .bind = extender_bind_local, .bind_ctx = f->cache, .events = ev };
	struct extender *x = extender_new(&o);
	int st;
	for (int i = 0; i < 3; i++) {      /* one at a time: repeats still queued would be folded into one */
		cJSON_Delete(call(extender_filter, x, args("p8", "", "\"gpu.scheduling/gpu\":\"8\""), &st));
		assert_true(events_idle(ev, 5000));
	}
	cJSON_Delete(call(extender_filter, x, args("p2", "", "\"gpu.scheduling/gpu\":\"2\""), &st));   /* fits */
	assert_true(events_idle(ev, 5000));
	assert_int_equal(k.posts, 1);
	assert_non_null(strstr(k.body[0], "\"reason\":\"GPUClaimUnsatisfiable\""));
	assert_non_null(strstr(k.body[0], "\"type\":\"Warning\""));
	assert_non_null(strstr(k.body[0], "\"name\":\"p8\""));
	assert_non_null(strstr(k.body[0], "\"uid\":\"p8\""));
	assert_non_null(strstr(k.body[0], "no node of 4 fits: "));
	assert_non_null(strstr(k.body[0], "1: node has 4 matching GPUs, claim needs 8"));
	assert_non_null(strstr(k.body[0], "1: node has 1 matching GPU, claim needs 8"));
	uint64_t n[EVENTS_NRESULT];
	events_counts(ev, n);
	assert_int_equal(n[EVENTS_LIMITED], 2);
	extender_free(x);
	events_free(ev);
	kube_client_free(c);
	pthread_mutex_destroy(&k.mu);
}

/*
 * Filter tells the nudger who waits: a GPU pod no node fits is remembered,
 * once however often it is rejected; when it fits it is forgotten; a pod
 * without GPUs, or whose claim is invalid, is never remembered.
 */
/* A gang whose free places are all on nodes the request did not name. */
static void places_elsewhere(void *ctx, const struct api_pod_ref *pod, const struct claim *c,
			     const struct gpu_node *const *nodes, int n, struct gang_route *out)
{
	(void)ctx, (void)pod, (void)c, (void)nodes, (void)n;
	memset(out, 0, sizeof(*out));
	out->steered = out->retry = true;
	snprintf(out->reason, sizeof(out->reason), "the places of gang ml/g are on other nodes");
}

static void test_filter_tells_nudger(void **state)
{
	struct fixture *f = *state;
	struct event_sink k = { .posts = 0 };
	pthread_mutex_init(&k.mu, NULL);
	struct kube_client *c = kube_client_new_transport(take_event, &k);
	struct nudge_opts no = { .cache = f->cache, .kube = c, .retry_delay_ms = 1 };
	struct nudge *nd = nudge_new(&no);
	assert_non_null(nd);
	struct extender_opts o = { .cache = f->cache, .res = &f->res, .default_policy = POLICY_BINPACK,
				   .bind = extender_bind_local, .bind_ctx = f->cache, .nudge = nd };
	struct extender *x = extender_new(&o);
	int st;
	cJSON_Delete(call(extender_filter, x, args("w8", "", "\"gpu.scheduling/gpu\":\"8\""), &st));
	cJSON_Delete(call(extender_filter, x, args("w8", "", "\"gpu.scheduling/gpu\":\"8\""), &st));
	assert_int_equal(nudge_waiting_count(nd), 1);
	cJSON_Delete(call(extender_filter, x, args("cpu-pod", "", "\"cpu\":\"1\""), &st));
	cJSON_Delete(call(extender_filter, x, args("bad", ",\"annotations\":{\"gpu.scheduling/claim\":\"missing\"}", ""), &st));
	assert_int_equal(nudge_waiting_count(nd), 1);
	cJSON_Delete(call(extender_filter, x, args("w8", "", "\"gpu.scheduling/gpu\":\"2\""), &st));   /* now it fits */
	assert_int_equal(nudge_waiting_count(nd), 0);
	extender_free(x);
	/* A gang member that another try may place (its places on nodes not named): nudged when not tried again. */
	o.gang = places_elsewhere;
	x = extender_new(&o);
	const char *member = ",\"labels\":{\"" LABEL_POD_GROUP "\":\"g\"}";
	cJSON_Delete(call(extender_filter, x, args("m4", member, "\"gpu.scheduling/gpu\":\"1\""), &st));
	assert_int_equal(nudge_waiting_count(nd), 1);
	assert_true(nudge_idle(nd, 5000));
	uint64_t counts[NUDGE_NRESULT];
	nudge_counts(nd, counts);
	assert_int_equal(counts[NUDGE_SENT] + counts[NUDGE_FAILED], 1);
	extender_free(x);
	nudge_free(nd);
	kube_client_free(c);
	pthread_mutex_destroy(&k.mu);
}

/* NodeNames as Go's encoding/json reads them: escapes decoded, member names in any case, first one wins. */
static void test_node_names_decoding(void **state)
{
	struct fixture *f = *state;
	int st;
	const char *pod = "{\"pod\":{\"metadata\":{\"uid\":\"d\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":"
			  "{\"limits\":{\"gpu.scheduling/gpu\":\"1\"}}}]}},";
	char body[512];
	snprintf(body, sizeof(body), "%s\"NODENAMES\":[\"b\\u0069g\", \"sm\\u0061ll\" ,\"cpu\"],\"NodeNames\":[\"small\"],"
		 "\"Unknown\":{\"deep\":[[[{\"x\":null}]]]}}", pod);
	cJSON *r = call(extender_filter, f->x, body, &st);
	assert_int_equal(st, 200);
	const cJSON *names = cJSON_GetObjectItem(r, "NodeNames");
	assert_int_equal(cJSON_GetArraySize(names), 2);
	assert_string_equal(cJSON_GetArrayItem(names, 0)->valuestring, "big");
	assert_string_equal(cJSON_GetArrayItem(names, 1)->valuestring, "small");
	assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "FailedAndUnresolvableNodes"), "cpu"));
	cJSON_Delete(r);
	/* Names that need escaping on the way back get it; "Nodes": null is no list. (A pod
	 * without GPUs, so that the unknown nodes score, as nodes without GPUs, and come back.) */
	snprintf(body, sizeof(body), "{\"pod\":{\"metadata\":{\"uid\":\"e\"},\"spec\":{\"containers\":[{\"name\":\"c\"}]}},"
		 "\"Nodes\":null,\"NodeNames\":[\"a\\\"b\", \"tab\\there\"]}");
	r = call(extender_prioritize, f->x, body, &st);
	assert_int_equal(st, 200);
	assert_int_equal(cJSON_GetArraySize(r), 2);
	assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(r, 0), "Host")->valuestring, "a\"b");
	assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(r, 1), "Host")->valuestring, "tab\there");
	cJSON_Delete(r);
}

static void test_claim_topology_required(void **state)
{
	struct fixture *f = *state;
	int st;
	/* Two pods of one GPU each, on different islands: pair can't fit anymore. */
	char body[4096];
	for (int i = 0; i < 2; i++) {
		char uid[8];
		snprintf(uid, sizeof(uid), "s%d", i);
		cJSON *r = call(extender_filter, f->x, args(uid, "", "\"gpu.scheduling/gpu\":\"1\""), &st);
		cJSON_Delete(r);
		snprintf(body, sizeof(body),
			 "{\"PodName\":\"%s\",\"PodNamespace\":\"ml\",\"PodUID\":\"%s\",\"Node\":\"big\"}", uid, uid);
		r = call(extender_bind, f->x, body, &st);
		assert_string_equal(cJSON_GetObjectItem(r, "Error")->valuestring, "");
		cJSON_Delete(r);
	}
	cJSON *r = call(extender_filter, f->x, args("p3", ",\"annotations\":{\"gpu.scheduling/claim\":\"pair\"}", ""), &st);
	const cJSON *failed = cJSON_GetObjectItem(r, "FailedNodes");
	/* binpack put the second single GPU on the island the first one opened. */
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "NodeNames")), 1);
	assert_null(cJSON_GetObjectItem(failed, "big"));
	cJSON_Delete(r);
}

static void test_prioritize_policies(void **state)
{
	struct fixture *f = *state;
	int st;
	/* Occupy one GPU of big; a 1-GPU pod then prefers big under binpack? small is fuller after. */
	cJSON *r = call(extender_prioritize, f->x, args("q1", "", "\"gpu.scheduling/gpu\":\"1\""), &st);
	assert_int_equal(st, 200);
	/* Nodes that score 0 are left out (the scheduler counts them 0). */
	int big = 0, small = 0, cpu = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, r) {
		assert_true(cJSON_GetObjectItem(it, "Score")->valuedouble > 0);
		const char *h = cJSON_GetObjectItem(it, "Host")->valuestring;
		int s = (int)cJSON_GetObjectItem(it, "Score")->valuedouble;
		if (!strcmp(h, "big")) big = s;
		if (!strcmp(h, "small")) small = s;
		if (!strcmp(h, "cpu")) cpu = s;
	}
	assert_int_equal(small, 10);     /* binpack: the 1-GPU node becomes full */
	assert_true(big < small);
	assert_int_equal(cpu, 0);
	cJSON_Delete(r);
	r = call(extender_prioritize, f->x, args("q2", ",\"annotations\":{\"gpu.scheduling/policy\":\"spread\"}",
						  "\"gpu.scheduling/gpu\":\"1\""), &st);
	big = small = 0;
	cJSON_ArrayForEach(it, r) {
		const char *h = cJSON_GetObjectItem(it, "Host")->valuestring;
		int s = (int)cJSON_GetObjectItem(it, "Score")->valuedouble;
		if (!strcmp(h, "big")) big = s;
		if (!strcmp(h, "small")) small = s;
	}
	assert_int_equal(big, 10);       /* spread: the emptier node */
	assert_int_equal(small, 0);
	cJSON_Delete(r);
	/* A pod without GPUs prefers the node without GPUs. */
	r = call(extender_prioritize, f->x, args("q3", "", ""), &st);
	assert_int_equal(cJSON_GetArraySize(r), 2);
	cJSON_ArrayForEach(it, r) {
		const char *h = cJSON_GetObjectItem(it, "Host")->valuestring;
		int s = (int)cJSON_GetObjectItem(it, "Score")->valuedouble;
		assert_true(!strcmp(h, "cpu") || !strcmp(h, "ghost"));
		assert_int_equal(s, 10);
	}
	cJSON_Delete(r);
}

static void test_bind_flow(void **state)
{
	struct fixture *f = *state;
	int st;
	cJSON *r = call(extender_filter, f->x, args("b1", "", "\"gpu.scheduling/gpu\":\"1\""), &st);
	cJSON_Delete(r);
	const char *bind = "{\"PodName\":\"b1\",\"PodNamespace\":\"ml\",\"PodUID\":\"b1\",\"Node\":\"small\"}";
	r = call(extender_bind, f->x, bind, &st);
	assert_string_equal(cJSON_GetObjectItem(r, "Error")->valuestring, "");
	cJSON_Delete(r);
	/* Binding again is a no-op success. */
	r = call(extender_bind, f->x, bind, &st);
	assert_string_equal(cJSON_GetObjectItem(r, "Error")->valuestring, "");
	cJSON_Delete(r);
	/* Now small is full for the next pod. */
	r = call(extender_filter, f->x, args("b2", "", "\"gpu.scheduling/gpu\":\"1\""), &st);
	assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "FailedNodes"), "small")->valuestring,
			    "gpu 0: 0 free, claim needs 1");
	cJSON_Delete(r);
	r = call(extender_bind, f->x, "{\"PodName\":\"b2\",\"PodNamespace\":\"ml\",\"PodUID\":\"b2\",\"Node\":\"small\"}", &st);
	assert_non_null(strstr(cJSON_GetObjectItem(r, "Error")->valuestring, "no longer fits"));
	cJSON_Delete(r);
	r = call(extender_bind, f->x, "{\"PodName\":\"zz\",\"PodNamespace\":\"ml\",\"PodUID\":\"zz\",\"Node\":\"big\"}", &st);
	assert_non_null(strstr(cJSON_GetObjectItem(r, "Error")->valuestring, "was not seen in filter"));
	cJSON_Delete(r);
	r = call(extender_bind, f->x, "{\"PodName\":\"zz\"}", &st);
	assert_int_equal(st, 400);
	cJSON_Delete(r);
}

/* The one node a filter passed, or "" when it passed none or several. */
static const char *only_node(const cJSON *reply)
{
	const cJSON *names = cJSON_GetObjectItem(reply, "NodeNames");
	return cJSON_GetArraySize(names) == 1 ? cJSON_GetArrayItem(names, 0)->valuestring : "";
}

/* Cluster mode's bind in short: the pod's record of device 0 on its node (the ledger's, watched back). */
static int record_bind(void *ctx, const struct bind_request *req, char *err, size_t errlen)
{
	(void)err, (void)errlen;
	struct alloc a = { .mode = CLAIM_EXCLUSIVE, .ndev = 1 };
	snprintf(a.uid, sizeof(a.uid), "%s", req->uid);
	cache_lock(ctx);
	int rc = cache_add_alloc(ctx, req->node, &a);
	cache_unlock(ctx);
	return rc ? BIND_ERROR : BIND_OK;
}

/*
 * filterKeepsBest 1 in cluster mode: the node a filter chose counts for the
 * next pods' filters until the pod's bind arrives, not against the pod
 * itself, and once only when the bind takes over.
 */
static void test_filter_choice_counts_until_bind(void **state)
{
	struct fixture *f = *state;
	struct extender_opts o = {
		.cache = f->cache, .res = &f->res, .default_policy = POLICY_BINPACK,
		.bind = record_bind, .bind_ctx = f->cache, .assume_binds = true, .filter_keeps_best = 1,
	};
	struct extender *x = extender_new(&o);
	int st;
	cJSON *r;
	/* A 2-GPU pod on big: its bind takes over its filter's two devices and adds
	 * none, and what the bind's answer forgets is all there was. */
	r = call(extender_filter, x, args("d1", "", "\"gpu.scheduling/gpu\":\"2\""), &st);
	assert_string_equal(only_node(r), "big");
	cJSON_Delete(r);
	const char *bind_d1 = "{\"PodName\":\"d1\",\"PodNamespace\":\"ml\",\"PodUID\":\"d1\",\"Node\":\"big\"}";
	struct http_request req_d1 = { "POST", "/", bind_d1, strlen(bind_d1), NULL };
	extender_bind_arrive(x, &req_d1);
	struct snapshot *s = cache_acquire(f->cache);
	const struct gpu_node *big = snapshot_find(s, "big")->node;
	int taken = 0;
	for (int d = 0; d < big->ndev; d++)
		taken += big->dev[d].exclusive;
	assert_int_equal(taken, 2);
	snapshot_release(s);
	cache_lock(f->cache);
	cache_forget(f->cache, "d1", "big");
	cache_unlock(f->cache);
	s = cache_acquire(f->cache);
	big = snapshot_find(s, "big")->node;
	for (int d = 0; d < big->ndev; d++)
		assert_int_equal(big->dev[d].exclusive, 0);
	snapshot_release(s);
	const char *one = "\"gpu.scheduling/gpu\":\"1\"";
	r = call(extender_filter, x, args("c1", "", one), &st);
	assert_string_equal(only_node(r), "small");      /* binpack: the 1-GPU node ends full */
	cJSON_Delete(r);
	r = call(extender_filter, x, args("c2", "", one), &st);
	assert_string_equal(only_node(r), "big");        /* small is c1's until its bind */
	assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "FailedNodes"), "small"));
	cJSON_Delete(r);
	r = call(extender_filter, x, args("c1", "", one), &st);
	assert_string_equal(only_node(r), "small");      /* filtered again: its own choice is not in the way */
	cJSON_Delete(r);

	const char *bind = "{\"PodName\":\"c1\",\"PodNamespace\":\"ml\",\"PodUID\":\"c1\",\"Node\":\"small\"}";
	struct http_request req = { "POST", "/", bind, strlen(bind), NULL };
	extender_bind_arrive(x, &req);
	s = cache_acquire(f->cache);
	assert_int_equal(snapshot_find(s, "small")->node->dev[0].exclusive, 1);   /* the bind's, not the filter's too */
	snapshot_release(s);
	r = call(extender_bind, x, bind, &st);
	assert_string_equal(cJSON_GetObjectItem(r, "Error")->valuestring, "");
	cJSON_Delete(r);
	s = cache_acquire(f->cache);
	const struct cache_node *small = snapshot_find(s, "small");
	assert_int_equal(small->nallocs, 1);
	assert_int_equal(small->node->dev[0].exclusive, 1);
	snapshot_release(s);
	r = call(extender_filter, x, args("c3", "", one), &st);
	assert_string_equal(only_node(r), "big");
	cJSON_Delete(r);
	/* c1 gone: nothing of it is left assumed, so small is free again. */
	cache_lock(f->cache);
	assert_true(cache_remove_alloc(f->cache, "c1", "small"));
	cache_unlock(f->cache);
	r = call(extender_filter, x, args("c4", "", one), &st);
	assert_string_equal(only_node(r), "small");
	cJSON_Delete(r);
	extender_free(x);
}

/* A binder that records the pod on one chosen device: a ledger that chose another device than the filter. */
struct record_at {
	struct cache *cache;
	int id;
};

static int record_at_bind(void *ctx, const struct bind_request *req, char *err, size_t errlen)
{
	(void)err, (void)errlen;
	struct record_at *at = ctx;
	struct alloc a = { .mode = CLAIM_EXCLUSIVE };
	snprintf(a.uid, sizeof(a.uid), "%s", req->uid);
	alloc_add_id(&a, at->id);
	cache_lock(at->cache);
	int rc = cache_add_alloc(at->cache, req->node, &a);
	cache_unlock(at->cache);
	return rc ? BIND_ERROR : BIND_OK;
}

/* The first device id of the pod's allocation on node in the current snapshot, or -1. */
static int device_of(struct cache *c, const char *node, const char *uid)
{
	struct snapshot *s = cache_acquire(c);
	const struct cache_node *cn = snapshot_find(s, node);
	int id = -1;
	const struct alloc_rec *r = cn->allocs;
	for (int i = 0; i < cn->nallocs; i++, r = alloc_rec_next(r))
		if (!strcmp(alloc_rec_uid(r), uid)) {
			struct alloc a;
			alloc_rec_unpack(r, &a);
			id = alloc_id(&a, 0);
		}
	snapshot_release(s);
	return id;
}

/*
 * The ledger gives a pod another device than its filter counted (it does not
 * know the other binds in flight), here the device a second pod's filter
 * counted: the node's view still counts each pod once. A device held twice
 * would leave one looking free, and the next filter send a pod too many.
 */
static void test_assumed_devices_never_overlap_records(void **state)
{
	struct fixture *f = *state;
	struct record_at at = { .cache = f->cache };
	struct extender_opts o = {
		.cache = f->cache, .res = &f->res, .default_policy = POLICY_BINPACK,
		.bind = record_at_bind, .bind_ctx = &at, .assume_binds = true, .filter_keeps_best = 1,
	};
	struct extender *x = extender_new(&o);
	int st;
	const char *one = "\"gpu.scheduling/gpu\":\"1\"";
	const char *expect[] = { "small", "big", "big" };
	const char *uids[] = { "s1", "q1", "q2" };
	for (int i = 0; i < 3; i++) {
		cJSON *r = call(extender_filter, x, args(uids[i], "", one), &st);
		assert_string_equal(only_node(r), expect[i]);
		cJSON_Delete(r);
	}
	at.id = device_of(f->cache, "big", "q1");
	assert_true(at.id >= 0);
	const char *bind = "{\"PodName\":\"q2\",\"PodNamespace\":\"ml\",\"PodUID\":\"q2\",\"Node\":\"big\"}";
	struct http_request req = { "POST", "/", bind, strlen(bind), NULL };
	extender_bind_arrive(x, &req);
	cJSON *r = call(extender_bind, x, bind, &st);
	assert_string_equal(cJSON_GetObjectItem(r, "Error")->valuestring, "");
	cJSON_Delete(r);
	assert_int_equal(device_of(f->cache, "big", "q2"), at.id);   /* the record, on q1's counted device */
	struct snapshot *s = cache_acquire(f->cache);
	const struct gpu_node *big = snapshot_find(s, "big")->node;
	int held = 0;
	for (int d = 0; d < big->ndev; d++)
		held += big->dev[d].exclusive > 0;
	assert_int_equal(held, 2);
	snapshot_release(s);
	/* Two of big's four GPUs are free: a 3-GPU pod fits nowhere. */
	r = call(extender_filter, x, args("r3", "", "\"gpu.scheduling/gpu\":\"3\""), &st);
	assert_string_equal(only_node(r), "");
	cJSON_Delete(r);
	extender_free(x);
}

/* A counter's value on the metrics page (the series as it is printed), or -1. */
static long counter(const char *series)
{
	struct buf b;
	buf_init(&b, 1 << 24);
	metrics_render(&b, &(struct metrics_gauges){ 0 });
	const char *line = strstr(buf_cstr(&b), series);
	long n = line ? strtol(line + strlen(series) + 1, NULL, 10) : -1;
	buf_release(&b);
	return n;
}

static long filter_waits(void)
{
	return counter("gpu_extender_filter_waits_total{reason=\"binds_queued\"}");
}

static void count_gained(void *ctx, const char *node)
{
	(void)node;
	(*(int *)ctx)++;
}

/*
 * A bind's arrival keeps its filter's devices counted: at no moment does
 * the node look a pod emptier (a filter running then would send it another
 * pod, which its bind refuses), and no GPU is told freed.
 */
static void test_bind_arrival_keeps_the_filters_devices(void **state)
{
	struct fixture *f = *state;
	struct extender_opts o = {
		.cache = f->cache, .res = &f->res, .default_policy = POLICY_BINPACK,
		.bind = record_bind, .bind_ctx = f->cache, .assume_binds = true, .filter_keeps_best = 1,
	};
	struct extender *x = extender_new(&o);
	int st, gained = 0;
	cJSON *r = call(extender_filter, x, args("c1", "", "\"gpu.scheduling/gpu\":\"1\""), &st);
	assert_string_equal(only_node(r), "small");
	cJSON_Delete(r);
	cache_on_gained(f->cache, count_gained, &gained);
	const char *bound = "gpu_extender_filter_choices_total{result=\"bound\"}";
	long bound_before = counter(bound);
	const char *bind = "{\"PodName\":\"c1\",\"PodNamespace\":\"ml\",\"PodUID\":\"c1\",\"Node\":\"small\"}";
	struct http_request req = { "POST", "/", bind, strlen(bind), NULL };
	extender_bind_arrive(x, &req);
	assert_int_equal(gained, 0);
	assert_int_equal(counter(bound), bound_before + 1);
	struct snapshot *s = cache_acquire(f->cache);
	assert_int_equal(snapshot_find(s, "small")->node->dev[0].exclusive, 1);
	snapshot_release(s);
	r = call(extender_bind, x, bind, &st);
	assert_string_equal(cJSON_GetObjectItem(r, "Error")->valuestring, "");
	cJSON_Delete(r);
	s = cache_acquire(f->cache);
	assert_int_equal(snapshot_find(s, "small")->nallocs, 1);   /* the bind's record, nothing assumed besides */
	assert_int_equal(snapshot_find(s, "small")->node->dev[0].exclusive, 1);
	snapshot_release(s);
	cache_on_gained(f->cache, NULL, NULL);
	extender_free(x);
}

/* Milliseconds a filter of the pod took. */
static int64_t timed_filter(struct extender *x, const char *uid, const char *limits)
{
	int st;
	int64_t t0 = clock_mono_ms();
	cJSON_Delete(call(extender_filter, x, args(uid, "", limits), &st));
	assert_int_equal(st, 200);
	return clock_mono_ms() - t0;
}

/*
 * bindQueueLimitMs: a GPU pod's filter waits while a bind has been in
 * flight longer than the limit, the limit at most, and not once it is
 * answered; a pod that asks for no GPU never waits.
 */
static void test_filter_waits_for_queued_binds(void **state)
{
	struct fixture *f = *state;
	struct extender_opts o = {
		.cache = f->cache, .res = &f->res, .default_policy = POLICY_BINPACK, .bind = record_bind,
		.bind_ctx = f->cache, .assume_binds = true, .filter_keeps_best = 1, .bind_queue_limit_ms = 80,
	};
	struct extender *x = extender_new(&o);
	const char *one = "\"gpu.scheduling/gpu\":\"1\"";
	long waits = filter_waits();
	assert_true(timed_filter(x, "w1", one) < 80);
	const char *bind = "{\"PodName\":\"w1\",\"PodNamespace\":\"ml\",\"PodUID\":\"w1\",\"Node\":\"small\"}";
	struct http_request req = { "POST", "/", bind, strlen(bind), NULL };
	extender_bind_arrive(x, &req);
	assert_true(timed_filter(x, "w2", one) < 80);          /* the bind is young */
	usleep(150 * 1000);
	assert_true(timed_filter(x, "w3", "") < 80);           /* no GPU asked: never held back */
	assert_int_equal(filter_waits(), waits);
	int64_t held = timed_filter(x, "w4", one);
	assert_true(held >= 75 && held < 1000);                 /* held back, the limit at most */
	assert_int_equal(filter_waits(), waits + 1);
	int st;
	cJSON_Delete(call(extender_bind, x, bind, &st));
	assert_true(timed_filter(x, "w5", one) < 80);          /* answered: nothing queues */
	assert_int_equal(filter_waits(), waits + 1);
	extender_free(x);
}

static void test_choices_expire_and_stay_bounded(void **state)
{
	(void)state;
	struct choices s;
	assert_int_equal(choices_init(&s, 2), 0);
	assert_true(choices_put(&s, "a", "n1", 100));
	assert_false(choices_put(&s, "a", "n2", 100));   /* one choice a pod */
	assert_true(choices_put(&s, "b", "n2", 200));
	assert_false(choices_put(&s, "c", "n3", 300));   /* full */
	struct choice out[4];
	assert_int_equal(choices_take_expired(&s, 99, out, 4), 0);
	assert_int_equal(choices_take_expired(&s, 100, out, 4), 1);
	assert_string_equal(out[0].uid, "a");
	assert_string_equal(out[0].node, "n1");
	assert_false(choices_take(&s, "a", out));
	assert_true(choices_take(&s, "b", out));
	assert_string_equal(out[0].node, "n2");
	assert_int_equal(s.n, 0);
	choices_release(&s);
}

/* Many threads bind pods that want 2 GPUs each to a node with 4. */
struct bind_race {
	struct fixture *f;
	const char *limits;
	_Atomic int won;
	int id0;
};

static void *binder(void *arg)
{
	struct bind_race *b = arg;
	static _Atomic int next;
	int id = atomic_fetch_add(&next, 1) + b->id0;
	char uid[32], body[256];
	snprintf(uid, sizeof(uid), "race-%d", id);
	int st;
	cJSON *r = call(extender_filter, b->f->x, args(uid, "", b->limits), &st);
	cJSON_Delete(r);
	snprintf(body, sizeof(body), "{\"PodName\":\"%s\",\"PodNamespace\":\"ml\",\"PodUID\":\"%s\",\"Node\":\"big\"}",
		 uid, uid);
	r = call(extender_bind, b->f->x, body, &st);
	if (!strcmp(cJSON_GetObjectItem(r, "Error")->valuestring, ""))
		atomic_fetch_add(&b->won, 1);
	cJSON_Delete(r);
	return NULL;
}

static int race(struct fixture *f, const char *limits, int threads, int id0)
{
	struct bind_race b = { f, limits, 0, id0 };
	pthread_t t[64];
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, binder, &b);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	return atomic_load(&b.won);
}

static void check_big_consistent(struct fixture *f)
{
	struct snapshot *s = cache_acquire(f->cache);
	const struct cache_node *cn = snapshot_find(s, "big");
	for (int d = 0; d < cn->node->ndev; d++) {
		const struct gpu_device *g = &cn->node->dev[d];
		assert_true(g->exclusive <= 1);
		assert_false(g->exclusive && g->shared);
		assert_true(g->used_core <= GPU_CORE_FULL);
		assert_true(g->used_mib <= g->memory_mib);
	}
	snapshot_release(s);
}

static void test_concurrent_binds_exactly_fill(void **state)
{
	struct fixture *f = *state;
	assert_int_equal(race(f, "\"gpu.scheduling/gpu\":\"2\"", 16, 0), 2);
	check_big_consistent(f);
}

static void test_concurrent_shared_binds_never_exceed(void **state)
{
	struct fixture *f = *state;
	/* 4 GPUs x 1000 milli, 300 milli each: 3 fit per GPU, 12 in all. */
	assert_int_equal(race(f, "\"gpu.scheduling/gpu-core\":\"30\",\"gpu.scheduling/gpu-memory\":\"1000\"", 40, 100), 12);
	check_big_consistent(f);
}

static void test_preempt(void **state)
{
	struct fixture *f = *state;
	int st;
	cJSON *r = call(extender_filter, f->x, args("v1", "", "\"gpu.scheduling/gpu\":\"1\""), &st);
	cJSON_Delete(r);
	r = call(extender_bind, f->x, "{\"PodName\":\"v1\",\"PodNamespace\":\"ml\",\"PodUID\":\"v1\",\"Node\":\"small\"}", &st);
	assert_string_equal(cJSON_GetObjectItem(r, "Error")->valuestring, "");
	cJSON_Delete(r);
	const char *body =
		"{\"Pod\":{\"metadata\":{\"name\":\"hi\",\"uid\":\"hi\"},\"spec\":{\"containers\":[{\"name\":\"c\","
		"\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"1\"}}}]}},"
		"\"NodeNameToMetaVictims\":{\"small\":{\"Pods\":[{\"UID\":\"v1\"}],\"NumPDBViolations\":1},"
		"\"big\":{\"Pods\":[{\"UID\":\"unrelated\"}],\"NumPDBViolations\":0},"
		"\"cpu\":{\"Pods\":[{\"UID\":\"x\"}],\"NumPDBViolations\":0}}}";
	r = call(extender_preempt, f->x, body, &st);
	const cJSON *m = cJSON_GetObjectItem(r, "NodeNameToMetaVictims");
	/* small: evicting v1 frees its GPU; big fits without evicting; cpu never fits. */
	assert_non_null(cJSON_GetObjectItem(m, "small"));
	assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "small"), "NumPDBViolations")->valuedouble, 1);
	assert_non_null(cJSON_GetObjectItem(m, "big"));
	assert_null(cJSON_GetObjectItem(m, "cpu"));
	cJSON_Delete(r);
}

static void test_inventory_errors_change_nothing(void **state)
{
	struct fixture *f = *state;
	char path[] = "/tmp/test-bad-inventory-XXXXXX";
	int fd = mkstemp(path);
	const char *bad = "{\"kind\":\"List\",\"items\":[{\"kind\":\"GpuNodeStatus\",\"metadata\":{\"name\":\"x\"},"
			  "\"status\":{\"devices\":[{\"id\":\"zero\"}]}}]}";
	assert_int_equal(write(fd, bad, strlen(bad)), (ssize_t)strlen(bad));
	close(fd);
	char err[256];
	assert_int_equal(inventory_load(f->cache, path, err, sizeof(err)), -1);
	unlink(path);
	assert_non_null(strstr(err, "items[0] (GpuNodeStatus x): status.devices[0].id must be a non-negative integer"));
	struct snapshot *s = cache_acquire(f->cache);
	assert_int_equal(s->n, 3);
	snapshot_release(s);
	assert_int_equal(inventory_load(f->cache, "config/demo-inventory.json", err, sizeof(err)), 0);
}

static bool never_ready(void *ctx, char *why, size_t size)
{
	(void)ctx;
	snprintf(why, size, "watches not listed yet");
	return false;
}

/* Until the cache is filled, every verb refuses (kube-scheduler retries). */
static void test_not_ready_refuses(void **state)
{
	struct fixture *f = *state;
	struct extender_opts o = {
		.cache = f->cache, .res = &f->res, .default_policy = POLICY_BINPACK,
		.bind = extender_bind_local, .bind_ctx = f->cache, .ready = never_ready,
	};
	struct extender *x = extender_new(&o);
	int st;
	cJSON *r = call(extender_filter, x, args("nr", "", "\"gpu.scheduling/gpu\":\"1\""), &st);
	assert_int_equal(st, 200);
	assert_string_equal(cJSON_GetObjectItem(r, "Error")->valuestring, "extender not ready: watches not listed yet");
	cJSON_Delete(r);
	r = call(extender_prioritize, x, args("nr", "", ""), &st);
	assert_int_equal(st, 503);
	cJSON_Delete(r);
	r = call(extender_bind, x, "{\"PodName\":\"nr\",\"PodNamespace\":\"ml\",\"PodUID\":\"nr\",\"Node\":\"big\"}", &st);
	assert_int_equal(st, 200);
	assert_non_null(strstr(cJSON_GetObjectItem(r, "Error")->valuestring, "not ready"));
	cJSON_Delete(r);
	extender_free(x);
}

/* A pod's own leftover reservation (a bind that broke off) does not count against it. */
static void test_own_reservation_not_counted(void **state)
{
	struct fixture *f = *state;
	int st;
	cJSON *r = call(extender_filter, f->x, args("own", "", "\"gpu.scheduling/gpu\":\"1\""), &st);
	cJSON_Delete(r);
	r = call(extender_bind, f->x, "{\"PodName\":\"own\",\"PodNamespace\":\"ml\",\"PodUID\":\"own\",\"Node\":\"small\"}", &st);
	assert_string_equal(cJSON_GetObjectItem(r, "Error")->valuestring, "");
	cJSON_Delete(r);
	/* small (1 GPU) is full for anyone else ... */
	r = call(extender_filter, f->x, args("other", "", "\"gpu.scheduling/gpu\":\"1\""), &st);
	assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "FailedNodes"), "small"));
	cJSON_Delete(r);
	/* ... but not for the pod that holds it: filter and prioritize both let it back. */
	r = call(extender_filter, f->x, args("own", "", "\"gpu.scheduling/gpu\":\"1\""), &st);
	const cJSON *names = cJSON_GetObjectItem(r, "NodeNames");
	bool small = false;
	const cJSON *it;
	cJSON_ArrayForEach(it, names)
		small |= !strcmp(it->valuestring, "small");
	assert_true(small);
	cJSON_Delete(r);
	r = call(extender_prioritize, f->x, args("own", "", "\"gpu.scheduling/gpu\":\"1\""), &st);
	cJSON_ArrayForEach(it, r)
		if (!strcmp(cJSON_GetObjectItem(it, "Host")->valuestring, "small"))
			assert_int_equal((int)cJSON_GetObjectItem(it, "Score")->valuedouble, 10);
	cJSON_Delete(r);
}

/* A big request: every node judged, in request order. */
static void test_large_request(void **state)
{
	struct fixture *f = *state;
	enum { N = 2000 };
	cache_lock(f->cache);
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof(name), "big-%04d", i);
		struct gpu_node *n = tu_node(name, 8, GPU_VENDOR_NVIDIA, "H100", 81559);
		for (int d = 0; d < 8 && i % 2; d++)
			n->dev[d].external = true;        /* odd nodes: nothing usable */
		assert_int_equal(cache_set_gpus(f->cache, name, n), 0);
	}
	cache_unlock(f->cache);
	struct buf body;
	buf_init(&body, 1 << 20);
	buf_adds(&body, "{\"Pod\":{\"metadata\":{\"name\":\"p\",\"uid\":\"big\"},\"spec\":{\"containers\":[{\"name\":\"c\","
			"\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"2\"}}}]}},\"NodeNames\":[");
	for (int i = 0; i < N; i++)
		buf_printf(&body, "%s\"big-%04d\"", i ? "," : "", i);
	buf_adds(&body, "]}");
	int st;
	cJSON *r = call(extender_filter, f->x, buf_cstr(&body), &st);
	assert_int_equal(st, 200);
	const cJSON *names = cJSON_GetObjectItem(r, "NodeNames");
	assert_int_equal(cJSON_GetArraySize(names), N / 2);
	int i = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, names) {
		char want[32];
		snprintf(want, sizeof(want), "big-%04d", 2 * i++);   /* in request order */
		assert_string_equal(it->valuestring, want);
	}
	const cJSON *un = cJSON_GetObjectItem(r, "FailedAndUnresolvableNodes");
	assert_int_equal(cJSON_GetArraySize(un), N / 2);
	assert_non_null(strstr(cJSON_GetObjectItem(un, "big-1999")->valuestring, "0 of 8 matching GPUs usable"));
	cJSON_Delete(r);
	r = call(extender_prioritize, f->x, buf_cstr(&body), &st);
	assert_int_equal(cJSON_GetArraySize(r), N / 2);   /* the nodes that do not fit score 0: left out */
	i = 0;
	cJSON_ArrayForEach(it, r) {
		char want[32];
		snprintf(want, sizeof(want), "big-%04d", i);
		assert_string_equal(cJSON_GetObjectItem(it, "Host")->valuestring, want);
		int score = (int)cJSON_GetObjectItem(it, "Score")->valuedouble;
		assert_int_equal(score, 10);   /* all fitting nodes are alike */
		i += 2;
	}
	cJSON_Delete(r);
	buf_release(&body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_filter_reasons, setup, teardown),
		cmocka_unit_test_setup_teardown(test_filter_unsatisfiable_event, setup, teardown),
		cmocka_unit_test_setup_teardown(test_filter_tells_nudger, setup, teardown),
		cmocka_unit_test_setup_teardown(test_filter_no_gpu_pod_passes_all, setup, teardown),
		cmocka_unit_test_setup_teardown(test_filter_nodes_form_echoes_objects, setup, teardown),
		cmocka_unit_test_setup_teardown(test_filter_invalid_requests, setup, teardown),
		cmocka_unit_test_setup_teardown(test_node_names_decoding, setup, teardown),
		cmocka_unit_test_setup_teardown(test_claim_topology_required, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prioritize_policies, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bind_flow, setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_binds_exactly_fill, setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_shared_binds_never_exceed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_preempt, setup, teardown),
		cmocka_unit_test_setup_teardown(test_inventory_errors_change_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_large_request, setup, teardown),
		cmocka_unit_test_setup_teardown(test_not_ready_refuses, setup, teardown),
		cmocka_unit_test_setup_teardown(test_own_reservation_not_counted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_filter_choice_counts_until_bind, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bind_arrival_keeps_the_filters_devices, setup, teardown),
		cmocka_unit_test_setup_teardown(test_assumed_devices_never_overlap_records, setup, teardown),
		cmocka_unit_test_setup_teardown(test_filter_waits_for_queued_binds, setup, teardown),
		cmocka_unit_test(test_choices_expire_and_stay_bounded),
	};
	return cmocka_run_group_tests_name("extender", tests, NULL, NULL);
}
