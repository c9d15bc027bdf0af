/*
 * dst: the simulator's world (replicas, actors, quiescence) and its command
 * line. docs/testing.md says what is simulated and how to replay a seed.
 *
 *   build/dst --seeds 1-2000 --steps 200          many seeds; "N passed, N failed"
 *   build/dst --seed 42 --steps 200 -v            one seed, every step traced
 *   build/dst --faults all,-unlabel               choose the fault kinds
 */
#include "dst.h"
#include "api.h"
#include "clock.h"
#include "cluster.h"
#include "jsonarena.h"
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HTTP_TIMEOUT_MS 5000     /* kube-scheduler's httpTimeout for the extender */
#define BIND_TIMEOUT_S 60       /* the default; --bind-timeout */
#define GANG_TIMEOUT_S 60       /* the PodGroups' scheduleTimeoutSeconds */
#define LAG_BOUND_MS 10000       /* watch events come within this, unless a watch is silent */
#define MAX_ACTIVE_PODS 14
#define MAX_TASKS 10

const char *const dst_fault_names[F_NFAULTS] = {
	"lost", "drop", "429", "500", "slow", "late", "watch-lag", "watch-close", "watch-silent", "api-restart",
	"replica-restart", "skew", "unlabel", "retry", "unwatched", "delete", "finish",
	"lose-entry", "kubelet-restart", "agent-restart", "gang", "prompt-release",
};

/*
 * The fault kinds `make test` runs: all but those that find bugs the
 * reservation module still has (docs/testing.md lists them with seeds).
 */
static const char *const default_off[] = { "lose-entry", NULL };   /* with unlabel and restarts: the open seeds of docs/testing.md */

/* ---- PRNG (splitmix64) ---- */

