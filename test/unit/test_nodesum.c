/*
 * The GpuNodeStatus counts (nodesum.h): what they count, the patch, reading
 * them back, and the pass that coalesces changed nodes into at most a
 * budget of writes, each node written only when its counts changed.
 */
#include "testutil.h"

#include "cache.h"
#include "nodesum.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static struct alloc make_alloc(const char *uid, enum claim_mode mode, int id0, int n)
{
	struct alloc a;
	memset(&a, 0, sizeof(a));
	snprintf(a.uid, sizeof(a.uid), "%s", uid);
	alloc_set_pod(&a, "ml", uid);
	a.mode = mode;
	if (mode == CLAIM_SHARED) {
		a.mem_mib = 8192;
		a.core = 300;
	}
	for (int k = 0; k < n; k++)
		assert_int_equal(alloc_add_id(&a, id0 + k), 0);
	return a;
}

static void set_node(struct cache *c, const char *name, int ndev)
{
	cache_lock(c);
	assert_int_equal(cache_set_gpus(c, name, tu_node(name, ndev, GPU_VENDOR_NVIDIA, "H100", 81559)), 0);
	cache_unlock(c);
}

static void set_allocs(struct cache *c, const char *name, const struct alloc *a, int n)
{
	cache_lock(c);
	assert_int_equal(cache_set_allocs(c, name, a, n), 0);
	cache_unlock(c);
}

static const struct cache_node *view_of(struct snapshot *s, const char *name)
{
	const struct cache_node *v = snapshot_find(s, name);
	assert_non_null(v);
	return v;
}

/* A GpuNodeStatus object as the watch brings it, with counts (or none: s NULL). */
static cJSON *gns_obj(const char *name, const struct nodesum *s)
{
	struct buf b;
	buf_init(&b, 4096);
	assert_int_equal(buf_printf(&b, "{\"metadata\":{\"name\":\"%s\"},\"spec\":{\"nodeName\":\"%s\"},\"status\":{\"total\":8",
				    name, name), 0);
	if (s) {
		struct buf p;
		buf_init(&p, 4096);
		assert_int_equal(nodesum_patch(s, "2026-01-02T03:04:05Z", "ext-0", &p), 0);
		cJSON *patch = cJSON_Parse(buf_cstr(&p));
		cJSON *a = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(patch, "status"), "allocation");
		char *text = cJSON_PrintUnformatted(a);
		assert_int_equal(buf_printf(&b, ",\"allocation\":%s", text), 0);
		free(text);
		cJSON_Delete(patch);
		buf_release(&p);
	}
	assert_int_equal(buf_adds(&b, "}}"), 0);
	cJSON *o = cJSON_Parse(buf_cstr(&b));
	assert_non_null(o);
	buf_release(&b);
	return o;
}

