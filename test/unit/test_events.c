/*
 * The Event recorder (include/events.h) against an API server faked in
 * process through the kube client's transport hook: repeats PATCH one
 * Event, the per-object bucket and every_s hold posts back, a full queue
 * drops and counts while the poster never waits on a slow API server.
 */
#include "testutil.h"

#include "clock.h"
#include "events.h"
#include "devplugin.h"
#include "metrics.h"
#include "kube.h"

#include <pthread.h>
#include <stdio.h>

#define MAXREQ 64

/* A fake API server: Events made and patched, pods known, and a gate that holds every answer back. */
struct fake {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool closed;                /* answers wait until it opens: a slow API server */
	int waiting;                /* requests held at the gate */
	int patch_status;           /* what a PATCH answers (0: 200) */
	int n, made;
	char method[MAXREQ][8], path[MAXREQ][256], body[MAXREQ][2048];
};

static int answer(void *ctx, const char *method, const char *path, const char *body, const char *content_type,
		  long timeout_s, struct kube_response *r, char *err, size_t errlen)
{
	(void)content_type;
	(void)timeout_s;
	(void)err;
	(void)errlen;
	struct fake *f = ctx;
	pthread_mutex_lock(&f->mu);
	f->waiting++;
	pthread_cond_broadcast(&f->cv);
	while (f->closed)
		pthread_cond_wait(&f->cv, &f->mu);
	f->waiting--;
	if (f->n < MAXREQ) {
		snprintf(f->method[f->n], sizeof(f->method[0]), "%s", method);
		snprintf(f->path[f->n], sizeof(f->path[0]), "%s", path);
		snprintf(f->body[f->n], sizeof(f->body[0]), "%s", body ? body : "");
		f->n++;
	}
	if (!strcmp(method, "POST")) {
		r->status = 201;
		buf_printf(&r->body, "{\"metadata\":{\"name\":\"ev-%d\"}}", ++f->made);
	} else if (!strcmp(method, "PATCH")) {
		r->status = f->patch_status ? f->patch_status : 200;
		buf_adds(&r->body, "{}");
	} else if (strstr(path, "/gone")) {
		r->status = 404;
		buf_adds(&r->body, "{\"kind\":\"Status\",\"message\":\"not found\"}");
	} else {
		r->status = 200;
		buf_adds(&r->body, "{\"metadata\":{\"uid\":\"uid-read\"}}");
	}
	pthread_mutex_unlock(&f->mu);
	return 0;
}

struct rig {
	struct fake f;
	struct kube_client *c;
	struct events *e;
};

static void rig_up_opts(struct rig *g, const struct events_opts *o)
{
	memset(g, 0, sizeof(*g));
	pthread_mutex_init(&g->f.mu, NULL);
	pthread_cond_init(&g->f.cv, NULL);
	g->c = kube_client_new_transport(answer, &g->f);
	assert_non_null(g->c);
	g->e = events_new(g->c, o);
	assert_non_null(g->e);
}

static void rig_up(struct rig *g, int queue, int burst)
{
	struct events_opts o = { .component = "gpu-extender", .instance = "replica-1", .queue = queue, .burst = burst };
	rig_up_opts(g, &o);
}

static void rig_down(struct rig *g)
{
	events_free(g->e);
	kube_client_free(g->c);
	pthread_cond_destroy(&g->f.cv);
	pthread_mutex_destroy(&g->f.mu);
}

