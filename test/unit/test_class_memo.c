/*
 * Results per node state (class_memo.h): the state digest, the memo, and
 * the extender's answers, which must be the same with the memo as without.
 */
#include "testutil.h"

#include "cache.h"
#include "class_memo.h"
#include "extender.h"
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>

static bool same_digest(const struct gpu_node *a, const struct gpu_node *b)
{
	struct gpu_state_digest x = gpu_node_state_digest(a), y = gpu_node_state_digest(b);
	return x.a == y.a && x.b == y.b;
}

static struct gpu_node *eight(const char *name, const char *model)
{
	struct gpu_node *n = tu_node(name, 8, GPU_VENDOR_NVIDIA, model, 81559);
	tu_island(n, "nvlink-0", 900, 0, 3);
	tu_island(n, "nvlink-1", 900, 4, 7);
	return n;
}

/* Names, labels and device strings are not state: they do not move the digest. */
static void test_digest_ignores_what_is_not_state(void **state)
{
	(void)state;
	struct gpu_node *a = eight("a", "NVIDIA H100 80GB HBM3"), *b = eight("b", "H100");
	free((void *)b->info[3].uuid);
	b->info[3].uuid = strdup("GPU-other");
	assert_int_equal(gpu_node_set_label(b, "zone", "z1"), 0);
	assert_true(same_digest(a, b));
	gpu_node_free(a);
	gpu_node_free(b);
}

/* Any one field of the state moves it. */
static void test_digest_sees_every_field(void **state)
{
	(void)state;
	struct gpu_node *base = eight("a", "H100");
	for (int field = 0; field < 18; field++) {
		struct gpu_node *n = gpu_node_clone(base);
		struct gpu_device *d = &n->dev[5];
		switch (field) {
		case 0: d->id = 9; break;
		case 1: d->island = 0; break;
		case 2: d->vendor = GPU_VENDOR_AMD; break;
		case 3: d->health = GPU_UNHEALTHY; break;
		case 4: d->memory_mib--; break;
		case 5: d->used_mib = 1; break;
		case 6: d->used_core = 1; break;
		case 7: d->exclusive = 1; break;
		case 8: d->shared = 1; break;
		case 9: d->external = true; break;
		case 10: d->mig = true; break;
		case 11: n->islands[1].bandwidth_gbps = 600; break;
		case 12: snprintf(n->islands[1].name, sizeof(n->islands[1].name), "nvlink-9"); break;
		case 13: n->cpu_cap = 1000; break;
		case 14: n->cpu_used = 1; break;
		case 15: n->mem_cap = 1000; break;
		case 16: n->mem_used = 1; break;
		case 17: n->task_kinds = TASK_KIND_SHARED; break;
		}
		if (same_digest(base, n))
			fail_msg("field %d changed, digest did not", field);
		gpu_node_free(n);
	}
	struct gpu_node *fewer = tu_node("a", 7, GPU_VENDOR_NVIDIA, "H100", 81559);
	assert_false(same_digest(base, fewer));
	gpu_node_free(fewer);
	gpu_node_free(base);
}

static void test_memo_finds_what_it_learned_and_stays_bounded(void **state)
{
	(void)state;
	struct class_memo *m = malloc(sizeof(*m));
	class_memo_init(m);
	struct class_result r = { .ok = false, .reason = 7 };
	for (uint64_t k = 0; k < CLASS_MEMO_SLOTS; k++) {
		struct gpu_state_digest s = { k * CLASS_MEMO_SLOTS, k };   /* all on one home slot */
		assert_null(class_memo_find(m, s));
		r.raw = (double)k;
		class_memo_add(m, s, &r);
	}
	assert_int_equal(m->used, CLASS_MEMO_MAX);
	for (uint64_t k = 0; k < CLASS_MEMO_SLOTS; k++) {
		struct gpu_state_digest s = { k * CLASS_MEMO_SLOTS, k };
		const struct class_result *got = class_memo_find(m, s);
		if (k < CLASS_MEMO_MAX) {
			assert_non_null(got);
			assert_true(got->raw == (double)k);
			assert_int_equal(got->reason, 7);
		} else {
			assert_null(got);   /* past the bound: not learned */
		}
	}
	/* Same first half, other second: another state. */
	assert_null(class_memo_find(m, (struct gpu_state_digest){ 0, 99 }));
	free(m);
}

