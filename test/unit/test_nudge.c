/*
 * The nudger (include/nudge.h): the token bucket, which waiting claims fit
 * a node (each counted against the ones before), when a node's devices
 * count as gained (gpu_node_gained) and the cache's hook that reports it,
 * and the whole path against an API server faked through the kube
 * client's transport hook: the waiting pod that fits is annotated, the
 * others are not, the table is bounded and forgets, the bucket holds
 * nudges back and lets them through a moment later.
 */
#include "testutil.h"

#include "api.h"
#include "cache.h"
#include "fit.h"
#include "kube.h"
#include "metrics.h"
#include "nudge.h"

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

/* ---- the pure parts ---- */

static void test_bucket(void **state)
{
	(void)state;
	struct nudge_bucket b;
	nudge_bucket_init(&b, 2, 2, 1000);
	assert_true(nudge_bucket_take(&b, 1000));
	assert_true(nudge_bucket_take(&b, 1000));
	assert_false(nudge_bucket_take(&b, 1000));     /* the burst spent */
	assert_false(nudge_bucket_take(&b, 1400));     /* 0.8 of a token */
	assert_true(nudge_bucket_take(&b, 1500));      /* one a half second */
	assert_false(nudge_bucket_take(&b, 1500));
	assert_true(nudge_bucket_take(&b, 100000));    /* a long pause: the burst, no more */
	assert_true(nudge_bucket_take(&b, 100000));
	assert_false(nudge_bucket_take(&b, 100000));
	assert_false(nudge_bucket_take(&b, 50000));    /* a clock going back gives nothing */
}

/* Each claim is counted against the ones before it: two free GPUs take the 2-GPU pod, or two 1-GPU pods. */
static void test_fits_in_order(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n1", 2, GPU_VENDOR_NVIDIA, "NVIDIA H100", 81920);
	struct claim two = tu_whole(2), one = tu_whole(1), three = tu_whole(3), share = tu_shared(40000, 500);
	bool fits[4];
	const struct claim *a[] = { &two, &one, &one };
	assert_int_equal(nudge_fits(n, a, 3, fits), 1);
	assert_true(fits[0]);
	assert_false(fits[1]);
	assert_false(fits[2]);
	const struct claim *b[] = { &three, &one, &one, &one };
	assert_int_equal(nudge_fits(n, b, 4, fits), 2);
	assert_false(fits[0]);
	assert_true(fits[1] && fits[2]);
	assert_false(fits[3]);
	const struct claim *c[] = { &share, &share, &share, &two };
	assert_int_equal(nudge_fits(n, c, 4, fits), 3);   /* binpack: two shares on one GPU, the third on the other */
	assert_false(fits[3]);
	n->dev[1].health = GPU_UNHEALTHY;
	assert_int_equal(nudge_fits(n, a, 3, fits), 1);
	assert_false(fits[0]);
	assert_true(fits[1]);
	for (int i = 0; i < n->ndev; i++)   /* the node itself was not changed */
		assert_int_equal(n->dev[i].exclusive + n->dev[i].shared, 0);
	gpu_node_free(n);
}