/* Whole, shared, free and unhealthy as kubectl gpu counts them; binds in flight left out. */
static void test_counts(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	struct gpu_node *n = tu_node("n1", 8, GPU_VENDOR_NVIDIA, "H100", 81559);
	n->dev[6].health = GPU_UNHEALTHY;   /* held (below) and unhealthy: counted in both */
	n->dev[7].health = GPU_UNHEALTHY;
	n->dev[5].external = true;          /* used outside the extender: neither free nor allocated */
	cache_lock(c);
	assert_int_equal(cache_set_gpus(c, "n1", n), 0);
	cache_unlock(c);
	struct alloc a[4] = {
		make_alloc("p0", CLAIM_EXCLUSIVE, 0, 2),
		make_alloc("p1", CLAIM_SHARED, 2, 1),
		make_alloc("p2", CLAIM_SHARED, 2, 1),   /* a second share of GPU 2 */
		make_alloc("p3", CLAIM_EXCLUSIVE, 6, 1),
	};
	set_allocs(c, "n1", a, 4);
	struct snapshot *s = cache_acquire(c);
	struct nodesum sum;
	nodesum_of_view(view_of(s, "n1"), &sum);
	snapshot_release(s);
	assert_int_equal(sum.whole, 3);          /* 0, 1, 6 */
	assert_int_equal(sum.shared, 1);         /* 2 */
	assert_int_equal(sum.allocated, 4);
	assert_int_equal(sum.free, 2);           /* 3, 4 */
	assert_int_equal(sum.unhealthy, 2);      /* 6, 7 */
	assert_int_equal(sum.reservations, 4);

	/* a bind in flight counts in the view (for filters) but not in the ledger's counts */
	struct alloc inflight = make_alloc("p9", CLAIM_EXCLUSIVE, 3, 1);
	cache_lock(c);
	assert_int_equal(cache_assume(c, "n1", &inflight), 0);
	cache_unlock(c);
	s = cache_acquire(c);
	const struct cache_node *v = view_of(s, "n1");
	assert_int_equal(v->nallocs, 5);
	assert_int_equal(v->nassumed, 1);
	struct nodesum with;
	nodesum_of_view(v, &with);
	snapshot_release(s);
	assert_true(nodesum_equal(&sum, &with));
	/* ... and once the ledger has the pod's own record, it does */
	struct alloc b[5] = { a[0], a[1], a[2], a[3], inflight };
	set_allocs(c, "n1", b, 5);
	s = cache_acquire(c);
	v = view_of(s, "n1");
	assert_int_equal(v->nassumed, 0);
	nodesum_of_view(v, &with);
	snapshot_release(s);
	assert_int_equal(with.whole, 4);
	assert_int_equal(with.free, 1);
	assert_int_equal(with.reservations, 5);
	/* ids the GpuNodeStatus no longer lists are skipped */
	struct alloc gone = make_alloc("p8", CLAIM_EXCLUSIVE, 40, 1);
	set_allocs(c, "n1", &gone, 1);
	s = cache_acquire(c);
	nodesum_of_view(view_of(s, "n1"), &with);
	snapshot_release(s);
	assert_int_equal(with.allocated, 0);
	assert_int_equal(with.free, 5);
	assert_int_equal(with.reservations, 1);
	cache_free(c);
}

/* The patch sets status.allocation alone, and reads back as the same counts; bad counts read as none. */
static void test_patch_and_read(void **state)
{
	(void)state;
	struct nodesum s = { .allocated = 3, .whole = 2, .shared = 1, .free = 4, .unhealthy = 1, .reservations = 5 };
	struct buf b;
	buf_init(&b, 4096);
	assert_int_equal(nodesum_patch(&s, "2026-01-02T03:04:05Z", "ext \"0\"", &b), 0);
	cJSON *p = cJSON_Parse(buf_cstr(&b));
	assert_non_null(p);
	assert_int_equal(cJSON_GetArraySize(p), 1);
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(p, "status");
	assert_int_equal(cJSON_GetArraySize(st), 1);   /* nothing of the agent's */
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(st, "allocation");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(a, "countedBy")->valuestring, "ext \"0\"");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(a, "countedAt")->valuestring, "2026-01-02T03:04:05Z");
	struct nodesum back;
	assert_true(nodesum_read(p, &back));
	assert_true(nodesum_equal(&s, &back));
	cJSON_Delete(p);
	buf_release(&b);

	const char *bad[] = {
		"{}", "{\"status\":{}}", "{\"status\":{\"allocation\":7}}",
		"{\"status\":{\"allocation\":{\"allocated\":1}}}",
		"{\"status\":{\"allocation\":{\"allocated\":-1,\"whole\":0,\"shared\":0,\"free\":0,\"unhealthy\":0,\"reservations\":0}}}",
		"{\"status\":{\"allocation\":{\"allocated\":1.5,\"whole\":0,\"shared\":0,\"free\":0,\"unhealthy\":0,\"reservations\":0}}}",
		"{\"status\":{\"allocation\":{\"allocated\":\"1\",\"whole\":0,\"shared\":0,\"free\":0,\"unhealthy\":0,\"reservations\":0}}}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cJSON *o = cJSON_Parse(bad[i]);
		assert_false(nodesum_read(o, &back));
		cJSON_Delete(o);
	}
}