/* Fewer than one lookup in CLASS_MEMO_PAYS found over the trial: off; exactly one in that many: on. */
static void test_memo_that_does_not_pay_stops(void **state)
{
	(void)state;
	struct class_memo *m = malloc(sizeof(*m));
	struct class_result r = { .ok = true, .reason = -1 };
	struct gpu_state_digest known = { 1, 1 };
	for (int hits = CLASS_MEMO_TRIAL / CLASS_MEMO_PAYS - 1; hits <= CLASS_MEMO_TRIAL / CLASS_MEMO_PAYS; hits++) {
		class_memo_init(m);
		class_memo_add(m, known, &r);
		for (int k = 0; k < CLASS_MEMO_TRIAL; k++) {
			assert_false(m->off);
			class_memo_count(m, k < hits);
		}
		bool pays = hits * CLASS_MEMO_PAYS >= CLASS_MEMO_TRIAL;
		assert_int_equal(m->off, !pays);
		if (pays) {
			assert_non_null(class_memo_find(m, known));
		} else {
			/* finds nothing, learns nothing */
			assert_null(class_memo_find(m, known));
			class_memo_add(m, (struct gpu_state_digest){ 2, 2 }, &r);
			assert_int_equal(m->used, 1);
		}
		/* the trial is over: later lookups change nothing */
		for (int k = 0; k < 2 * CLASS_MEMO_TRIAL; k++)
			class_memo_count(m, pays ? false : true);
		assert_int_equal(m->off, !pays);
	}
	free(m);
}

/* ---- the extender with and without the memo and the node counts ------------ */

struct world {
	struct cache *cache;
	struct extender *x;
	struct api_resources res;
	int nodes;
};

static struct alloc an_alloc(const char *uid, enum claim_mode mode, uint32_t mib, uint32_t core, int id)
{
	struct alloc a;
	memset(&a, 0, sizeof(a));
	snprintf(a.uid, sizeof(a.uid), "%s", uid);
	a.mode = mode;
	a.mem_mib = mib;
	a.core = core;
	assert_int_equal(alloc_add_id(&a, id), 0);
	return a;
}

/*
 * Nodes drawn from a few types with a few usage patterns, so states repeat
 * and also come alone; some nodes hold reservations of the pods the test
 * schedules ("p0".."p3"), which count for other pods but not for their own.
 * With `alone`, more nodes, each with a memory size of its own: no state
 * repeats, so the memo stops after its trial, in the middle of a request.
 */