uint64_t rng_next(struct rng *g)
{
	uint64_t z = (g->s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

uint32_t rng_below(struct rng *g, uint32_t n)
{
	return (uint32_t)(rng_next(g) % n);
}

bool rng_pct(struct rng *g, uint32_t pct)
{
	return rng_below(g, 100) < pct;
}

void dst_trace(struct world *w, const char *fmt, ...)
{
	char *line = w->trace[w->traced++ % DST_TRACE];
	int n = snprintf(line, 240, "%5ld t=%7.3fs ", w->step, (double)w->now_ms / 1000);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line + n, (size_t)(240 - n), fmt, ap);
	va_end(ap);
	if (w->verbose)
		fprintf(stderr, "%s\n", line);
}

static bool on(const struct world *w, enum fault f)
{
	return w->faults_on && w->fault[f];
}

/* ---- replicas ---- */

static bool replica_ready(void *ctx, char *why, size_t size)
{
	struct incarnation *inc = ctx;
	for (int k = 0; k < W_KINDS; k++)
		if (!apis_watch(inc->w->api, inc->slot, k)->listed) {
			snprintf(why, size, "watches not listed");
			return false;
		}
	if (!inc->reconciled)
		snprintf(why, size, "not reconciled");
	return inc->reconciled;
}

/* Nodes and their GpuNodeStatus, through the cluster module's own sinks (a list each). */
static void feed_nodes(struct incarnation *inc)
{
	struct reflector_sink s[2];
	cluster_node_sink(inc->cache, &s[0]);
	cluster_gns_sink(inc->cache, &s[1]);
	for (int k = 0; k < 2; k++) {
		s[k].lock(s[k].ctx);
		s[k].list_begin(s[k].ctx);
		for (int i = 0; i < DST_NODES; i++) {
			char text[2048];
			int gpus = i == 0 ? 8 : 4, at;
			if (!k) {
				snprintf(text, sizeof(text), "{\"kind\":\"Node\",\"metadata\":{\"name\":\"n%d\",\"labels\":{}}}", i);
			} else {
				at = snprintf(text, sizeof(text), "{\"kind\":\"GpuNodeStatus\",\"metadata\":{\"name\":\"n%d\"},"
					      "\"spec\":{\"nodeName\":\"n%d\"},\"status\":{\"devices\":[", i, i);
				for (int d = 0; d < gpus; d++)
					at += snprintf(text + at, sizeof(text) - (size_t)at,
						       "%s{\"id\":%d,\"vendor\":\"nvidia\",\"model\":\"H100\",\"memoryMiB\":81559,"
						       "\"uuid\":\"GPU-n%d-%d\",\"island\":\"nv%d\"}", d ? "," : "", d, i, d, d / 4);
				snprintf(text + at, sizeof(text) - (size_t)at, "]}}");
			}
			cJSON *obj = cJSON_Parse(text);
			s[k].apply(s[k].ctx, false, obj);
			cJSON_Delete(obj);
		}
		s[k].list_end(s[k].ctx);
		s[k].unlock(s[k].ctx);
	}
}

static struct incarnation *replica_start(struct world *w, int slot)
{
	struct incarnation *inc = calloc(1, sizeof(*inc));
	inc->w = w;
	inc->slot = slot;
	inc->gen = ++w->gens;
	snprintf(inc->identity, sizeof(inc->identity), "replica-%d.%d", slot, inc->gen);
	api_resources_default(&inc->res);
	inc->client = kube_client_new_transport(sched_transport, inc);
	inc->cache = cache_new();
	sched_clock(w, slot);
	feed_nodes(inc);
	struct reserve_opts ro = {
		.client = inc->client, .cache = inc->cache, .res = &inc->res, .ns = DST_NS, .identity = inc->identity,
		.bind_timeout_s = w->bind_timeout_s, .reap_interval_s = 10, .pod_selector = LABEL_MANAGED "=true",
	};
	inc->resv = reserve_new(&ro);
	struct extender_opts xo = {
		.cache = inc->cache, .res = &inc->res, .default_policy = POLICY_BINPACK,
		.bind = reserve_bind, .bind_ctx = inc->resv, .fetch = reserve_fetch_pod, .fetch_ctx = inc->resv,
		.gang = reserve_gang_route, .gang_ctx = inc->resv, .ready = replica_ready, .ready_ctx = inc,
		.assume_binds = true,
		/* as shipped (the filter chooses the node, assumed until its bind) on odd seeds, every node on even */
		.filter_keeps_best = (int)(w->seed & 1), .keep_all_for_preferences = true,
	};
	inc->x = extender_new(&xo);
	reserve_ledger_sink(inc->resv, &inc->sink[W_LEDGERS]);
	reserve_reservation_sink(inc->resv, &inc->sink[W_RESERVATIONS]);
	reserve_pod_sink(inc->resv, &inc->sink[W_PODS]);
	for (int k = 0; k < W_KINDS; k++)
		apis_watch(w->api, slot, k)->listed = false;
	apis_close_watches(w->api, slot);
	return inc;
}

static void replica_free(struct incarnation *inc)
{
	extender_free(inc->x);
	reserve_free(inc->resv);
	cache_free(inc->cache);
	kube_client_free(inc->client);
	free(inc);
}

/* Frees the dead incarnations whose threads all ended. */
static void bury(struct world *w)
{
	for (struct incarnation **pp = &w->dead; *pp;) {
		struct incarnation *d = *pp;
		if (d->tasks) {
			pp = &d->next_dead;
			continue;
		}
		*pp = d->next_dead;
		replica_free(d);
	}
}

/* ---- tasks: binds and reaper passes ---- */

static void bind_fn(struct task *t)
{
	struct http_request req = { "POST", "/bind", t->body, strlen(t->body), NULL };
	struct http_response resp = { .status = 200 };
	buf_init(&resp.body, 1 << 20);
	extender_bind_arrive(t->inc->x, &req);
	extender_bind(t->inc->x, &req, &resp);
	cJSON *j = cJSON_Parse(buf_cstr(&resp.body));
	const char *e = cJSON_GetStringValue(cJSON_GetObjectItem(j, "Error"));
	t->ok = resp.status == 200 && j && (!e || !e[0]);
	snprintf(t->error, sizeof(t->error), "%s", e ? e : resp.status == 200 ? "" : "HTTP error");
	cJSON_Delete(j);
	buf_release(&resp.body);
}

static void reap_fn(struct task *t)
{
	reserve_reap(t->inc->resv);
}

static void filter_done(struct world *w, struct spod *p, int pi, const char *answer_json, int slot, bool dead);

void dst_task_done(struct world *w, struct task *t)
{
	if (t->filter) {
		struct spod *p = &w->pods[t->pod];
		if (p->st == S_BINDING && p->bind == t)
			filter_done(w, p, t->pod, t->fbody, t->inc->slot, t->inc->dead);
		free(t->fbody);
		return;
	}
	if (t->pod >= 0) {
		struct spod *p = &w->pods[t->pod];
		dst_trace(w, "%s -> %s%s", t->what, t->ok ? "bound" : "refused: ", t->error);
		t->ok ? w->bound++ : w->refused++;
		/* (a fault met by the write of another bind that carried this one's edit shows in the error; so
		 * does a bind out of time, time having passed while its requests waited) */
		static const char *const fault_words[] = { "timed out", "reset by peer", "HTTP 5", "died", "connect",
							   "too slow", NULL };
		for (int i = 0; fault_words[i]; i++)
			p->faulted = p->faulted || strstr(t->error, fault_words[i]);
		p->faulted = p->faulted || t->faulted || t->inc->dead || t->inc->faults != t->faults0;
		if (!t->ok && w->fault[F_PROMPT_RELEASE] && !w->failure[0] && check_refused_bind(w, t))
			w->failure_pending = true;
		if (p->st == S_BINDING && p->bind == t) {
			p->st = t->ok ? S_DONE : S_PENDING;
			p->bind = NULL;
		}
		return;
	}
	t->inc->reaping = false;
	if (!t->inc->dead && !t->inc->reconciled) {
		bool listed = true;
		for (int k = 0; k < W_KINDS; k++)
			listed = listed && apis_watch(w->api, t->inc->slot, k)->listed;
		t->inc->reconciled = listed;
	}
	dst_trace(w, "%s done", t->what);
}

/* ---- the API server's answers ---- */

/* Answers t's request, with a fault when the seed says so; then t runs on. */
static void answer(struct world *w, struct task *t, bool faults)
{
	uint32_t roll = rng_below(&w->g, 100);
	const char *how = "ok";
	if (faults && on(w, F_DROP) && roll < 4) {
		sched_answer(w, t, false, 0, "Connection reset by peer");
		how = "dropped";
	} else if (faults && on(w, F_LOST) && roll < 9) {
		sched_answer(w, t, true, 0, "Connection reset by peer");
		how = "applied, answer lost";
	} else if (faults && on(w, F_429) && roll < 14) {
		sched_answer(w, t, false, 429, "Too many requests, please try again later.");
		how = "429";
	} else if (faults && on(w, F_500) && roll < 17) {
		bool apply = rng_pct(&w->g, 50);
		sched_answer(w, t, apply, 500, "etcdserver: request timed out");
		how = apply ? "applied, 500" : "500";
	} else {
		sched_answer(w, t, true, 1, NULL);
		how = NULL;
	}
	char what[200];
	snprintf(what, sizeof(what), "%s", t->what);
	if (how)
		dst_trace(w, "[%s] %s %.90s: %s", what, t->method, t->path, how);
	else
		dst_trace(w, "[%s] %s %.90s: %ld", what, t->method, t->path, t->resp->status);
	sched_resume(w, t);
}

/* ---- watches ---- */

/* Delivers up to n events of a watch in one batch (one read of the stream). */
static void deliver(struct world *w, struct incarnation *inc, enum watch_kind k, int n)
{
	struct watch *wt = apis_watch(w->api, inc->slot, k);
	if (n > wt->n)
		n = wt->n;
	if (!n)
		return;
	const struct reflector_sink *s = &inc->sink[k];
	sched_clock(w, inc->slot);
	s->lock(s->ctx);
	for (int i = 0; i < n; i++)
		s->apply(s->ctx, wt->ev[i].deleted, wt->ev[i].obj);
	s->unlock(s->ctx);
	static const char *const names[] = { "ledgers", "reservations", "pods" };
	dst_trace(w, "replica %d: %d %s event(s) delivered", inc->slot, n, names[k]);
	apis_watch_pop(wt, n);
}

static bool silent(const struct world *w, const struct watch *wt)
{
	return w->faults_on && wt->silent_until_ms > w->now_ms;
}

/* Every event older than the lag bound (or every event: lag 0) of watches that are not silent. */
static void deliver_due(struct world *w, int64_t lag_ms)
{
	for (int s = 0; s < w->nslots; s++)
		for (int k = 0; k < W_KINDS; k++) {
			struct watch *wt = apis_watch(w->api, s, k);
			int n = 0;
			while (n < wt->n && w->now_ms - wt->ev[n].at_ms >= lag_ms)
				n++;
			if (n && !silent(w, wt))
				deliver(w, w->inc[s], k, n);
		}
	for (int i = 0; i < DST_NODES; i++)
		for (int k = 0; k < NW_KINDS; k++) {
			struct watch *wt = apis_node_watch(w->api, i, k);
			int n = 0;
			while (n < wt->n && w->now_ms - wt->ev[n].at_ms >= lag_ms)
				n++;
			if (n && wt->open)
				node_deliver(w, i, k, n);
		}
}

static void relist(struct world *w, int slot, enum watch_kind k)
{
	struct incarnation *inc = w->inc[slot];
	sched_clock(w, slot);
	apis_relist(w->api, slot, k, &inc->sink[k]);
	dst_trace(w, "replica %d: %s relisted", slot, k == W_LEDGERS ? "ledgers" : k == W_PODS ? "pods" : "reservations");
}

/* ---- actors ---- */

static int pick_task(struct world *w, enum task_state st, struct task **out)
{
	int n = 0;
	for (struct task *t = w->tasks; t; t = t->next)
		n += t->st == st;
	if (!n)
		return 0;
	int i = (int)rng_below(&w->g, (uint32_t)n);
	for (struct task *t = w->tasks; t; t = t->next)
		if (t->st == st && !i--)
			*out = t;
	return n;
}

/* A gang: its PodGroup (minMember = its size, 60 s to place it), then its members. */
static void create_gang(struct world *w)
{
	int size = 2 + (int)rng_below(&w->g, 2), gpus = rng_pct(&w->g, 50) ? 1 : 2;
	char group[16];
	snprintf(group, sizeof(group), "g%d", w->ngangs++);
	if (apis_podgroup_create(w->api, "ml", group, size, GANG_TIMEOUT_S))
		return;
	dst_trace(w, "gang %s created (%d members of %d GPUs)", group, size, gpus);
	for (int i = 0; i < size; i++) {
		struct spod *p = &w->pods[w->npods];
		memset(p, 0, sizeof(*p));
		snprintf(p->ns, sizeof(p->ns), "ml");
		snprintf(p->name, sizeof(p->name), "p%d", w->npods);
		snprintf(p->gang, sizeof(p->gang), "%s", group);
		p->gang_size = size;
		p->gpus = gpus;
		if (apis_pod_create(w->api, p->ns, p->name, p->gpus, true, group, p->uid, sizeof(p->uid)))
			return;
		w->npods++;
		dst_trace(w, "pod %s created (%d GPUs, gang %s)", p->name, p->gpus, group);
	}
}

static void create_pod(struct world *w)
{
	int active = 0;
	for (int i = 0; i < w->npods; i++)
		active += w->pods[i].st != S_DONE;
	if (active >= MAX_ACTIVE_PODS || w->npods >= DST_MAX_PODS)
		return;
	if (on(w, F_GANG) && rng_pct(&w->g, 15) && active + 3 <= MAX_ACTIVE_PODS && w->npods + 3 <= DST_MAX_PODS) {
		create_gang(w);
		return;
	}
	static const int sizes[] = { 1, 1, 1, 2, 2, 4 };
	struct spod *p = &w->pods[w->npods];
	memset(p, 0, sizeof(*p));
	snprintf(p->ns, sizeof(p->ns), "ml");
	snprintf(p->name, sizeof(p->name), "p%d", w->npods);
	p->gpus = sizes[rng_below(&w->g, 6)];
	bool managed = !(on(w, F_UNWATCHED) && rng_pct(&w->g, 25));
	if (apis_pod_create(w->api, p->ns, p->name, p->gpus, managed, NULL, p->uid, sizeof(p->uid)))
		return;
	w->npods++;
	dst_trace(w, "pod %s created (%d GPUs%s)", p->name, p->gpus, managed ? "" : ", no managed label");
}

static struct incarnation *any_replica(struct world *w)
{
	return w->inc[rng_below(&w->g, (uint32_t)w->nslots)];
}

/* The pod as the API server has it now: its JSON text (caller frees), or NULL. */
static char *pod_json(struct world *w, const struct spod *p)
{
	char path[256];
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", p->ns, p->name);
	struct kube_response r;
	kube_response_init(&r);
	long st = apis_handle(w->api, "GET", path, NULL, &r);
	char *out = st == 200 ? strdup(buf_cstr(&r.body)) : NULL;
	kube_response_release(&r);
	return out;
}

/* The bind of pod pi to node on any replica: started now, or (resume false, or by chance) queued. */
static void start_bind(struct world *w, int pi, const char *node, bool resume)
{
	struct spod *p = &w->pods[pi];
	struct incarnation *b = any_replica(w);
	char what[96];
	snprintf(what, sizeof(what), "bind %s to %s on replica %d (try %d)", p->name, node, b->slot, ++p->tries);
	struct task *t = sched_spawn(w, b, bind_fn, what);
	t->pod = pi;
	snprintf(t->body, sizeof(t->body), "{\"PodName\":\"%s\",\"PodNamespace\":\"%s\",\"PodUID\":\"%s\",\"Node\":\"%s\"}",
		 p->name, p->ns, p->uid, node);
	p->st = S_BINDING;
	p->bind = t;
	p->bind_since_ms = w->now_ms;
	/* It may wait in the bind queue (all bind threads busy) while kube-scheduler times out. */
	if (!resume || rng_pct(&w->g, 40)) {
		dst_trace(w, "%s: queued", what);
		return;
	}
	dst_trace(w, "%s: started", what);
	sched_resume(w, t);
}

/* A gang member's filter, on a thread of its own: the gang code reads and writes from it. */
static void filter_fn(struct task *t)
{
	struct http_request req = { "POST", "/filter", t->fbody, strlen(t->fbody), NULL };
	struct http_response resp = { .status = 200 };
	buf_init(&resp.body, 1 << 20);
	extender_filter(t->inc->x, &req, &resp);
	free(t->fbody);
	t->fbody = strdup(buf_cstr(&resp.body));
	buf_release(&resp.body);
}

/* kube-scheduler reads a filter's answer: a node that passed gets the bind, or the pod waits. */
static void filter_done(struct world *w, struct spod *p, int pi, const char *answer_json, int slot, bool dead)
{
	cJSON *reply = answer_json ? cJSON_Parse(answer_json) : NULL;
	const cJSON *passed = cJSON_GetObjectItem(reply, "NodeNames");
	int np = cJSON_GetArraySize(passed);
	const char *err = cJSON_GetStringValue(cJSON_GetObjectItem(reply, "Error"));
	if (dead || !np || (err && err[0])) {
		w->filter_waiting += err && strstr(err, "is being reserved");
		dst_trace(w, "filter of %s on replica %d: no node (%s)", p->name, slot,
			  dead ? "the replica died" : err && err[0] ? err : "none fits");
		p->st = S_PENDING;
		p->bind = NULL;
	} else {
		const char *node = cJSON_GetStringValue(cJSON_GetArrayItem(passed, (int)rng_below(&w->g, (uint32_t)np)));
		dst_trace(w, "filter of %s on replica %d: %s", p->name, slot, node);
		w->filter_passed++;
		start_bind(w, pi, node, false);
	}
	cJSON_Delete(reply);
}

static void schedule_pod(struct world *w, int pi);

/*
 * kube-scheduler's scheduling cycle is one pod at a time: no filter while a
 * gang member's is in flight (the gang code holds its lock across requests).
 */
static bool filter_busy(const struct world *w)
{
	for (const struct task *t = w->tasks; t; t = t->next)
		if (t->filter && !t->inc->dead)
			return true;
	return false;
}

/* kube-scheduler: filter a pending pod on one replica, then bind it (on any replica) to a node that passed. */
static void schedule(struct world *w)
{
	int cand[DST_MAX_PODS], n = 0;
	for (int i = 0; i < w->npods; i++)
		if (w->pods[i].st == S_PENDING)
			cand[n++] = i;
	if (!n || w->ntasks >= MAX_TASKS || filter_busy(w))
		return;
	schedule_pod(w, cand[rng_below(&w->g, (uint32_t)n)]);
}

static void schedule_pod(struct world *w, int pi)
{
	struct spod *p = &w->pods[pi];
	char *json = pod_json(w, p);
	cJSON *pod = json ? cJSON_Parse(json) : NULL;
	free(json);
	const char *node_now = api_str(api_path(pod, "spec"), "nodeName");
	/* Its informer sees the pod gone or bound (with F_RETRY it may lag and place it again). */
	if (!pod || (node_now && node_now[0] && !(on(w, F_RETRY) && rng_pct(&w->g, 30)))) {
		p->st = S_DONE;
		cJSON_Delete(pod);
		return;
	}
	cJSON *args = cJSON_CreateObject();
	cJSON_AddItemToObject(args, "Pod", pod);
	cJSON *names = cJSON_AddArrayToObject(args, "NodeNames");
	for (int k = 0; k < DST_NODES; k++) {
		char node[8];
		snprintf(node, sizeof(node), "n%d", k);
		cJSON_AddItemToArray(names, cJSON_CreateString(node));
	}
	char *body = cJSON_PrintUnformatted(args);
	cJSON_Delete(args);
	struct incarnation *f = any_replica(w);
	if (p->gang[0]) {
		char what[96];
		snprintf(what, sizeof(what), "filter %s on replica %d", p->name, f->slot);
		struct task *t = sched_spawn(w, f, filter_fn, what);
		t->pod = pi;
		t->filter = true;
		t->fbody = body;
		p->st = S_BINDING;
		p->bind = t;
		p->bind_since_ms = w->now_ms;
		dst_trace(w, "%s: started", what);
		sched_resume(w, t);
		return;
	}
	struct http_request req = { "POST", "/filter", body, strlen(body), NULL };
	struct http_response resp = { .status = 200 };
	buf_init(&resp.body, 1 << 20);
	sched_clock(w, f->slot);
	extender_filter(f->x, &req, &resp);
	free(body);
	cJSON *reply = cJSON_Parse(buf_cstr(&resp.body));
	buf_release(&resp.body);
	const cJSON *passed = cJSON_GetObjectItem(reply, "NodeNames");
	int np = cJSON_GetArraySize(passed);
	const char *err = cJSON_GetStringValue(cJSON_GetObjectItem(reply, "Error"));
	if (!np || (err && err[0])) {
		dst_trace(w, "filter of %s on replica %d: no node (%s)", p->name, f->slot, err && err[0] ? err : "none fits");
		cJSON_Delete(reply);
		return;
	}
	char node[16];
	snprintf(node, sizeof(node), "%s", cJSON_GetStringValue(cJSON_GetArrayItem(passed, (int)rng_below(&w->g, (uint32_t)np))));
	cJSON_Delete(reply);
	start_bind(w, pi, node, true);
}

/* kube-scheduler stops waiting for a bind after httpTimeout and places the pod again later. */
static void scheduler_timeouts(struct world *w)
{
	for (int i = 0; i < w->npods; i++) {
		struct spod *p = &w->pods[i];
		if (p->st != S_BINDING || w->now_ms - p->bind_since_ms <= HTTP_TIMEOUT_MS)
			continue;
		if (!on(w, F_RETRY) && !p->bind->inc->dead)
			continue;
		p->st = S_PENDING;
		p->bind = NULL;
		dst_trace(w, "kube-scheduler gave up waiting on the bind of %s", p->name);
	}
}

static void reap(struct world *w, struct incarnation *inc)
{
	if (inc->reaping || w->ntasks >= MAX_TASKS + 3)
		return;
	for (int k = 0; k < W_KINDS; k++)
		if (!apis_watch(w->api, inc->slot, k)->listed)
			return;          /* the reaper waits for the lists */
	char what[64];
	snprintf(what, sizeof(what), "reaper pass on replica %d", inc->slot);
	inc->reaping = true;
	struct task *t = sched_spawn(w, inc, reap_fn, what);
	dst_trace(w, "%s: started", what);
	sched_resume(w, t);
}

/* A random pod the API server has; NULL when none. */
static struct spod *some_pod(struct world *w, bool bound, char *node, size_t size)
{
	static struct apis_pod pods[DST_MAX_PODS];
	int n = apis_pods(w->api, pods, DST_MAX_PODS), c[DST_MAX_PODS], m = 0;
	for (int i = 0; i < n; i++)
		if (!bound || (pods[i].node[0] && !pods[i].finished))
			c[m++] = i;
	if (!m)
		return NULL;
	const struct apis_pod *p = &pods[c[rng_below(&w->g, (uint32_t)m)]];
	snprintf(node, size, "%s", p->node);
	return &w->pods[atoi(p->name + 1)];
}

static void pod_event(struct world *w, uint32_t kind)
{
	char node[16];
	struct spod *p = some_pod(w, kind != 0, node, sizeof(node));
	if (!p)
		return;
	if (kind == 0 && on(w, F_DELETE)) {
		p->touched = true;
		node_pod_stopped(w, node, p->uid);
		apis_pod_delete(w->api, p->ns, p->name);
		dst_trace(w, "pod %s deleted", p->name);
	} else if (kind == 1 && on(w, F_FINISH) && node_runs(w, node, p->uid)) {
		p->touched = true;
		node_pod_stopped(w, node, p->uid);
		apis_pod_finish(w->api, p->ns, p->name);
		dst_trace(w, "pod %s finished", p->name);
	} else if (kind == 3 && on(w, F_LOSE_ENTRY) && w->nlost < 8) {
		if (!apis_ledger_drop(w->api, node, p->uid)) {
			memcpy(w->lost[w->nlost++], p->uid, sizeof(w->lost[0]));   /* (both 64 bytes) */
			dst_trace(w, "the entry of pod %s went from the ledger of %s", p->name, node);
		}
	} else if (kind == 2 && on(w, F_UNLABEL)) {
		p->touched = true;
		p->edited_waiting = p->edited_waiting || !node_runs(w, node, p->uid);
		apis_pod_unlabel(w->api, p->ns, p->name);
		dst_trace(w, "pod %s: managed label removed", p->name);
	}
}

/* A task of inc in state st: the one resumed least often (a waiter must not starve the thread it waits on). */
static struct task *dead_task(struct incarnation *inc, enum task_state st)
{
	struct task *best = NULL;
	for (struct task *t = inc->w->tasks; t; t = t->next)
		if (t->inc == inc && t->st == st && (!best || t->resumes < best->resumes))
			best = t;
	return best;
}

/* The dying replica's requests in flight reach the API server or not; its threads run out. */
static void replica_restart(struct world *w, int slot)
{
	struct incarnation *old = w->inc[slot];
	old->dead = true;
	apis_close_watches(w->api, slot);
	for (int k = 0; k < W_KINDS; k++)
		apis_watch(w->api, slot, k)->listed = false;
	dst_trace(w, "replica %d restarts (state lost)", slot);
	/* (a request first: a thread waiting for its turn waits on one that is in a request) */
	for (struct task *t; (t = dead_task(old, T_REQ)) || (t = dead_task(old, T_NEW)) || (t = dead_task(old, T_YIELD));) {
		if (t->st == T_REQ)
			sched_answer(w, t, rng_pct(&w->g, 50), 0, "the process died");
		sched_resume(w, t);
	}
	old->next_dead = w->dead;
	w->dead = old;
	w->inc[slot] = replica_start(w, slot);
	bury(w);
}

static void api_restart(struct world *w)
{
	apis_close_watches(w->api, -1);
	node_close_watches(w);
	w->api_down_until_ms = w->now_ms + 200 + rng_below(&w->g, 3000);
	dst_trace(w, "API server restarts (down %.1fs; every watch closed)",
		  (double)(w->api_down_until_ms - w->now_ms) / 1000);
	struct task *t;
	while (pick_task(w, T_REQ, &t)) {
		sched_answer(w, t, rng_pct(&w->g, 50), 0, "Connection reset by peer");
		sched_resume(w, t);
	}
}

static void watch_fault(struct world *w)
{
	int slot = (int)rng_below(&w->g, (uint32_t)w->nslots);
	enum watch_kind k = rng_below(&w->g, W_KINDS);
	struct watch *wt = apis_watch(w->api, slot, k);
	if (on(w, F_WATCH_SILENT) && rng_pct(&w->g, 40)) {
		wt->silent_until_ms = w->now_ms + 30000 + rng_below(&w->g, 90000);
		dst_trace(w, "replica %d: watch %d silent until %.1fs", slot, k, (double)wt->silent_until_ms / 1000);
	} else if (on(w, F_WATCH_CLOSE) && wt->open) {
		apis_watch_pop(wt, wt->n);
		wt->open = false;
		wt->closed_ms = w->now_ms;
		dst_trace(w, "replica %d: watch %d closed", slot, k);
	}
}

/* ---- writes carried out late ---- */

/*
 * How long after it was sent a write whose client gave up may still be
 * carried out: the API server's own request timeout. A ?timeout= shorter
 * than that does not bound it: a write etcd has queued (a stalled disk, a
 * slow leader) is carried out when etcd gets to it.
 */
#define LATE_BOUND_MS 60000

/*
 * The client of t, a write, gives up at its deadline while the API server
 * still holds the write (waiting for etcd): it is carried out at a time of
 * the seed's up to LATE_BOUND_MS after it was sent, or never.
 */
static void hold_late(struct world *w, struct task *t)
{
	int64_t from = t->sent_ms + t->timeout_s * 1000, by = t->sent_ms + LATE_BOUND_MS;
	bool applies = rng_pct(&w->g, 70);
	if (applies) {
		w->late = realloc(w->late, (size_t)(w->nlate + 1) * sizeof(*w->late));
		struct late_write *l = &w->late[w->nlate++];
		*l = (struct late_write){ strdup(t->method), strdup(t->path), t->rbody ? strdup(t->rbody) : NULL, "",
					  from + (by > from ? (int64_t)rng_below(&w->g, (uint32_t)(by - from + 1)) : 0) };
		snprintf(l->what, sizeof(l->what), "%s", t->what);
	}
	sched_answer(w, t, false, 0, "Operation timed out");
	dst_trace(w, "[%s] %s %.90s: timed out, %s", t->what, t->method, t->path,
		  applies ? "held by the API server" : "never carried out");
	sched_resume(w, t);
}

static void late_free(struct late_write *l)
{
	free(l->method);
	free(l->path);
	free(l->body);
}

/* Carries out the held writes due by until_ms, the earliest first. */
static void apply_late(struct world *w, int64_t until_ms)
{
	for (;;) {
		int first = -1;
		for (int i = 0; i < w->nlate; i++)
			if (w->late[i].at_ms <= until_ms && (first < 0 || w->late[i].at_ms < w->late[first].at_ms))
				first = i;
		if (first < 0)
			return;
		struct late_write l = w->late[first];
		w->late[first] = w->late[--w->nlate];
		struct kube_response r;
		kube_response_init(&r);
		apis_handle(w->api, l.method, l.path, l.body, &r);
		dst_trace(w, "[%s] %s %.90s: carried out late (%.1fs): %ld", l.what, l.method, l.path,
			  (double)l.at_ms / 1000, r.status);
		kube_response_release(&r);
		late_free(&l);
	}
}

/*
 * A request is answered within its client's timeout: before time passes its
 * deadline, the API server answers it, or (slow) the client gives up, the
 * request applied or not, or (late) a write carried out later.
 */
static int deadlines(struct world *w, int64_t until_ms)
{
	int n = 0;
	for (struct task *t = w->tasks, *next; t; t = next) {
		next = t->next;
		if (t->st != T_REQ || t->sent_ms + t->timeout_s * 1000 > until_ms)
			continue;
		if (on(w, F_LATE) && strcmp(t->method, "GET") && rng_pct(&w->g, 50)) {
			hold_late(w, t);
		} else if (on(w, F_SLOW) && rng_pct(&w->g, 50)) {
			bool apply = rng_pct(&w->g, 50);
			sched_answer(w, t, apply, 0, "Operation timed out");
			dst_trace(w, "[%s] %s %.90s: %s", t->what, t->method, t->path, apply ? "applied, timed out" : "timed out");
			sched_resume(w, t);
		} else {
			answer(w, t, true);
		}
		n++;
		next = w->tasks;     /* (the list changed) */
	}
	return n;
}

/* A closed watch is listed again within the lag bound (the reflector's backoff), once the API server is up. */
static void relist_due(struct world *w, int64_t until_ms)
{
	for (int s = 0; s < w->nslots; s++)
		for (int k = 0; k < W_KINDS; k++) {
			struct watch *wt = apis_watch(w->api, s, k);
			if (!wt->open && wt->closed_ms + LAG_BOUND_MS <= until_ms && w->api_down_until_ms <= until_ms)
				relist(w, s, k);
		}
	for (int i = 0; i < DST_NODES; i++)
		for (int k = 0; k < NW_KINDS; k++) {
			struct watch *wt = apis_node_watch(w->api, i, k);
			if (!wt->open && wt->closed_ms + LAG_BOUND_MS <= until_ms && w->api_down_until_ms <= until_ms)
				node_deliver(w, i, k, 0);
		}
}

/*
 * Threads that can go on (a condition they wait for may hold, a pause is
 * over) run before time passes: on a real machine they wait microseconds,
 * not the seconds a step of the simulation may move the clock.
 */
static void run_yielded(struct world *w)
{
	struct task *t;
	int ids[64], n = 0;
	for (t = w->tasks; t && n < 64; t = t->next)
		if (t->st == T_YIELD)
			ids[n++] = t->id;
	for (int i = 0; i < n; i++)
		for (t = w->tasks; t; t = t->next)
			if (t->id == ids[i] && t->st == T_YIELD) {
				sched_resume(w, t);
				break;
			}
}

static void advance(struct world *w, int64_t ms)
{
	/* (a thread whose request was answered may go on, and send the next) */
	do
		run_yielded(w);
	while (deadlines(w, w->now_ms + ms));
	apply_late(w, w->now_ms + ms);
	relist_due(w, w->now_ms + ms);
	/* Events older than the lag bound come first: only a silent watch holds them longer. */
	if (on(w, F_WATCH_LAG))
		deliver_due(w, LAG_BOUND_MS - ms);
	w->now_ms += ms;
	apis_set_now_ms(w->api, w->now_ms);
}

/* One step: an action chosen from the seed. */
static void step(struct world *w)
{
	uint32_t a = rng_below(&w->g, 112);
	struct task *t;
	if (a < 12) {
		create_pod(w);
	} else if (a < 24) {
		schedule(w);
	} else if (a < 50) {
		if (pick_task(w, T_REQ, &t) && !t->stuck)
			answer(w, t, true);
	} else if (a < 53) {
		if (pick_task(w, T_YIELD, &t))
			sched_resume(w, t);
	} else if (a < 56) {
		if (pick_task(w, T_NEW, &t)) {
			dst_trace(w, "%s: taken from the bind queue", t->what);
			sched_resume(w, t);
		}
	} else if (a < 68) {
		int slot = (int)rng_below(&w->g, (uint32_t)w->nslots);
		enum watch_kind k = rng_below(&w->g, W_KINDS);
		struct watch *wt = apis_watch(w->api, slot, k);
		if (!wt->open)
			relist(w, slot, k);
		else if (!silent(w, wt))
			deliver(w, w->inc[slot], k, 1 + (int)rng_below(&w->g, 3));
	} else if (a < 78) {
		uint32_t r = rng_below(&w->g, 10);
		advance(w, rng_below(&w->g, r < 7 ? 2000 : r < 9 ? 20000 : 90000));
	} else if (a < 84) {
		reap(w, any_replica(w));
	} else if (a < 90) {
		pod_event(w, rng_below(&w->g, 4));
	} else if (a < 92) {
		int n = apis_gc(w->api);
		if (n)
			dst_trace(w, "garbage collector deleted %d Lease(s)", n);
	} else if (a < 95) {
		watch_fault(w);
	} else if (a < 96) {
		if (on(w, F_API_RESTART))
			api_restart(w);
	} else if (a < 97) {
		if (on(w, F_REPLICA_RESTART))
			replica_restart(w, (int)rng_below(&w->g, (uint32_t)w->nslots));
	} else if (a < 98) {
		if (on(w, F_SKEW)) {
			int slot = (int)rng_below(&w->g, (uint32_t)w->nslots);
			w->skew_s[slot] = (int64_t)rng_below(&w->g, 7) - 3;
			dst_trace(w, "replica %d: clock skew %+llds", slot, (long long)w->skew_s[slot]);
		}
	} else if (a < 100) {
		/* (nothing: the share the steps above had before the nodes came) */
	} else if (a < 105) {
		int node = (int)rng_below(&w->g, DST_NODES);
		enum node_watch_kind k = rng_below(&w->g, NW_KINDS);
		node_deliver(w, node, k, 1 + (int)rng_below(&w->g, 3));
	} else if (a < 109) {
		node_start_one(w, (int)rng_below(&w->g, DST_NODES));
	} else if (a < 110) {
		if (on(w, F_KUBELET_RESTART))
			node_kubelet_restart(w, (int)rng_below(&w->g, DST_NODES));
	} else if (a < 111) {
		if (on(w, F_AGENT_RESTART))
			node_agent_restart(w, (int)rng_below(&w->g, DST_NODES));
	}
	if (!on(w, F_WATCH_LAG))
		deliver_due(w, 0);
	scheduler_timeouts(w);
}

/* ---- quiescence ---- */

/* Everything in flight finishes without faults: requests answered, threads run out, events delivered. */
static void drain(struct world *w)
{
	bool started = false;
	for (int rounds = 0; rounds < 100000; rounds++) {
		struct task *t;
		if (pick_task(w, T_REQ, &t)) {
			answer(w, t, false);
			continue;
		}
		if (pick_task(w, T_NEW, &t) || pick_task(w, T_YIELD, &t)) {
			sched_resume(w, t);
			continue;
		}
		bool more = false;
		for (int s = 0; s < w->nslots; s++)
			for (int k = 0; k < W_KINDS; k++) {
				struct watch *wt = apis_watch(w->api, s, k);
				if (!wt->open) {
					relist(w, s, k);
					more = true;
				} else if (wt->n) {
					deliver(w, w->inc[s], k, wt->n);
					more = true;
				}
			}
		for (int i = 0; i < DST_NODES; i++)
			for (int k = NW_KINDS - 1; k >= 0; k--) {     /* (the agent first: a lag of its is a step's) */
				struct watch *wt = apis_node_watch(w->api, i, k);
				if (!wt->open || wt->n) {
					node_deliver(w, i, k, 0);
					more = true;
				}
			}
		/* kubelet's pod workers start what it admitted (once the events are in) */
		if (!more && !started) {
			node_start_all(w);
			started = more = true;
		}
		if (!more)
			break;
	}
	scheduler_timeouts(w);
	bury(w);
}

static void quiesce(struct world *w)
{
	w->faults_on = false;
	w->api_down_until_ms = 0;
	dst_trace(w, "quiescence: faults stop");
	drain(w);
	for (int s = 0; s < w->nslots; s++) {
		reap(w, w->inc[s]);     /* (a replica is ready once a pass ran after its lists) */
		drain(w);
	}
	for (int round = 0; round < 3; round++) {
		/* kube-scheduler goes on placing gang members (a gang waits for all of them), retrying each second */
		for (int tries = 0; tries < 75; tries++) {
			long passed = w->filter_passed, waiting = w->filter_waiting;
			for (int i = 0; i < w->npods; i++)
				if (w->pods[i].st == S_PENDING && w->pods[i].gang[0]) {
					schedule_pod(w, i);
					drain(w);
				}
			/* (no member found a node, and none waits for places being written or taken back: no try would) */
			if (passed == w->filter_passed && waiting == w->filter_waiting)
				break;
			advance(w, 1000);
			drain(w);
		}
		/* (past both timeouts: a reservation unbound, a gang's place untaken) */
		advance(w, ((w->bind_timeout_s > GANG_TIMEOUT_S ? w->bind_timeout_s : GANG_TIMEOUT_S) + 5) * 1000);
		apis_gc(w->api);
		drain(w);
		for (int s = 0; s < w->nslots; s++) {
			reap(w, w->inc[s]);
			drain(w);
		}
	}
}

/* ---- one seed ---- */

static void trace_tail(struct world *w, FILE *f)
{
	long first = w->traced > DST_TRACE ? w->traced - DST_TRACE : 0;
	for (long i = first; i < w->traced; i++)
		fprintf(f, "  %s\n", w->trace[i % DST_TRACE]);
}

static void faults_arg(const struct world *w, char *out, size_t size)
{
	/* (from none: a list without it starts from the default) */
	size_t at = (size_t)snprintf(out, size, "none");
	for (int f = 0; f < F_NFAULTS && at < size; f++)
		if (w->fault[f])
			at += (size_t)snprintf(out + at, size - at, ",+%s", dst_fault_names[f]);
}

static void world_free(struct world *w)
{
	w->faults_on = false;
	/* a failed seed may leave threads parked: they run out with every request failing */
	for (int s = 0; s < w->nslots; s++)
		w->inc[s]->dead = true;
	struct task *t;
	while (pick_task(w, T_REQ, &t) || pick_task(w, T_NEW, &t) || pick_task(w, T_YIELD, &t)) {
		if (t->st == T_REQ)
			sched_answer(w, t, false, 0, "the simulation ended");
		sched_resume(w, t);
	}
	for (int s = 0; s < w->nslots; s++)
		replica_free(w->inc[s]);
	bury(w);
	node_free(w);
	apis_free(w->api);
	for (int i = 0; i < w->nlate; i++)
		late_free(&w->late[i]);
	free(w->late);
}

static struct node_stats totals;   /* over the seeds run */
static long gangs_complete, gangs_none;

static void add_stats(const struct node_stats *s)
{
	totals.admitted += s->admitted;
	totals.admit_failed += s->admit_failed;
	totals.prestart_refused += s->prestart_refused;
	totals.prestart_later += s->prestart_later;
	totals.unverified += s->unverified;
	totals.refused_at_end += s->refused_at_end;
	totals.kubelet_restarts += s->kubelet_restarts;
	totals.agent_restarts += s->agent_restarts;
}

/* 0: the seed passed. */
static int run_seed(uint64_t seed, int steps, const bool fault[F_NFAULTS], int replicas, int bind_timeout_s, bool verbose,
		    const char *argv0)
{
	static struct world w;
	memset(&w, 0, sizeof(w));
	w.seed = seed;
	w.g.s = seed * 0x2545F4914F6CDD1Dull + 1;
	memcpy(w.fault, fault, sizeof(w.fault));
	w.faults_on = true;
	w.verbose = verbose;
	w.steps = steps;
	w.bind_timeout_s = bind_timeout_s;
	w.nslots = replicas ? replicas : 2 + (int)rng_below(&w.g, 2);
	w.wall0_s = 1800000000;
	w.api = apis_new(DST_NS, w.nslots);
	for (int s = 0; s < w.nslots; s++)
		w.inc[s] = replica_start(&w, s);
	node_init(&w);
	int rc = 0;
	for (w.step = 1; w.step <= steps && !rc; w.step++) {
		step(&w);
		rc = w.failure_pending ? -1 : check_step(&w);
	}
	if (!rc) {
		quiesce(&w);
		rc = w.failure_pending ? -1 : check_quiescent(&w);
	}
	if (rc) {
		char faults[512];
		faults_arg(&w, faults, sizeof(faults));
		printf("FAIL seed %llu (%d replicas) at step %ld: %s\n", (unsigned long long)seed, w.nslots,
		       w.step > steps ? -1L : w.step - 1, w.failure);
		printf("trace (last %d steps):\n", DST_TRACE);
		trace_tail(&w, stdout);
		printf("replay: %s --seed %llu --steps %d --bind-timeout %d --faults %s -v\n", argv0, (unsigned long long)seed,
		       steps, bind_timeout_s, faults);
	}
	if (verbose)
		printf("seed %llu: kubelets admitted %ld pods, failed %ld at admission; PreStart refused %ld containers "
		       "(%ld started later, %ld still refused at the end)\n", (unsigned long long)seed, w.node_stats.admitted,
		       w.node_stats.admit_failed, w.node_stats.prestart_refused, w.node_stats.prestart_later,
		       w.node_stats.refused_at_end);
	add_stats(&w.node_stats);
	gangs_complete += w.gangs_complete;
	gangs_none += w.gangs_none;
	world_free(&w);
	return rc;
}

/* ---- command line ---- */

static int parse_faults(const char *s, bool fault[F_NFAULTS])
{
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", s);
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		bool val = *t != '-';
		if (*t == '-' || *t == '+')
			t++;
		if (!strcmp(t, "all") || !strcmp(t, "none")) {
			for (int f = 0; f < F_NFAULTS; f++)
				fault[f] = !strcmp(t, "all");
			continue;
		}
		if (!strcmp(t, "default")) {
			for (int f = 0; f < F_NFAULTS; f++) {
				fault[f] = true;
				for (int d = 0; default_off[d]; d++)
					if (!strcmp(default_off[d], dst_fault_names[f]))
						fault[f] = false;
			}
			continue;
		}
		int f = 0;
		while (f < F_NFAULTS && strcmp(t, dst_fault_names[f]))
			f++;
		if (f == F_NFAULTS) {
			fprintf(stderr, "dst: unknown fault kind '%s'\n", t);
			return -1;
		}
		fault[f] = val;
	}
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: dst [--seed N | --seeds A-B] [--steps N] [--replicas 2|3] [--bind-timeout S] [--faults LIST] [-v]\n"
			"  LIST: default (all but those finding known bugs), all, none, then +kind or -kind, comma-separated\n"
			"  kinds:");
	for (int f = 0; f < F_NFAULTS; f++)
		fprintf(stderr, " %s", dst_fault_names[f]);
	fprintf(stderr, "\n");
}