static void gate(struct fake *f, bool closed)
{
	pthread_mutex_lock(&f->mu);
	f->closed = closed;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

/* Until n requests wait at the closed gate. */
static void held(struct fake *f, int n)
{
	pthread_mutex_lock(&f->mu);
	while (f->waiting < n)
		pthread_cond_wait(&f->cv, &f->mu);
	pthread_mutex_unlock(&f->mu);
}

static uint64_t count(struct events *e, enum events_result r)
{
	uint64_t c[EVENTS_NRESULT];
	events_counts(e, c);
	return c[r];
}

/* The same object, reason and message again: one Event, its count PATCHed; a new message is a new Event. */
static void test_repeat_patches(void **state)
{
	(void)state;
	struct rig g;
	rig_up(&g, 0, 0);
	for (int i = 0; i < 3; i++) {
		assert_true(events_pod(g.e, "ml", "p1", "u1", EVENTS_NORMAL, "GPUsAllocated", 0, "node %s: GPUs %d", "n1", 0));
		assert_true(events_idle(g.e, 5000));
	}
	assert_int_equal(g.f.n, 3);
	assert_string_equal(g.f.method[0], "POST");
	assert_string_equal(g.f.path[0], "/api/v1/namespaces/ml/events");
	assert_non_null(strstr(g.f.body[0], "\"reason\":\"GPUsAllocated\""));
	assert_non_null(strstr(g.f.body[0], "\"message\":\"node n1: GPUs 0\""));
	assert_non_null(strstr(g.f.body[0], "\"uid\":\"u1\""));
	assert_non_null(strstr(g.f.body[0], "\"reportingComponent\":\"gpu-extender\""));
	assert_non_null(strstr(g.f.body[0], "\"reportingInstance\":\"replica-1\""));
	assert_non_null(strstr(g.f.body[0], "\"type\":\"Normal\""));
	assert_string_equal(g.f.method[1], "PATCH");
	assert_string_equal(g.f.path[1], "/api/v1/namespaces/ml/events/ev-1");
	assert_non_null(strstr(g.f.body[1], "\"count\":2"));
	assert_non_null(strstr(g.f.body[2], "\"count\":3"));
	events_pod(g.e, "ml", "p1", "u1", EVENTS_NORMAL, "GPUsAllocated", 0, "node n2: GPUs 1");
	assert_true(events_idle(g.e, 5000));
	assert_string_equal(g.f.method[3], "POST");
	assert_int_equal(count(g.e, EVENTS_SENT), 2);
	assert_int_equal(count(g.e, EVENTS_PATCHED), 2);
	/* An Event gone meanwhile (its TTL): the repeat makes a new one. */
	g.f.patch_status = 404;
	events_pod(g.e, "ml", "p1", "u1", EVENTS_NORMAL, "GPUsAllocated", 0, "node n2: GPUs 1");
	assert_true(events_idle(g.e, 5000));
	assert_string_equal(g.f.method[4], "PATCH");
	assert_string_equal(g.f.method[5], "POST");
	assert_non_null(strstr(g.f.body[5], "\"count\":1"));
	rig_down(&g);
}

/* Repeats still queued fold into the queued Event: one POST with their count. */
static void test_queued_repeats_fold(void **state)
{
	(void)state;
	struct rig g;
	rig_up(&g, 0, 0);
	gate(&g.f, true);
	events_pod(g.e, "ml", "first", "u0", EVENTS_NORMAL, "GangWaiting", 0, "1 of 3 members");
	held(&g.f, 1);
	for (int i = 0; i < 5; i++)
		assert_true(events_pod(g.e, "ml", "p1", "u1", EVENTS_NORMAL, "GangWaiting", 0, "2 of 3 members"));
	gate(&g.f, false);
	assert_true(events_idle(g.e, 5000));
	assert_int_equal(g.f.n, 2);
	assert_non_null(strstr(g.f.body[1], "\"count\":5"));
	rig_down(&g);
}

/* A token bucket per object: past the burst, an object's Events are held back; another object's are not. */
static void test_rate_limit_per_object(void **state)
{
	(void)state;
	struct rig g;
	rig_up(&g, 0, 3);
	for (int i = 0; i < 5; i++) {
		events_pod(g.e, "ml", "noisy", "u1", EVENTS_WARNING, "GPUUnhealthy", 0, "device %d", i);
		assert_true(events_idle(g.e, 5000));
	}
	events_pod(g.e, "ml", "quiet", "u2", EVENTS_WARNING, "GPUUnhealthy", 0, "device 0");
	assert_true(events_idle(g.e, 5000));
	assert_int_equal(count(g.e, EVENTS_SENT), 4);
	assert_int_equal(count(g.e, EVENTS_LIMITED), 2);
	assert_non_null(strstr(g.f.body[3], "\"name\":\"quiet\""));
	rig_down(&g);
}

/* every_s: one post per object and reason in that time, whatever the message. */
static void test_every(void **state)
{
	(void)state;
	struct rig g;
	rig_up(&g, 0, 0);
	events_pod(g.e, "ml", "p1", "u1", EVENTS_WARNING, "GPUClaimUnsatisfiable", 60, "3 nodes: too few GPUs");
	assert_true(events_idle(g.e, 5000));
	events_pod(g.e, "ml", "p1", "u1", EVENTS_WARNING, "GPUClaimUnsatisfiable", 60, "2 nodes: too few GPUs");
	events_pod(g.e, "ml", "p2", "u2", EVENTS_WARNING, "GPUClaimUnsatisfiable", 60, "2 nodes: too few GPUs");
	assert_true(events_idle(g.e, 5000));
	assert_int_equal(count(g.e, EVENTS_SENT), 2);
	assert_int_equal(count(g.e, EVENTS_LIMITED), 1);
	rig_down(&g);
}

/*
 * A slow API server (every answer held back): posts past the queue's
 * room are dropped and counted, and no post waits for the server.
 */
static void test_full_queue_drops_without_waiting(void **state)
{
	(void)state;
	struct rig g;
	rig_up(&g, 4, 100);
	gate(&g.f, true);
	events_pod(g.e, "ml", "p0", "u0", EVENTS_NORMAL, "GPUsAllocated", 0, "held");
	held(&g.f, 1);            /* the drainer waits on the server */
	int64_t t0 = clock_mono_ms();
	int queued = 0;
	for (int i = 0; i < 200; i++)
		queued += events_pod(g.e, "ml", "p1", "u1", EVENTS_NORMAL, "GPUsAllocated", 0, "GPUs %d", i);
	int64_t took = clock_mono_ms() - t0;
	assert_int_equal(queued, 4);
	assert_int_equal(count(g.e, EVENTS_DROPPED), 196);
	assert_true(took < 1000);  /* 200 posts, with the server not answering at all */
	gate(&g.f, false);
	assert_true(events_idle(g.e, 5000));
	assert_int_equal(count(g.e, EVENTS_SENT), 5);
	struct metrics_gauges mg = { 0 };
	events_counts(g.e, mg.events);
	struct buf m;
	buf_init(&m, 1 << 16);
	metrics_render(&m, &mg);
	assert_non_null(strstr(buf_cstr(&m), "gpu_extender_events_total{result=\"dropped\"} 196"));
	buf_release(&m);
	rig_down(&g);
}

/* Posters on several threads while the drainer works (TSan runs this). */
static void *poster(void *arg)
{
	struct events *e = arg;
	for (int i = 0; i < 300; i++)
		events_pod(e, "ml", i % 2 ? "a" : "b", "u", EVENTS_NORMAL, "GangWaiting", 0, "%d of 3 members", i % 3);
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	struct rig g;
	rig_up(&g, 16, 1000);
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&t[i], NULL, poster, g.e), 0);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	assert_true(events_idle(g.e, 10000));
	uint64_t c[EVENTS_NRESULT];
	events_counts(g.e, c);
	assert_true(c[EVENTS_SENT] + c[EVENTS_PATCHED] >= 1);
	assert_int_equal(c[EVENTS_FAILED], 0);
	rig_down(&g);
}