static void test_gained(void **state)
{
	(void)state;
	struct gpu_node *before = tu_node("n1", 2, GPU_VENDOR_NVIDIA, "NVIDIA H100", 81920);
	before->dev[0].exclusive = 1;
	before->dev[1].health = GPU_UNHEALTHY;
	struct gpu_node *after = gpu_node_clone(before);
	assert_false(gpu_node_gained(before, after));          /* the same */
	assert_false(gpu_node_gained(NULL, after));            /* a node first seen, with no device free */
	after->dev[1].health = GPU_HEALTHY;
	assert_true(gpu_node_gained(NULL, after));             /* ... and with one */
	after->dev[1].health = GPU_UNHEALTHY;
	after->dev[0].exclusive = 0;
	assert_true(gpu_node_gained(before, after));           /* a reservation released */
	assert_false(gpu_node_gained(after, before));          /* taken: nothing gained */
	after->dev[0].exclusive = 1;
	after->dev[1].health = GPU_HEALTHY;
	assert_true(gpu_node_gained(before, after));           /* turned healthy */
	after->dev[1].external = true;
	assert_false(gpu_node_gained(before, after));          /* healthy but held outside */
	after->dev[1].external = false;
	after->dev[1].health = GPU_UNHEALTHY;
	after->dev[0].used_mib = 100, after->dev[0].shared = 1;
	before->dev[0].used_mib = 200, before->dev[0].shared = 1;
	assert_true(gpu_node_gained(before, after));           /* a share got smaller */
	gpu_node_free(after);
	after = tu_node("n1", 3, GPU_VENDOR_NVIDIA, "NVIDIA H100", 81920);
	after->dev[0].exclusive = 1;
	after->dev[1].health = GPU_UNHEALTHY;
	after->dev[2].exclusive = 1;
	before->dev[0].used_mib = 0, before->dev[0].shared = 0;
	assert_false(gpu_node_gained(before, after));          /* a device more, but taken */
	after->dev[2].exclusive = 0;
	assert_true(gpu_node_gained(before, after));           /* a device more, free */
	gpu_node_free(before);
	gpu_node_free(after);
}

/* ---- the cache's hook ---- */

struct seen {
	int n;
	char last[64];
};

static void on_gained(void *ctx, const char *node)
{
	struct seen *s = ctx;
	s->n++;
	snprintf(s->last, sizeof(s->last), "%s", node);
}

static struct alloc one_gpu(const char *uid, int id)
{
	struct alloc a;
	memset(&a, 0, sizeof(a));
	snprintf(a.uid, sizeof(a.uid), "%s", uid);
	alloc_set_pod(&a, "ml", uid);
	a.mode = CLAIM_EXCLUSIVE;
	assert_int_equal(alloc_add_id(&a, id), 0);
	return a;
}

static void test_cache_reports_gains(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	struct seen s = { 0 };
	cache_on_gained(c, on_gained, &s);
	struct alloc a = one_gpu("u-held", 0);
	cache_lock(c);
	assert_int_equal(cache_set_gpus(c, "n1", tu_node("n1", 1, GPU_VENDOR_NVIDIA, "NVIDIA H100", 81920)), 0);
	assert_int_equal(cache_add_alloc(c, "n1", &a), 0);
	cache_unlock(c);
	int first = s.n;                           /* the node's first view may count: its GPU was new */
	cache_lock(c);
	assert_int_equal(cache_add_alloc(c, "n1", &a), 0);
	cache_unlock(c);
	assert_int_equal(s.n, first);              /* nothing changed */
	cache_lock(c);
	assert_true(cache_remove_alloc(c, "u-held", "n1"));
	cache_unlock(c);
	assert_int_equal(s.n, first + 1);
	assert_string_equal(s.last, "n1");
	cache_lock(c);
	assert_int_equal(cache_add_alloc(c, "n1", &a), 0);
	cache_unlock(c);
	assert_int_equal(s.n, first + 1);          /* taken again: no gain */
	struct gpu_node *sick = tu_node("n1", 1, GPU_VENDOR_NVIDIA, "NVIDIA H100", 81920);
	sick->dev[0].health = GPU_UNHEALTHY;
	cache_lock(c);
	assert_true(cache_remove_alloc(c, "u-held", "n1"));
	assert_int_equal(cache_set_gpus(c, "n1", sick), 0);
	cache_unlock(c);
	assert_int_equal(s.n, first + 1);          /* freed but unhealthy: no gain */
	cache_lock(c);
	assert_int_equal(cache_set_gpus(c, "n1", tu_node("n1", 1, GPU_VENDOR_NVIDIA, "NVIDIA H100", 81920)), 0);
	cache_unlock(c);
	assert_int_equal(s.n, first + 2);          /* healthy again */
	cache_on_gained(c, NULL, NULL);
	cache_free(c);
}

/* ---- the whole path, against a fake API server ---- */

#define MAXREQ 32

struct fake {
	pthread_mutex_t mu;
	int status;                /* what a PATCH answers (0: 200) */
	int n;
	char path[MAXREQ][256], body[MAXREQ][512], type[MAXREQ][64];
};

