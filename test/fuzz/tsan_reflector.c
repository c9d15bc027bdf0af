/*
 * A concurrency test for ThreadSanitizer (make tsan): cluster mode's watch
 * path, which no unit test starts. Two reflectors (Nodes, GpuNodeStatus)
 * list and watch a fake API server (httpd worker threads) through one kube
 * client (libcurl's shared pool and its locks) and write one cache through
 * the cluster sinks, while the main thread reads snapshots, readiness and
 * the reflectors' problems as request handlers and /readyz do. Watches end
 * after a few events, some with a 410 ERROR, so the reflectors relist and
 * re-watch many times. The assertions are light: the point is TSan seeing
 * every access of those threads.
 */
#include "testutil.h"

#include "cluster.h"
#include "httpd.h"
#include "kube.h"
#include "log.h"
#include "reflector.h"

#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

static atomic_int lists, watches;

#define NODE "{\"kind\":\"Node\",\"metadata\":{\"name\":\"n%d\",\"resourceVersion\":\"%d\",\"labels\":" \
	     "{\"zone\":\"z%d\"}},\"status\":{\"allocatable\":{\"cpu\":\"64\",\"memory\":\"256Gi\"}}}"
#define GNS "{\"kind\":\"GpuNodeStatus\",\"metadata\":{\"name\":\"n%d\",\"resourceVersion\":\"%d\"}," \
	    "\"spec\":{\"nodeName\":\"n%d\"},\"status\":{\"devices\":[{\"id\":0,\"vendor\":\"nvidia\"," \
	    "\"model\":\"NVIDIA L4\",\"memoryMiB\":%d,\"health\":\"Healthy\"}]}}"

/* One object of the resource (ctx: "nodes" or "gns"), node k at version rv. */
static void object(struct buf *b, const char *which, int k, int rv)
{
	if (!strcmp(which, "nodes"))
		buf_printf(b, NODE, k, rv, rv % 3);
	else
		buf_printf(b, GNS, k, rv, k, 20000 + rv % 4096);
}

static void on_list_or_watch(void *ctx, const struct http_request *req, struct http_response *resp)
{
	const char *which = ctx;
	if (!httpd_query(req, "watch")) {
		int n = atomic_fetch_add(&lists, 1);
		buf_adds(&resp->body, "{\"kind\":\"List\",\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[");
		for (int k = 0; k < 4; k++) {
			buf_adds(&resp->body, k ? "," : "");
			object(&resp->body, which, (n + k) % 6, 1);
		}
		buf_adds(&resp->body, "]}");
		return;
	}
	/* A few events, then the stream ends (or expires): the reflector watches (or lists) again. */
	int n = atomic_fetch_add(&watches, 1);
	for (int e = 0; e < 4; e++) {
		buf_printf(&resp->body, "{\"type\":\"%s\",\"object\":", e == 3 ? "DELETED" : e ? "MODIFIED" : "ADDED");
		object(&resp->body, which, (n + e) % 6, n + 2);
		buf_adds(&resp->body, "}\n");
	}
	buf_printf(&resp->body, "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"%d\"}}}\n", n + 3);
	if (n % 5 == 4)
		buf_adds(&resp->body, "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\"}}\n");
}

static void test_reflectors_feed_cache_while_read(void **state)
{
	(void)state;
	log_setup(LOG_ERROR, false);
	static char nodes[] = "nodes", gns[] = "gns";
	const struct http_route routes[] = {
		{ .method = "GET", .path = "/api/v1/nodes", .handler = on_list_or_watch, .ctx = nodes, .verb = VERB_OTHER },
		{ .method = "GET", .path = "/apis/gpu.scheduling/v1/gpunodestatuses", .handler = on_list_or_watch, .ctx = gns, .verb = VERB_OTHER },
	};
	struct httpd_config hc = { .host = "127.0.0.1", .port = 0, .url_prefix = "", .max_body = 1 << 20, .threads = 4 };
	char err[256];
	struct httpd *h = httpd_start(&hc, routes, 2, err, sizeof(err));
	assert_non_null(h);
	struct kube_config kc;
	kube_config_init(&kc);
	snprintf(kc.server, sizeof(kc.server), "http://127.0.0.1:%d", httpd_port(h));
	struct kube_client *kube = kube_client_new(&kc, err, sizeof(err));
	kube_config_release(&kc);
	assert_non_null(kube);

	struct cache *cache = cache_new();
	assert_non_null(cache);
	struct reflector_opts o = { .name = "nodes", .resource = RES_NODES, .path = "/api/v1/nodes" };
	cluster_node_sink(cache, &o.sink);
	struct reflector *rn = reflector_start(kube, &o, err, sizeof(err));
	o = (struct reflector_opts){ .name = "gns", .resource = RES_GNS, .path = "/apis/gpu.scheduling/v1/gpunodestatuses" };
	cluster_gns_sink(cache, &o.sink);
	struct reflector *rg = reflector_start(kube, &o, err, sizeof(err));
	assert_non_null(rn);
	assert_non_null(rg);

	/* Read as handlers do for a second, and on until both have watched and relisted many times (20 s at most). */
	int reads = 0;
	for (int i = 0; i < 2000 && (i < 100 || atomic_load(&watches) < 100 || atomic_load(&lists) < 10); i++) {
		struct snapshot *s = cache_acquire(cache);
		for (int k = 0; k < 6; k++) {
			char name[8];
			snprintf(name, sizeof(name), "n%d", k);
			reads += snapshot_find(s, name) != NULL;
		}
		snapshot_release(s);
		char why[256];
		reflector_problem(rn, why, sizeof(why));
		reflector_problem(rg, why, sizeof(why));
		(void)reflector_ready(rn);
		(void)reflector_ready(rg);
		usleep(10000);
	}
	assert_true(atomic_load(&watches) >= 100);
	assert_true(atomic_load(&lists) >= 10);
	assert_true(reads > 0);
	reflector_stop(rn);
	reflector_stop(rg);
	kube_client_free(kube);
	httpd_stop(h);
	cache_free(cache);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reflectors_feed_cache_while_read),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