/* No uid: the object is read for it; an object that is gone gets no Event. Nodes' Events go to "default". */
static void test_uid_read(void **state)
{
	(void)state;
	struct rig g;
	rig_up(&g, 0, 0);
	struct events_object node = { .api_version = "v1", .kind = "Node", .ns = "", .name = "n1" };
	events_post(g.e, &node, EVENTS_WARNING, "GPUUnhealthy", 0, "GPU 3 (uuid-3): XID 79");
	events_pod(g.e, "ml", "gone", NULL, EVENTS_WARNING, "GPUHeldTwice", 0, "x");
	struct events_object pg = { .api_version = "scheduling.x-k8s.io/v1alpha1", .kind = "PodGroup", .ns = "ml",
				    .name = "g1" };
	events_post(g.e, &pg, EVENTS_NORMAL, "GangWaiting", 0, "2 of 3 members");
	assert_true(events_idle(g.e, 5000));
	assert_int_equal(g.f.n, 5);
	assert_string_equal(g.f.path[0], "/api/v1/nodes/n1");
	assert_string_equal(g.f.path[1], "/api/v1/namespaces/default/events");
	assert_non_null(strstr(g.f.body[1], "\"uid\":\"uid-read\""));
	assert_null(strstr(g.f.body[1], "\"namespace\":\"\""));
	assert_string_equal(g.f.path[2], "/api/v1/namespaces/ml/pods/gone");
	assert_string_equal(g.f.path[3], "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ml/podgroups/g1");
	assert_string_equal(g.f.path[4], "/api/v1/namespaces/ml/events");
	assert_int_equal(count(g.e, EVENTS_GONE), 1);
	assert_int_equal(count(g.e, EVENTS_FAILED), 0);
	rig_down(&g);
}