static void build_world(struct world *w, unsigned seed, bool alone)
{
	w->cache = cache_new();
	w->nodes = alone ? 2 * CLASS_MEMO_TRIAL + 40 : 240;
	srand(seed);
	cache_lock(w->cache);
	for (int i = 0; i < w->nodes; i++) {
		char name[32];
		snprintf(name, sizeof(name), "n%03d", i);
		int type = rand() % 4;
		struct gpu_node *labels = gpu_node_new(name);
		assert_int_equal(gpu_node_set_label(labels, "pool", "gpu"), 0);
		assert_int_equal(cache_set_node(w->cache, name, labels), 0);
		struct gpu_node *g = tu_node(name, type == 3 ? 4 : 8, type == 2 ? GPU_VENDOR_AMD : GPU_VENDOR_NVIDIA,
					     "X", (type == 1 ? 40960u : 81920u) + (alone ? (uint32_t)i : 0));
		int half = g->ndev / 2;
		tu_island(g, "link-0", type == 1 ? 300 : 900, 0, half - 1);
		tu_island(g, "link-1", 900, half, g->ndev - 1);
		if (rand() % 10 == 0)
			g->dev[rand() % g->ndev].health = GPU_UNHEALTHY;
		if (rand() % 10 == 0)
			g->dev[rand() % g->ndev].external = true;
		assert_int_equal(cache_set_gpus(w->cache, name, g), 0);
		/* Usage: none, the first k devices, a share of device 0, or a pod's own device. */
		int pattern = rand() % 5, k = rand() % 8;
		for (int d = 0; pattern == 1 && d < k && d < 8; d++) {
			char uid[16];
			snprintf(uid, sizeof(uid), "x%d-%d", i, d);
			struct alloc a = an_alloc(uid, CLAIM_EXCLUSIVE, 0, 0, d);
			assert_int_equal(cache_add_alloc(w->cache, name, &a), 0);
		}
		if (pattern == 2) {
			/* the same compute share with more or less memory */
			struct alloc a = an_alloc("s", CLAIM_SHARED, 10240u * (uint32_t)(1 + rand() % 4), 500, 0);
			snprintf(a.uid, sizeof(a.uid), "s%d", i);
			assert_int_equal(cache_add_alloc(w->cache, name, &a), 0);
		}
		if (pattern == 3) {
			/* one of the scheduled pods holds a device here already */
			char uid[8];
			snprintf(uid, sizeof(uid), "p%d", rand() % 4);
			struct alloc a = an_alloc(uid, CLAIM_EXCLUSIVE, 0, 0, 1 + rand() % 3);
			assert_int_equal(cache_add_alloc(w->cache, name, &a), 0);
		}
	}
	cache_unlock(w->cache);
	api_resources_default(&w->res);
	struct extender_opts o = {
		.cache = w->cache, .res = &w->res, .default_policy = POLICY_BINPACK,
		.bind = extender_bind_local, .bind_ctx = w->cache,
	};
	w->x = extender_new(&o);
}

static void free_world(struct world *w)
{
	extender_free(w->x);
	cache_free(w->cache);
}

/* Two GpuClaims alike but for a node selector every node meets (which turns the memo and the node counts off). */
static void add_claims(struct world *w, int k, const char *devices, const char *topology)
{
	for (int sel = 0; sel < 2; sel++) {
		char name[32], text[512];
		snprintf(name, sizeof(name), "c%d%s", k, sel ? "-sel" : "");
		snprintf(text, sizeof(text), "{\"spec\":{\"devices\":{%s}%s%s%s}}", devices,
			 topology[0] ? ",\"topology\":" : "", topology,
			 sel ? ",\"selector\":{\"matchLabels\":{\"pool\":\"gpu\"}}" : "");
		cJSON *obj = cJSON_Parse(text);
		assert_non_null(obj);
		assert_int_equal(cache_set_gpuclaim(w->cache, "ml", name, obj), 0);
	}
}

static char *verb(http_handler h, void *ctx, const char *body)
{
	struct http_request req = { "POST", "/", body, strlen(body), NULL };
	struct http_response resp = { .status = 200 };
	buf_init(&resp.body, 1 << 24);
	h(ctx, &req, &resp);
	assert_int_equal(resp.status, 200);
	return buf_detach(&resp.body, NULL);
}

static char *request(const struct world *w, const char *uid, const char *claim, const char *policy)
{
	struct buf b;
	buf_init(&b, 1 << 20);
	buf_printf(&b, "{\"Pod\":{\"metadata\":{\"name\":\"%s\",\"namespace\":\"ml\",\"uid\":\"%s\","
		       "\"annotations\":{\"gpu.scheduling/claim\":\"%s\",\"gpu.scheduling/policy\":\"%s\"}},"
		       "\"spec\":{\"containers\":[{\"name\":\"c\"}]}},\"NodeNames\":[", uid, uid, claim, policy);
	for (int i = 0; i < w->nodes; i++)
		buf_printf(&b, "%s\"n%03d\"", i ? "," : "", i);
	buf_adds(&b, ",\"missing\"]}");
	return buf_detach(&b, NULL);
}