static int scan(struct nodesum_table *t, struct cache *c, struct nodesum_due *due, int max, int *pending)
{
	struct snapshot *s = cache_acquire(c);
	int n = nodesum_table_scan(t, s, due, max, pending);
	snapshot_release(s);
	return n;
}

/* Writes done: the table holds them as the object now does. */
static void done_all(struct nodesum_table *t, const struct nodesum_due *due, int n)
{
	for (int i = 0; i < n; i++)
		nodesum_table_done(t, &due[i], true);
}

/*
 * The pass: nodes whose GpuNodeStatus already holds their counts are not
 * written; a burst of binds on a node between two passes is one write; an
 * unchanged cache is no write; nodes over the budget are written at the
 * next pass, first; a failed write is tried again; a node whose counts were
 * taken away (an older agent's update) or changed by another replica is
 * written again.
 */
static void test_pass_coalesces(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	struct nodesum_table *t = nodesum_table_new();
	struct nodesum_due due[8];
	int pending;
	char name[16];
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof(name), "n%d", i);
		set_node(c, name, 8);
	}
	/* n0's object holds its (empty) counts already, as after a restart of the extender */
	struct nodesum empty = { .free = 8 };
	cJSON *o = gns_obj("n0", &empty);
	assert_int_equal(nodesum_table_seen(t, "n0", o), 0);
	cJSON_Delete(o);
	for (int i = 1; i < 6; i++) {
		snprintf(name, sizeof(name), "n%d", i);
		o = gns_obj(name, NULL);
		assert_int_equal(nodesum_table_seen(t, name, o), 0);
		cJSON_Delete(o);
	}
	/* first pass: n1..n5 lack counts; a budget of 3 writes three, two wait */
	int n = scan(t, c, due, 3, &pending);
	assert_int_equal(n, 3);
	assert_int_equal(pending, 2);
	bool seen[6] = { false };
	for (int i = 0; i < n; i++) {
		assert_string_not_equal(due[i].name, "n0");
		assert_string_equal(due[i].name, due[i].object);
		assert_int_equal(due[i].sum.free, 8);
		seen[due[i].name[1] - '0'] = true;
	}
	done_all(t, due, n);
	/* next pass, same snapshot: the two left over, and nothing else */
	n = scan(t, c, due, 3, &pending);
	assert_int_equal(n, 2);
	assert_int_equal(pending, 0);
	for (int i = 0; i < n; i++) {
		assert_false(seen[due[i].name[1] - '0']);
		seen[due[i].name[1] - '0'] = true;
	}
	assert_true(seen[1] && seen[2] && seen[3] && seen[4] && seen[5]);
	done_all(t, due, n);
	assert_int_equal(scan(t, c, due, 3, &pending), 0);

	/* a burst: 8 binds on n2, one after another, between two passes: one write, of the last counts */
	struct alloc a[8];
	for (int k = 0; k < 8; k++) {
		snprintf(name, sizeof(name), "p%d", k);
		a[k] = make_alloc(name, CLAIM_EXCLUSIVE, k, 1);
		set_allocs(c, "n2", a, k + 1);
	}
	n = scan(t, c, due, 3, &pending);
	assert_int_equal(n, 1);
	assert_string_equal(due[0].name, "n2");
	assert_int_equal(due[0].sum.whole, 8);
	assert_int_equal(due[0].sum.free, 0);
	done_all(t, due, n);
	/* the watch brings our own write back: nothing to do */
	o = gns_obj("n2", &due[0].sum);
	nodesum_table_seen(t, "n2", o);
	cJSON_Delete(o);
	assert_int_equal(scan(t, c, due, 3, &pending), 0);

	/* pods come and go between two passes: the counts are what they were, no write */
	set_allocs(c, "n3", a, 2);
	set_allocs(c, "n3", NULL, 0);
	assert_int_equal(scan(t, c, due, 3, &pending), 0);

	/* a failed write is tried again at the next pass */
	set_allocs(c, "n4", a, 1);
	n = scan(t, c, due, 3, &pending);
	assert_int_equal(n, 1);
	nodesum_table_done(t, &due[0], false);
	n = scan(t, c, due, 3, &pending);
	assert_int_equal(n, 1);
	assert_string_equal(due[0].name, "n4");
	done_all(t, due, n);

	/* an older agent's update drops the counts: written again, though the cache did not change */
	o = gns_obj("n4", NULL);
	nodesum_table_seen(t, "n4", o);
	cJSON_Delete(o);
	n = scan(t, c, due, 3, &pending);
	assert_int_equal(n, 1);
	assert_string_equal(due[0].name, "n4");
	assert_int_equal(due[0].sum.whole, 1);
	done_all(t, due, n);
	/* another replica (behind) writes other counts: written back */
	struct nodesum other = { .free = 8 };
	o = gns_obj("n4", &other);
	nodesum_table_seen(t, "n4", o);
	cJSON_Delete(o);
	assert_int_equal(scan(t, c, due, 3, &pending), 1);
	done_all(t, due, 1);
	/* ... or the same counts as ours: nothing */
	o = gns_obj("n4", &due[0].sum);
	nodesum_table_seen(t, "n4", o);
	cJSON_Delete(o);
	assert_int_equal(scan(t, c, due, 3, &pending), 0);

	/* a GpuNodeStatus deleted, then made again without counts: written */
	nodesum_table_seen(t, "n5", NULL);
	o = gns_obj("n5", NULL);
	nodesum_table_seen(t, "n5", o);
	cJSON_Delete(o);
	n = scan(t, c, due, 3, &pending);
	assert_int_equal(n, 1);
	assert_string_equal(due[0].name, "n5");
	nodesum_table_free(t);
	cache_free(c);
}