static int answer(void *ctx, const char *method, const char *path, const char *body, const char *content_type,
		  long timeout_s, struct kube_response *r, char *err, size_t errlen)
{
	(void)timeout_s, (void)err, (void)errlen;
	struct fake *f = ctx;
	pthread_mutex_lock(&f->mu);
	if (f->n < MAXREQ && !strcmp(method, "PATCH")) {
		snprintf(f->path[f->n], sizeof(f->path[0]), "%s", path);
		snprintf(f->body[f->n], sizeof(f->body[0]), "%s", body ? body : "");
		snprintf(f->type[f->n], sizeof(f->type[0]), "%s", content_type ? content_type : "");
		f->n++;
	}
	r->status = f->status ? f->status : 200;
	buf_adds(&r->body, r->status == 200 ? "{}" : "{\"kind\":\"Status\",\"message\":\"pods \\\"x\\\" not found\"}");
	pthread_mutex_unlock(&f->mu);
	return 0;
}

static int requests(struct fake *f)
{
	pthread_mutex_lock(&f->mu);
	int n = f->n;
	pthread_mutex_unlock(&f->mu);
	return n;
}

struct rig {
	struct fake f;
	struct kube_client *kc;
	struct cache *c;
	struct nudge *n;
};

/* A cache with node n1 of ngpu GPUs, each held by a pod (held-0, held-1, ...), and a nudger hooked to it. */
static void rig_up(struct rig *g, int ngpu, const struct nudge_opts *more)
{
	memset(g, 0, sizeof(*g));
	pthread_mutex_init(&g->f.mu, NULL);
	g->kc = kube_client_new_transport(answer, &g->f);
	g->c = cache_new();
	assert_non_null(g->kc);
	assert_non_null(g->c);
	cache_lock(g->c);
	assert_int_equal(cache_set_gpus(g->c, "n1", tu_node("n1", ngpu, GPU_VENDOR_NVIDIA, "NVIDIA H100", 81920)), 0);
	for (int i = 0; i < ngpu; i++) {
		char uid[16];
		snprintf(uid, sizeof(uid), "held-%d", i);
		struct alloc a = one_gpu(uid, i);
		assert_int_equal(cache_add_alloc(g->c, "n1", &a), 0);
	}
	cache_unlock(g->c);
	struct nudge_opts o = more ? *more : (struct nudge_opts){ .rate = 0 };
	o.cache = g->c;
	o.kube = g->kc;
	g->n = nudge_new(&o);
	assert_non_null(g->n);
	cache_on_gained(g->c, nudge_gained, g->n);
}

static void rig_down(struct rig *g)
{
	cache_on_gained(g->c, NULL, NULL);
	nudge_free(g->n);
	cache_free(g->c);
	kube_client_free(g->kc);
	pthread_mutex_destroy(&g->f.mu);
}

static void free_gpu(struct rig *g, int i)
{
	char uid[16];
	snprintf(uid, sizeof(uid), "held-%d", i);
	cache_lock(g->c);
	assert_true(cache_remove_alloc(g->c, uid, "n1"));
	cache_unlock(g->c);
}

static void wait_pod(struct nudge *n, const char *name, const char *uid, int gpus)
{
	struct claim c = tu_whole(gpus);
	struct api_pod_ref ref = { .ns = "ml", .name = name, .uid = uid };
	nudge_waiting(n, &ref, &c);
	claim_release(&c);
}

static uint64_t count(struct nudge *n, enum nudge_result r)
{
	uint64_t c[NUDGE_NRESULT];
	nudge_counts(n, c);
	return c[r];
}