static const char *const devices[] = {
		"\"count\":1", "\"count\":2", "\"count\":4", "\"count\":8",
		"\"count\":2,\"vendor\":\"amd\"", "\"count\":1,\"minMemoryMiB\":50000",
		"\"count\":1,\"exclusivity\":\"Shared\",\"memoryMiB\":30000,\"corePercent\":40",
		"\"count\":1,\"exclusivity\":\"Shared\",\"memoryMiB\":70000",
		"\"count\":3,\"policy\":\"contiguous\"",
	};
static const char *const topology[] = {
	"", "{\"mode\":\"Required\"}", "{\"mode\":\"Required\",\"minBandwidthGBps\":600}", "{\"mode\":\"Preferred\"}",
};
static const char *const policies[] = { "binpack", "spread", "topology", "dotprod", "bestfit", "packing",
					"fgd", "fgd-balanced", "random" };
#define NPOLICIES (sizeof(policies) / sizeof(policies[0]))

/* Puts every claim of devices x topology into w (two GpuClaims each); returns how many. */
static int add_all_claims(struct world *w)
{
	int k = 0;
	for (size_t d = 0; d < sizeof(devices) / sizeof(devices[0]); d++)
		for (size_t t = 0; t < sizeof(topology) / sizeof(topology[0]); t++)
			add_claims(w, k++, devices[d], topology[t]);
	return k;
}

static void test_memo_changes_no_answer(void **state)
{
	(void)state;
	int compared = 0;
	for (unsigned seed = 1; seed <= 4; seed++) {
		struct world w;
		build_world(&w, seed, seed == 4);
		int k = add_all_claims(&w);
		for (int c = 0; c < k; c++) {
			char plain[32], sel[32], uid[8];
			snprintf(plain, sizeof(plain), "c%d", c);
			snprintf(sel, sizeof(sel), "c%d-sel", c);
			snprintf(uid, sizeof(uid), "p%d", c % 4);
			const char *policy = policies[(size_t)c % NPOLICIES];
			char *with = request(&w, uid, plain, policy), *without = request(&w, uid, sel, policy);
			http_handler verbs[] = { extender_filter, extender_prioritize };
			for (int v = 0; v < 2; v++) {
				char *a = verb(verbs[v], w.x, with), *b = verb(verbs[v], w.x, without);
				if (strcmp(a, b))
					fail_msg("seed %u claim %s policy %s %s: answers differ\n%.400s\n%.400s", seed, plain,
						 policy, v ? "prioritize" : "filter", a, b);
				compared++;
				free(a);
				free(b);
			}
			free(with);
			free(without);
		}
		free_world(&w);
	}
	assert_int_equal(compared, 4 * 36 * 2);
}

/* ---- filterKeepsBest ------------------------------------------------------ */

/* The score prioritize gave host (0 when it left the host out). */
static int score_of(const cJSON *prio, const char *host)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, prio)
		if (!strcmp(cJSON_GetObjectItem(it, "Host")->valuestring, host))
			return (int)cJSON_GetObjectItem(it, "Score")->valuedouble;
	return 0;
}

static bool names_have(const cJSON *names, const char *n)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, names)
		if (!strcmp(it->valuestring, n))
			return true;
	return false;
}

/*
 * With filterKeepsBest K, filter passes min(K, passing) of the nodes that
 * pass without it, ones prioritize scores no lower than any it left out,
 * and fails exactly the same nodes for the same reasons.
 */