/* A recorder switched off (NULL) takes every call and does nothing. */
static void test_off(void **state)
{
	(void)state;
	assert_false(events_pod(NULL, "ml", "p", "u", EVENTS_NORMAL, "GPUsAllocated", 0, "x"));
	assert_true(events_idle(NULL, 0));
	events_free(NULL);
	uint64_t c[EVENTS_NRESULT];
	events_counts(NULL, c);
	assert_int_equal(c[EVENTS_SENT], 0);
}

/* A recorder of warnings only posts no Normal Event (GPUsAllocated), and every Warning. */
static void test_warnings_only(void **state)
{
	(void)state;
	struct rig g;
	struct events_opts o = { .component = "gpu-extender", .instance = "replica-1", .warnings_only = true };
	rig_up_opts(&g, &o);
	assert_false(events_pod(g.e, "ml", "p1", "u1", EVENTS_NORMAL, "GPUsAllocated", 0, "node n1: GPUs 0"));
	struct events_object group = { .api_version = "scheduling.x-k8s.io/v1alpha1", .kind = "PodGroup", .ns = "ml",
				       .name = "g", .uid = "u3" };
	assert_false(events_post(g.e, &group, EVENTS_NORMAL, "GangWaiting", 30, "gang g waits"));
	assert_true(events_pod(g.e, "ml", "p2", "u2", EVENTS_WARNING, "GPUClaimUnsatisfiable", 60, "no node fits"));
	assert_true(events_idle(g.e, 5000));
	assert_int_equal(g.f.n, 1);
	assert_non_null(strstr(g.f.body[0], "GPUClaimUnsatisfiable"));
	assert_int_equal(count(g.e, EVENTS_SENT), 1);
	rig_down(&g);
}

/* Both programs' metric tables name the recorder's results, in its order. */
static void test_metric_rows_are_the_results(void **state)
{
	(void)state;
	static const char *const want[EVENTS_NRESULT] = { EVENTS_RESULT_NAMES };
	int n = 0, tables = 0;
	const struct metric_family *fams[2] = { metrics_families(&n), NULL };
	int counts[2] = { n, 0 };
	fams[1] = dp_auditor_families(&counts[1]);
	for (int t = 0; t < 2; t++)
		for (int i = 0; i < counts[t]; i++) {
			const struct metric_family *f = &fams[t][i];
			if (!strstr(f->name, "_events_total") || strstr(f->name, "watch_events"))
				continue;
			tables++;
			for (int k = 0; k < EVENTS_NRESULT; k++)
				assert_string_equal(f->values[k], want[k]);
			assert_null(f->values[EVENTS_NRESULT]);
		}
	assert_int_equal(tables, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_metric_rows_are_the_results),
		cmocka_unit_test(test_repeat_patches),
		cmocka_unit_test(test_queued_repeats_fold),
		cmocka_unit_test(test_rate_limit_per_object),
		cmocka_unit_test(test_every),
		cmocka_unit_test(test_full_queue_drops_without_waiting),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_uid_read),
		cmocka_unit_test(test_off),
		cmocka_unit_test(test_warnings_only),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