int main(int argc, char **argv)
{
	uint64_t first = 1, last = 100;
	int steps = 200, replicas = 0, bind_timeout_s = BIND_TIMEOUT_S;
	bool verbose = false, fault[F_NFAULTS];
	parse_faults("default", fault);
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--seed") && v) {
			first = last = strtoull(v, NULL, 10);
			i++;
		} else if (!strcmp(argv[i], "--seeds") && v) {
			if (sscanf(v, "%lu-%lu", &first, &last) != 2 || last < first) {
				usage();
				return 2;
			}
			i++;
		} else if (!strcmp(argv[i], "--steps") && v) {
			steps = atoi(v);
			i++;
		} else if (!strcmp(argv[i], "--replicas") && v) {
			replicas = atoi(v);
			i++;
		} else if (!strcmp(argv[i], "--bind-timeout") && v) {
			bind_timeout_s = atoi(v);
			i++;
		} else if (!strcmp(argv[i], "--faults") && v) {
			if (parse_faults(v, fault))
				return 2;
			i++;
		} else if (!strcmp(argv[i], "-v")) {
			verbose = true;
		} else {
			usage();
			return 2;
		}
	}
	if ((replicas && (replicas < 2 || replicas > DST_SLOTS)) || bind_timeout_s < 3) {
		usage();
		return 2;
	}
	jsonarena_install();
	log_setup(verbose ? LOG_INFO : LOG_ERROR + 1, false);
	sched_init();
	long passed = 0, failed = 0;
	for (uint64_t s = first; s <= last; s++) {
		if (run_seed(s, steps, fault, replicas, bind_timeout_s, verbose, argv[0]))
			failed++;
		else
			passed++;
	}
	clock_real();
	printf("dst: %ld passed, %ld failed (seeds %llu-%llu, %d steps each)\n", passed, failed, (unsigned long long)first,
	       (unsigned long long)last, steps);
	printf("dst: kubelets admitted %ld pods and failed %ld at admission; PreStart refused %ld containers (%ld started "
	       "at a later try, %ld still refused at quiescence, %ld started unverified); %ld kubelet and %ld agent restarts\n",
	       totals.admitted, totals.admit_failed, totals.prestart_refused, totals.prestart_later, totals.refused_at_end,
	       totals.unverified, totals.kubelet_restarts, totals.agent_restarts);
	printf("dst: gangs at quiescence (none of their members deleted, finished or unlabelled): %ld all bound, %ld none\n",
	       gangs_complete, gangs_none);
	return failed ? 1 : 0;
}