static void test_filter_keeps_the_best(void **state)
{
	(void)state;
	int checked = 0;
	for (unsigned seed = 1; seed <= 2; seed++) {
		struct world w;
		build_world(&w, seed, seed == 2);
		int k = add_all_claims(&w);
		for (int keep = 1; keep <= 3; keep += 2) {
			struct extender_opts o = { .cache = w.cache, .res = &w.res, .default_policy = POLICY_BINPACK,
						   .bind = extender_bind_local, .bind_ctx = w.cache, .filter_keeps_best = keep };
			struct extender *best = extender_new(&o);
			for (int c = 0; c < k; c++) {
				char claim[32], uid[8];
				snprintf(claim, sizeof(claim), "c%d%s", c, c % 2 ? "-sel" : "");   /* memo on and off */
				snprintf(uid, sizeof(uid), "p%d", c % 4);
				char *body = request(&w, uid, claim, policies[(size_t)c % NPOLICIES]);
				char *all_s = verb(extender_filter, w.x, body), *best_s = verb(extender_filter, best, body);
				char *prio_s = verb(extender_prioritize, w.x, body);
				cJSON *all = cJSON_Parse(all_s), *kept = cJSON_Parse(best_s), *prio = cJSON_Parse(prio_s);
				assert_non_null(all);
				assert_non_null(kept);
				assert_non_null(prio);
				const cJSON *all_n = cJSON_GetObjectItem(all, "NodeNames"), *kept_n = cJSON_GetObjectItem(kept, "NodeNames");
				int passing = cJSON_GetArraySize(all_n), n = cJSON_GetArraySize(kept_n);
				if (n != (passing < keep ? passing : keep))
					fail_msg("claim %s keep %d: %d passed of %d", claim, keep, n, passing);
				int lowest_kept = 10, highest_out = 0;
				const cJSON *it;
				cJSON_ArrayForEach(it, all_n) {
					int sc = score_of(prio, it->valuestring);
					if (names_have(kept_n, it->valuestring))
						lowest_kept = sc < lowest_kept ? sc : lowest_kept;
					else
						highest_out = sc > highest_out ? sc : highest_out;
				}
				cJSON_ArrayForEach(it, kept_n)
					assert_true(names_have(all_n, it->valuestring));
				if (n < passing && lowest_kept < highest_out)
					fail_msg("claim %s keep %d: kept a node scored %d, left out one scored %d\n%s",
						 claim, keep, lowest_kept, highest_out, prio_s);
				const char *maps[] = { "FailedNodes", "FailedAndUnresolvableNodes" };
				for (int m = 0; m < 2; m++) {
					char *x = cJSON_PrintUnformatted(cJSON_GetObjectItem(all, maps[m]));
					char *y = cJSON_PrintUnformatted(cJSON_GetObjectItem(kept, maps[m]));
					assert_string_equal(x, y);
					free(x);
					free(y);
				}
				checked += n < passing;
				cJSON_Delete(all), cJSON_Delete(kept), cJSON_Delete(prio);
				free(all_s), free(best_s), free(prio_s), free(body);
			}
			extender_free(best);
		}
		free_world(&w);
	}
	assert_true(checked > 100);   /* most requests had more nodes passing than kept */
}

/* The request with the members of the JSON object members added to its pod's spec. */
static char *with_spec(const char *body, const char *members)
{
	cJSON *req = cJSON_Parse(body), *add = cJSON_Parse(members);
	assert_non_null(req);
	assert_non_null(add);
	cJSON *spec = cJSON_GetObjectItem(cJSON_GetObjectItem(req, "Pod"), "spec");
	cJSON *it;
	while ((it = add->child))
		cJSON_AddItemToObject(spec, it->string, cJSON_DetachItemViaPointer(add, it));
	char *s = cJSON_PrintUnformatted(req);
	cJSON_Delete(req), cJSON_Delete(add);
	return s;
}

/*
 * With filterKeepsBest 1, a pod that states a soft preference is passed
 * every node that fits (keepAllForPreferences), unless that is switched
 * off; a required term or a DoNotSchedule spread is no preference.
 */