/* A GpuNodeStatus named otherwise than its node (spec.nodeName) is patched under its own name. */
static void test_object_name(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	struct nodesum_table *t = nodesum_table_new();
	set_node(c, "node-a", 4);
	cJSON *o = cJSON_Parse("{\"metadata\":{\"name\":\"gns-a\"},\"spec\":{\"nodeName\":\"node-a\"},\"status\":{}}");
	assert_int_equal(nodesum_table_seen(t, "node-a", o), 0);
	cJSON_Delete(o);
	struct nodesum_due due[2];
	int pending;
	assert_int_equal(scan(t, c, due, 2, &pending), 1);
	assert_string_equal(due[0].name, "node-a");
	assert_string_equal(due[0].object, "gns-a");
	nodesum_table_free(t);
	cache_free(c);
}

/* ---- the writer's thread, against a recording API server ---- */

struct fake_api {
	pthread_mutex_t mu;
	int n;
	char path[16][128];
	char body[16][512];
	int status_of_n2;          /* what a PATCH of n2 gets */
	atomic_bool ready;
};

static int fake_request(void *ctx, const char *method, const char *path, const char *body, const char *content_type,
			long timeout_s, struct kube_response *r, char *err, size_t errlen)
{
	(void)timeout_s;
	(void)err;
	(void)errlen;
	struct fake_api *f = ctx;
	assert_string_equal(method, "PATCH");
	assert_string_equal(content_type, "application/merge-patch+json");
	pthread_mutex_lock(&f->mu);
	if (f->n < 16) {
		snprintf(f->path[f->n], sizeof(f->path[0]), "%s", path);
		snprintf(f->body[f->n], sizeof(f->body[0]), "%s", body);
		f->n++;
	}
	r->status = strstr(path, "/n2") ? f->status_of_n2 : 200;
	pthread_mutex_unlock(&f->mu);
	buf_adds(&r->body, "{}");
	return 0;
}