/* One GPU frees: of the pods waiting, the oldest that fits is annotated, and it alone. */
static void test_nudges_the_pod_that_fits(void **state)
{
	(void)state;
	struct rig g;
	rig_up(&g, 2, NULL);
	wait_pod(g.n, "wants-two", "u-two", 2);    /* the oldest, but two GPUs do not free */
	wait_pod(g.n, "first", "u-first", 1);
	wait_pod(g.n, "second", "u-second", 1);
	assert_int_equal(nudge_waiting_count(g.n), 3);
	free_gpu(&g, 0);
	assert_true(nudge_idle(g.n, 5000));
	assert_int_equal(requests(&g.f), 1);
	assert_string_equal(g.f.path[0], "/api/v1/namespaces/ml/pods/first");
	assert_string_equal(g.f.type[0], "application/merge-patch+json");
	assert_non_null(strstr(g.f.body[0], "{\"metadata\":{\"uid\":\"u-first\",\"annotations\":{\"" ANN_NUDGED "\":\""));
	assert_int_equal(count(g.n, NUDGE_SENT), 1);
	/*
	 * The pod got its node: filter forgets it (here its GPU stays free).
	 * The other GPU frees: two are free, and the oldest, wanting both,
	 * takes them; the second waits on.
	 */
	nudge_forget(g.n, "u-first");
	assert_int_equal(nudge_waiting_count(g.n), 2);
	free_gpu(&g, 1);
	assert_true(nudge_idle(g.n, 5000));
	assert_int_equal(requests(&g.f), 2);
	assert_string_equal(g.f.path[1], "/api/v1/namespaces/ml/pods/wants-two");
	rig_down(&g);
}

/* A pod the API server no longer has is forgotten; a failure is counted and the pod kept. */
static void test_gone_and_failed(void **state)
{
	(void)state;
	struct rig g;
	rig_up(&g, 2, NULL);
	g.f.status = 404;
	wait_pod(g.n, "deleted", "u-del", 1);
	free_gpu(&g, 0);
	assert_true(nudge_idle(g.n, 5000));
	assert_int_equal(count(g.n, NUDGE_GONE), 1);
	assert_int_equal(nudge_waiting_count(g.n), 0);
	g.f.status = 500;
	wait_pod(g.n, "unlucky", "u-unlucky", 1);
	free_gpu(&g, 1);
	assert_true(nudge_idle(g.n, 5000));
	assert_int_equal(count(g.n, NUDGE_FAILED), 1);
	assert_int_equal(nudge_waiting_count(g.n), 1);
	rig_down(&g);
}

/* Bounded: the pod rejected longest ago goes first; forgotten after keep_s without a rejection. */
static void test_table_bounded_and_aged(void **state)
{
	(void)state;
	struct rig g;
	struct nudge_opts o = { .keep = 2, .keep_s = 1 };
	rig_up(&g, 2, &o);
	wait_pod(g.n, "a", "u-a", 1);
	usleep(2000);
	wait_pod(g.n, "b", "u-b", 1);
	usleep(2000);
	wait_pod(g.n, "a", "u-a", 1);          /* rejected again: now the freshest */
	usleep(2000);
	wait_pod(g.n, "c", "u-c", 1);          /* full: b goes */
	assert_int_equal(nudge_waiting_count(g.n), 2);
	free_gpu(&g, 0);
	assert_true(nudge_idle(g.n, 5000));
	assert_int_equal(requests(&g.f), 1);
	assert_string_equal(g.f.path[0], "/api/v1/namespaces/ml/pods/a");   /* the oldest waiting, b gone */
	usleep(1200 * 1000);                   /* past keep_s: the next look forgets them */
	free_gpu(&g, 1);
	assert_true(nudge_idle(g.n, 5000));
	assert_int_equal(requests(&g.f), 1);
	assert_int_equal(nudge_waiting_count(g.n), 0);
	rig_down(&g);
}

/* rate 1: of two pods that fit, one is annotated at once, the other a second later. */
static void test_rate_limited(void **state)
{
	(void)state;
	struct rig g;
	struct nudge_opts o = { .rate = 1 };
	rig_up(&g, 2, &o);
	wait_pod(g.n, "a", "u-a", 1);
	usleep(2000);
	wait_pod(g.n, "b", "u-b", 1);
	cache_lock(g.c);
	assert_true(cache_remove_alloc(g.c, "held-0", "n1"));
	assert_true(cache_remove_alloc(g.c, "held-1", "n1"));
	cache_unlock(g.c);
	assert_true(nudge_idle(g.n, 5000));
	assert_int_equal(requests(&g.f), 2);
	assert_string_equal(g.f.path[0], "/api/v1/namespaces/ml/pods/a");
	assert_string_equal(g.f.path[1], "/api/v1/namespaces/ml/pods/b");
	assert_int_equal(count(g.n, NUDGE_SENT), 2);
	assert_true(count(g.n, NUDGE_LIMITED) >= 1);
	rig_down(&g);
}