static void test_filter_keeps_all_for_preferences(void **state)
{
	(void)state;
	static const struct {
		const char *spec;
		bool soft;
	} pods[] = {
		{ "{}", false },
		{ "{\"affinity\":{\"nodeAffinity\":{\"preferredDuringSchedulingIgnoredDuringExecution\":[{\"weight\":1,"
		  "\"preference\":{\"matchExpressions\":[{\"key\":\"a\",\"operator\":\"Exists\"}]}}]}}}", true },
		{ "{\"affinity\":{\"podAffinity\":{\"preferredDuringSchedulingIgnoredDuringExecution\":[{\"weight\":5,"
		  "\"podAffinityTerm\":{\"topologyKey\":\"kubernetes.io/hostname\"}}]}}}", true },
		{ "{\"affinity\":{\"podAntiAffinity\":{\"preferredDuringSchedulingIgnoredDuringExecution\":[{\"weight\":5,"
		  "\"podAffinityTerm\":{\"topologyKey\":\"kubernetes.io/hostname\"}}]}}}", true },
		{ "{\"topologySpreadConstraints\":[{\"maxSkew\":1,\"topologyKey\":\"zone\",\"whenUnsatisfiable\":\"DoNotSchedule\"},"
		  "{\"maxSkew\":1,\"topologyKey\":\"kubernetes.io/hostname\",\"whenUnsatisfiable\":\"ScheduleAnyway\"}]}", true },
		{ "{\"topologySpreadConstraints\":[{\"maxSkew\":1,\"topologyKey\":\"zone\",\"whenUnsatisfiable\":\"DoNotSchedule\"}],"
		  "\"affinity\":{\"podAntiAffinity\":{\"preferredDuringSchedulingIgnoredDuringExecution\":[]},"
		  "\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":{\"nodeSelectorTerms\":[]}}}}", false },
	};
	struct world w;
	build_world(&w, 1, false);
	add_all_claims(&w);
	for (int on = 0; on <= 1; on++) {
		struct extender_opts o = { .cache = w.cache, .res = &w.res, .default_policy = POLICY_BINPACK,
					   .bind = extender_bind_local, .bind_ctx = w.cache, .filter_keeps_best = 1,
					   .keep_all_for_preferences = on };
		struct extender *one = extender_new(&o);
		for (size_t p = 0; p < sizeof(pods) / sizeof(pods[0]); p++) {
			char *plain = request(&w, "p1", "c0", "binpack");   /* one whole GPU: most nodes fit */
			char *body = with_spec(plain, pods[p].spec);
			char *all_s = verb(extender_filter, w.x, body), *one_s = verb(extender_filter, one, body);
			cJSON *all = cJSON_Parse(all_s), *kept = cJSON_Parse(one_s);
			int passing = cJSON_GetArraySize(cJSON_GetObjectItem(all, "NodeNames"));
			int n = cJSON_GetArraySize(cJSON_GetObjectItem(kept, "NodeNames"));
			assert_true(passing > 1);
			cJSON *req = cJSON_Parse(body);
			assert_int_equal(api_pod_soft_preferences(cJSON_GetObjectItem(req, "Pod")), pods[p].soft);
			cJSON_Delete(req);
			if (n != (on && pods[p].soft ? passing : 1))
				fail_msg("pod %zu, keepAllForPreferences %d: %d passed of %d", p, on, n, passing);
			cJSON_Delete(all), cJSON_Delete(kept);
			free(all_s), free(one_s), free(body), free(plain);
		}
		extender_free(one);
	}
	free_world(&w);
}

/* ---- a filter's ratings, kept for the prioritize that follows ------------ */

/* The prioritize request kube-scheduler sends after filter answered f: the nodes that passed (*n). */
static char *prioritize_after(const char *uid, const char *claim, const char *policy, const char *f, int *n)
{
	cJSON *reply = cJSON_Parse(f);
	assert_non_null(reply);
	*n = cJSON_GetArraySize(cJSON_GetObjectItem(reply, "NodeNames"));
	char *names = cJSON_PrintUnformatted(cJSON_GetObjectItem(reply, "NodeNames"));
	struct buf b;
	buf_init(&b, 1 << 20);
	buf_printf(&b, "{\"Pod\":{\"metadata\":{\"name\":\"%s\",\"namespace\":\"ml\",\"uid\":\"%s\","
		       "\"annotations\":{\"gpu.scheduling/claim\":\"%s\",\"gpu.scheduling/policy\":\"%s\"}},"
		       "\"spec\":{\"containers\":[{\"name\":\"c\"}]}},\"NodeNames\":%s}", uid, uid, claim, policy, names);
	cJSON_free(names);
	cJSON_Delete(reply);
	return buf_detach(&b, NULL);
}

/* How many nodes prioritize rated from source ("filter" or "made"). */
static long ratings_from(const char *source)
{
	struct buf out;
	buf_init(&out, 1 << 20);
	struct metrics_gauges g = { 0 };
	metrics_render(&out, &g);
	char key[96];
	snprintf(key, sizeof(key), "gpu_extender_prioritize_ratings_total{source=\"%s\"} ", source);
	const char *at = strstr(buf_cstr(&out), key);
	long n = at ? strtol(at + strlen(key), NULL, 10) : -1;
	buf_release(&out);
	return n;
}

/*
 * A prioritize that names the nodes its pod's filter passed takes the
 * ratings the filter made of the nodes unchanged since, and answers
 * exactly as an extender that never saw the filter (every claim, topology
 * and policy; the memo on and off; nodes of a state of their own). A node
 * that changed in between is rated again, as are nodes named elsewhere
 * than the filter passed them.
 */
static void test_prioritize_takes_the_filters_ratings(void **state)
{
	(void)state;
	int compared = 0;
	long named = 0, kept0 = ratings_from("filter"), made0 = ratings_from("made");
	for (unsigned seed = 1; seed <= 3; seed++) {
		struct world w;
		build_world(&w, seed, seed == 3);
		int k = add_all_claims(&w);
		struct extender_opts o = { .cache = w.cache, .res = &w.res, .default_policy = POLICY_BINPACK,
					   .bind = extender_bind_local, .bind_ctx = w.cache };
		struct extender *fresh = extender_new(&o);
		for (int c = 0; c < 2 * k; c++) {
			char claim[32], uid[8];
			snprintf(claim, sizeof(claim), "c%d%s", c / 2, c % 2 ? "-sel" : "");
			snprintf(uid, sizeof(uid), "p%d", c % 4);
			const char *policy = policies[(size_t)(c / 2) % NPOLICIES];
			char *body = request(&w, uid, claim, policy);
			char *f = verb(extender_filter, w.x, body);
			int n;
			char *after = prioritize_after(uid, claim, policy, f, &n);
			named += n;
			if (c % 17 == 0) {   /* the cache changes between the two: a node fills up */
				struct alloc a = an_alloc("filler", CLAIM_EXCLUSIVE, 0, 0, 5);
				snprintf(a.uid, sizeof(a.uid), "filler-%d", c);
				cache_lock(w.cache);
				cache_add_alloc(w.cache, "n007", &a);
				cache_unlock(w.cache);
			}
			char *p = verb(extender_prioritize, w.x, after), *q = verb(extender_prioritize, fresh, after);
			if (strcmp(p, q)) {
				cJSON *pj = cJSON_Parse(p), *qj = cJSON_Parse(q);
				const cJSON *it;
				cJSON_ArrayForEach(it, qj) {
					const char *host = cJSON_GetObjectItem(it, "Host")->valuestring;
					if (score_of(pj, host) != score_of(qj, host))
						print_message("%s: %d, alone %d\n", host, score_of(pj, host), score_of(qj, host));
				}
				fail_msg("seed %u claim %s policy %s: prioritize after filter differs (%d and %d nodes)", seed,
					 claim, policy, cJSON_GetArraySize(pj), cJSON_GetArraySize(qj));
			}
			compared++;
			free(p), free(q), free(after), free(f), free(body);
		}
		/* Every node named, not only those the filter passed: those not where it passed them are rated again. */
		char *body = request(&w, "p1", "c0", "binpack");
		char *f = verb(extender_filter, w.x, body);
		long made = ratings_from("made");
		char *p = verb(extender_prioritize, w.x, body), *q = verb(extender_prioritize, fresh, body);
		assert_string_equal(p, q);
		assert_true(ratings_from("made") > made + w.nodes + 1);   /* fresh: all; w.x: some */
		free(p), free(q), free(f), free(body);
		extender_free(fresh);
		free_world(&w);
	}
	long kept = ratings_from("filter") - kept0, made = ratings_from("made") - made0;
	print_message("      %d prioritize requests compared, %ld nodes named: %ld ratings from the filter, %ld made\n",
		      compared, named, kept, made);
	/* The fresh extender made all its ratings; most of the others came from the filter (not for the
	 * node that changed, nor under a policy that reads more than the state where the memo is on). */
	assert_true(kept > named / 2);
	assert_true(made >= named);
}

/*
 * Two nodes in one state, one full with another pod's device, the other
 * with the asking pod's own: whichever comes first, the memo must not hand
 * the first one's answer to the second.
 */
static void test_own_reservation_breaks_the_class(void **state)
{
	(void)state;
	for (int order = 0; order < 2; order++) {
		struct world w = { .cache = cache_new(), .nodes = 0 };
		cache_lock(w.cache);
		const char *names[] = { "theirs", "mine" };
		for (int i = 0; i < 2; i++) {
			assert_int_equal(cache_set_gpus(w.cache, names[i], tu_node(names[i], 1, GPU_VENDOR_NVIDIA, "X", 81920)), 0);
			struct alloc a = an_alloc(i ? "me" : "them", CLAIM_EXCLUSIVE, 0, 0, 0);
			assert_int_equal(cache_add_alloc(w.cache, names[i], &a), 0);
		}
		cache_unlock(w.cache);
		api_resources_default(&w.res);
		struct extender_opts o = { .cache = w.cache, .res = &w.res, .default_policy = POLICY_BINPACK,
					   .bind = extender_bind_local, .bind_ctx = w.cache };
		w.x = extender_new(&o);
		char body[512];
		snprintf(body, sizeof(body),
			 "{\"Pod\":{\"metadata\":{\"name\":\"me\",\"namespace\":\"ml\",\"uid\":\"me\"},\"spec\":{\"containers\":"
			 "[{\"name\":\"c\",\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"1\"}}}]}},"
			 "\"NodeNames\":[\"%s\",\"%s\"]}", names[order], names[1 - order]);
		char *f = verb(extender_filter, w.x, body);
		assert_non_null(strstr(f, "\"NodeNames\":[\"mine\"]"));
		assert_non_null(strstr(f, "\"theirs\":"));
		free(f);
		char *p = verb(extender_prioritize, w.x, body);
		assert_non_null(strstr(p, "{\"Host\":\"mine\",\"Score\":10}"));
		assert_null(strstr(p, "theirs"));   /* scores 0: left out */
		free(p);
		free_world(&w);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_digest_ignores_what_is_not_state),
		cmocka_unit_test(test_digest_sees_every_field),
		cmocka_unit_test(test_memo_finds_what_it_learned_and_stays_bounded),
		cmocka_unit_test(test_memo_that_does_not_pay_stops),
		cmocka_unit_test(test_memo_changes_no_answer),
		cmocka_unit_test(test_own_reservation_breaks_the_class),
		cmocka_unit_test(test_filter_keeps_the_best),
		cmocka_unit_test(test_filter_keeps_all_for_preferences),
		cmocka_unit_test(test_prioritize_takes_the_filters_ratings),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