static bool fake_ready(void *ctx, char *why, size_t size)
{
	struct fake_api *f = ctx;
	snprintf(why, size, "not yet");
	return atomic_load(&f->ready);
}

static int requests(struct fake_api *f)
{
	pthread_mutex_lock(&f->mu);
	int n = f->n;
	pthread_mutex_unlock(&f->mu);
	return n;
}

/* Waits up to ms for at least n requests; how many came. */
static int wait_requests(struct fake_api *f, int n, int ms)
{
	for (int t = 0; t < ms && requests(f) < n; t += 20)
		usleep(20000);
	return requests(f);
}

/*
 * The thread: nothing before the cache is ready; then every node without
 * counts, two a pass (the budget of 1 s at 2 writes a second); a node whose
 * write fails again at the next pass; a stop while idle is prompt.
 */
static void test_writer(void **state)
{
	(void)state;
	struct fake_api f = { .status_of_n2 = 500 };
	pthread_mutex_init(&f.mu, NULL);
	struct kube_client *kc = kube_client_new_transport(fake_request, &f);
	struct cache *c = cache_new();
	for (int i = 0; i < 3; i++) {
		char name[8];
		snprintf(name, sizeof(name), "n%d", i);
		set_node(c, name, 4);
	}
	struct nodesum_opts o = { .client = kc, .cache = c, .identity = "ext-0", .interval_s = 1, .writes_per_s = 2,
				  .ready = fake_ready, .ready_ctx = &f };
	struct nodesum_writer *w = nodesum_writer_new(&o);
	assert_non_null(w);
	for (int i = 0; i < 3; i++) {
		char name[8];
		snprintf(name, sizeof(name), "n%d", i);
		cJSON *obj = gns_obj(name, NULL);
		nodesum_writer_seen(w, name, obj);
		cJSON_Delete(obj);
	}
	assert_int_equal(nodesum_writer_start(w), 0);
	assert_int_equal(wait_requests(&f, 1, 1500), 0);   /* not ready: nothing */
	atomic_store(&f.ready, true);
	assert_int_equal(wait_requests(&f, 2, 2500), 2);  /* one pass: the budget */
	assert_true(wait_requests(&f, 4, 2500) >= 3);     /* the next: the third, and n2 again if it failed */
	pthread_mutex_lock(&f.mu);
	bool n0 = false, n1 = false;
	int n2 = 0;
	for (int i = 0; i < f.n; i++) {
		assert_non_null(strstr(f.path[i], "/apis/gpu.scheduling/v1/gpunodestatuses/n"));
		assert_non_null(strstr(f.body[i], "\"allocation\":{\"allocated\":0,\"whole\":0,\"shared\":0,\"free\":4,"));
		assert_non_null(strstr(f.body[i], "\"countedBy\":\"ext-0\""));
		n0 = n0 || strstr(f.path[i], "/n0");
		n1 = n1 || strstr(f.path[i], "/n1");
		n2 += strstr(f.path[i], "/n2") != NULL;
	}
	f.status_of_n2 = 200;
	pthread_mutex_unlock(&f.mu);
	assert_true(n0 && n1 && n2 >= 1);
	/* n2 failed each time: it comes again until it is written, then nothing more */
	int before = requests(&f);
	wait_requests(&f, before + 1, 2500);
	usleep(2200000);
	int settled = requests(&f);
	usleep(1200000);
	assert_int_equal(requests(&f), settled);
	assert_int_equal(nodesum_writer_pending(w), 0);
	nodesum_writer_stop(w);
	nodesum_writer_seen(w, "n0", NULL);   /* the watch may still tell it */
	nodesum_writer_free(w);
	kube_client_free(kc);
	cache_free(c);
	pthread_mutex_destroy(&f.mu);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counts),
		cmocka_unit_test(test_patch_and_read),
		cmocka_unit_test(test_pass_coalesces),
		cmocka_unit_test(test_object_name),
		cmocka_unit_test(test_writer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