/*
 * A gang member whose gang's places are on nodes its request did not name:
 * nudged once it was not tried again for retry_delay_ms, no GPU freed (its
 * siblings bound, no event is left to wake it); once a rejection, and not
 * kept for GPUs that free later.
 */
static void test_retry_nudged_when_not_tried(void **state)
{
	(void)state;
	struct rig g;
	struct nudge_opts o = { .retry_delay_ms = 300 };
	rig_up(&g, 2, &o);
	struct api_pod_ref member = { .ns = "ml", .name = "member-3", .uid = "u-m3" };
	nudge_retry(g.n, &member);
	usleep(150 * 1000);
	assert_int_equal(requests(&g.f), 0);      /* kube-scheduler may still try it: no nudge under a try */
	nudge_retry(g.n, &member);                 /* tried and rejected again: the wait starts over, doubled */
	usleep(200 * 1000);
	assert_int_equal(requests(&g.f), 0);
	assert_true(nudge_idle(g.n, 5000));
	assert_int_equal(requests(&g.f), 1);
	assert_string_equal(g.f.path[0], "/api/v1/namespaces/ml/pods/member-3");
	assert_non_null(strstr(g.f.body[0], "{\"metadata\":{\"uid\":\"u-m3\",\"annotations\":{\"" ANN_NUDGED "\":\""));
	free_gpu(&g, 0);                           /* nudged since its rejection: not again */
	assert_true(nudge_idle(g.n, 5000));
	assert_int_equal(requests(&g.f), 1);
	usleep(2000);
	nudge_retry(g.n, &member);                 /* rejected again: nudged again */
	assert_true(nudge_idle(g.n, 5000));
	assert_int_equal(requests(&g.f), 2);
	nudge_forget(g.n, "u-m3");                 /* placed */
	assert_int_equal(nudge_waiting_count(g.n), 0);
	rig_down(&g);
}

/* Nothing waits: a free costs the cache's writer one load, and nothing is sent. Off (NULL): nothing at all. */
static void test_idle_and_off(void **state)
{
	(void)state;
	struct rig g;
	rig_up(&g, 1, NULL);
	free_gpu(&g, 0);
	assert_true(nudge_idle(g.n, 5000));
	assert_int_equal(requests(&g.f), 0);
	rig_down(&g);
	struct claim c = tu_whole(1);
	struct api_pod_ref ref = { .ns = "ml", .name = "p", .uid = "u" };
	nudge_waiting(NULL, &ref, &c);
	nudge_forget(NULL, "u");
	nudge_gained(NULL, "n1");
	assert_int_equal(nudge_waiting_count(NULL), 0);
	claim_release(&c);
}

/* The metric's label values are nudge.h's results, in order. */
static void test_metric_rows(void **state)
{
	(void)state;
	const char *want[] = { NUDGE_RESULT_NAMES };
	assert_int_equal(sizeof(want) / sizeof(want[0]), NUDGE_NRESULT);
	int n, found = 0;
	const struct metric_family *f = metrics_families(&n);
	for (int i = 0; i < n; i++) {
		if (strcmp(f[i].name, "gpu_extender_nudges_total"))
			continue;
		found++;
		for (int k = 0; k < NUDGE_NRESULT; k++)
			assert_string_equal(f[i].values[k], want[k]);
		assert_null(f[i].values[NUDGE_NRESULT]);
	}
	assert_int_equal(found, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bucket),
		cmocka_unit_test(test_fits_in_order),
		cmocka_unit_test(test_gained),
		cmocka_unit_test(test_cache_reports_gains),
		cmocka_unit_test(test_nudges_the_pod_that_fits),
		cmocka_unit_test(test_gone_and_failed),
		cmocka_unit_test(test_table_bounded_and_aged),
		cmocka_unit_test(test_rate_limited),
		cmocka_unit_test(test_retry_nudged_when_not_tried),
		cmocka_unit_test(test_idle_and_off),
		cmocka_unit_test(test_metric_rows),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
