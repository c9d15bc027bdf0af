/*
 * The auditor: watches, on the node, that the promise holds. kubelet's
 * record (PodResources) says which container holds which device; the
 * bindings say which devices the extender gave each pod; the node's ledger
 * Lease says what it reserved. dp_audit (verify.c) compares the three; this
 * file runs it on a thread of its own, every audit_every_s seconds and
 * shortly after each Allocate or PreStart, and reports what lasts: a log
 * line, a Warning Event on the pod, and the /metrics it serves.
 *
 * A problem must be seen for DP_AUDIT_PERSIST_S before it is reported:
 * the three sources are read one after another, and a pod deleted or bound
 * between two reads looks wrong for a moment. Each problem is reported
 * once while it lasts; the Event recorder (include/events.h) also limits
 * each pod's Events and posts them from its own thread, so a node that
 * goes wrong all at once cannot flood the API server, and no audit waits
 * on it. The agent only reads the ledger.
 */
#include "devplugin.h"

#include "api.h"
#include "clock.h"
#include "events.h"
#include "httpd.h"
#include "ledger.h"
#include "log.h"
#include "metrics.h"
#include "strnum.h"

#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_PROBLEMS 256
#define MAX_TRACKED 256
#define KICK_DELAY_MS 1000

enum { PS_VERIFIED, PS_UNVERIFIED, PS_REFUSED, PS_N };
enum { SRC_PODRESOURCES, SRC_LEDGER, SRC_N };

static const char *const problem_reason[DP_NPROB] = { "GPUHeldTwice", "GPUWithoutBinding", "GPUOutsideBinding",
						      "GPUNotInLedger" };

struct tracked {
	struct dp_problem p;
	int64_t first;               /* wall seconds when first seen */
	bool reported, present;
};

struct dp_auditor {
	struct dp_config cfg;
	struct kube_client *kube;
	struct events *events;
	struct dp_pods *pods;
	pthread_t thread;
	struct httpd *httpd;

	pthread_mutex_t mu;          /* guards the block below */
	pthread_cond_t cv;
	bool stop;
	int64_t kick_at;             /* monotonic ms of a pending early audit; 0 none */
	struct dp_inventory *inv;

	/* the auditor thread's own */
	struct tracked *t;
	int nt;
	bool failing[SRC_N];

	/* metrics: written by the auditor and the server thread, read by /metrics */
	atomic_uint_fast64_t now[DP_NPROB], found[DP_NPROB], prestart[PS_N], audits, errors[SRC_N];
	atomic_int_fast64_t last_audit;
};

/* ---- one audit -------------------------------------------------------------------- */

/* The node's ledger into l: true when read (a node without one has an empty ledger). */
static bool read_ledger(struct dp_auditor *a, struct ledger *l, char *err, size_t errlen)
{
	char name[LEDGER_NAME_MAX], path[600];
	ledger_lease_name(a->cfg.node, name, sizeof(name));
	snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", a->cfg.ledger_ns, name);
	ledger_init(l, a->cfg.node);
	if (!a->kube) {
		snprintf(err, errlen, "no API server");
		return false;
	}
	struct kube_response r;
	kube_response_init(&r);
	bool ok = false;
	if (kube_request(a->kube, "GET", path, NULL, NULL, 10, &r, err, errlen)) {
		/* err says why */
	} else if (r.status == 404) {
		ok = true;
	} else if (r.status != 200) {
		char m[200];
		snprintf(err, errlen, "reading %s/%s: HTTP %ld: %s", a->cfg.ledger_ns, name, r.status,
			 kube_status_message(&r, m, sizeof(m)));
	} else {
		cJSON *obj = cJSON_ParseWithLength(r.body.data, r.body.len);
		ok = obj && !ledger_decode(obj, l, err, errlen);
		if (!obj)
			snprintf(err, errlen, "reading %s/%s: the answer is not JSON", a->cfg.ledger_ns, name);
		cJSON_Delete(obj);
	}
	kube_response_release(&r);
	return ok;
}

/* One log line per failing streak of a source. */
static void source_state(struct dp_auditor *a, int src, bool ok, const char *err)
{
	static const char *const names[SRC_N] = { "kubelet's PodResources", "the node's ledger" };
	if (!ok) {
		atomic_fetch_add(&a->errors[src], 1);
		if (!a->failing[src])
			log_warn("the GPU allocation audit cannot read a source", "source=\"%s\" error=\"%s\"", names[src],
				 LOG_Q(err));
	} else if (a->failing[src]) {
		log_info("the GPU allocation audit reads its source again", "source=\"%s\"", names[src]);
	}
	a->failing[src] = !ok;
}

/* A Warning Event on the pod (queued: the recorder reads the pod's uid, and skips a pod that is gone). */
static void post_event(struct dp_auditor *a, const char *ns, const char *pod, const char *reason, const char *msg)
{
	if (ns[0] && pod[0])
		events_pod(a->events, ns, pod, NULL, EVENTS_WARNING, reason, 0, "%s", msg);
}

static void report(struct dp_auditor *a, const struct dp_problem *p)
{
	atomic_fetch_add(&a->found[p->kind], 1);
	log_error("GPU allocation problem", "kind=%s pod=%s/%s message=\"%s\"", dp_problem_name(p->kind), p->ns, p->pod,
		  LOG_Q(p->msg));
	post_event(a, p->ns, p->pod, problem_reason[p->kind], p->msg);
	if (p->other[0])
		post_event(a, p->other_ns, p->other, problem_reason[p->kind], p->msg);
}

/* Keeps the problems seen, reports those that lasted, forgets those gone. */
static void track(struct dp_auditor *a, const struct dp_problem *probs, int n, int64_t now)
{
	for (int i = 0; i < a->nt; i++)
		a->t[i].present = false;
	for (int i = 0; i < n; i++) {
		int k = 0;
		while (k < a->nt && strcmp(a->t[k].p.key, probs[i].key))
			k++;
		if (k == a->nt) {
			if (a->nt == MAX_TRACKED)
				continue;            /* counted by the next audit, once others are gone */
			a->t[a->nt].p = probs[i];
			a->t[a->nt].first = now;
			a->t[a->nt++].reported = false;
		}
		a->t[k].present = true;
	}
	uint64_t count[DP_NPROB] = { 0 };
	for (int i = a->nt - 1; i >= 0; i--) {
		struct tracked *t = &a->t[i];
		if (!t->present) {
			if (t->reported)
				log_info("GPU allocation problem gone", "kind=%s pod=%s/%s", dp_problem_name(t->p.kind),
					 t->p.ns, t->p.pod);
			a->t[i] = a->t[--a->nt];
			continue;
		}
		if (!t->reported && now - t->first >= DP_AUDIT_PERSIST_S) {
			report(a, &t->p);
			t->reported = true;
		}
		if (t->reported)
			count[t->p.kind]++;
	}
	for (int k = 0; k < DP_NPROB; k++)
		atomic_store(&a->now[k], count[k]);
}

static void audit_once(struct dp_auditor *a)
{
	pthread_mutex_lock(&a->mu);
	struct dp_inventory *inv = a->inv ? malloc(sizeof(*inv)) : NULL;
	if (inv)
		*inv = *a->inv;
	pthread_mutex_unlock(&a->mu);
	struct dp_record rec;
	dp_record_init(&rec);
	struct dp_problem *probs = malloc(MAX_PROBLEMS * sizeof(*probs));
	char err[512];
	if (!inv || !probs || !dp_pods_ready(a->pods))
		goto out;
	bool ok = !dp_record_read(a->cfg.podresources_socket, &rec, err, sizeof(err));
	source_state(a, SRC_PODRESOURCES, ok, err);
	if (!ok)
		goto out;
	int npods;
	struct dp_pod *pods = dp_pods_copy(a->pods, &npods);
	struct ledger l;
	bool have = read_ledger(a, &l, err, sizeof(err));
	source_state(a, SRC_LEDGER, have, err);
	int n = dp_audit(inv, &rec, pods, npods, have ? &l : NULL, probs, MAX_PROBLEMS);
	track(a, probs, n < MAX_PROBLEMS ? n : MAX_PROBLEMS, clock_wall_s());
	if (have)
		ledger_release(&l);
	free(pods);
	atomic_fetch_add(&a->audits, 1);
	atomic_store(&a->last_audit, clock_wall_s());
out:
	dp_record_release(&rec);
	free(probs);
	free(inv);
}

static void *auditor_main(void *arg)
{
	struct dp_auditor *a = arg;
	int64_t next = clock_mono_ms() + KICK_DELAY_MS;
	pthread_mutex_lock(&a->mu);
	while (!a->stop) {
		int64_t now = clock_mono_ms();
		if (a->kick_at && a->kick_at < next)
			next = a->kick_at;
		if (now < next) {
			struct timespec until = clock_deadline_ms(next - now);
			pthread_cond_timedwait(&a->cv, &a->mu, &until);
			continue;
		}
		a->kick_at = 0;
		pthread_mutex_unlock(&a->mu);
		audit_once(a);
		pthread_mutex_lock(&a->mu);
		next = clock_mono_ms() + (int64_t)a->cfg.audit_every_s * 1000;
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

/* ---- metrics ------------------------------------------------------------------------ */

/* Where dp_auditor_metrics finds a family's values (metric_family.source, .index an offset in the auditor). */
enum { AT_ARRAY, AT_ONE, AT_TIME, AT_EVENTS };
#define AT(field, src) .source = src, .index = (int)offsetof(struct dp_auditor, field)

/* The agent's metrics: the one table its /metrics and docs/metrics.md come from. */
static const struct metric_family families[] = {
	{ "gpu_agent_allocation_problems", "gauge", "kind", { "held_twice", "unbound", "outside_binding",
							       "not_in_ledger" },
	  "Problems the audit sees now (lasting 10 s or more), by kind.",
	  "`held_twice`: a GPU two pods hold; `unbound`: held without a binding; `outside_binding`: held outside "
	  "its pod's binding; `not_in_ledger`: bound but not reserved in the node's ledger.", AT(now, AT_ARRAY) },
	{ "gpu_agent_allocation_problems_found_total", "counter", "kind", { "held_twice", "unbound",
									   "outside_binding", "not_in_ledger" },
	  "Problems reported (log line and Event), by kind.", NULL, AT(found, AT_ARRAY) },
	{ "gpu_agent_prestart_checks_total", "counter", "result", { "verified", "unverified", "refused" },
	  "PreStartContainer checks of a container's devices against its pod's binding, by result.",
	  "`unverified`: an init container's, or PodResources unreadable; `refused`: the container was given "
	  "another pod's devices and does not start.", AT(prestart, AT_ARRAY) },
	{ "gpu_agent_audits_total", "counter", NULL, { NULL }, "Audits completed.", NULL, AT(audits, AT_ONE) },
	{ "gpu_agent_audit_errors_total", "counter", "source", { "podresources", "ledger" },
	  "Audits that could not read a source.", "`podresources`: kubelet's PodResources API; `ledger`: the node's "
	  "ledger Lease.", AT(errors, AT_ARRAY) },
	{ "gpu_agent_audit_last_timestamp_seconds", "gauge", NULL, { NULL }, "Unix time of the last completed audit.",
	  NULL, AT(last_audit, AT_TIME) },
	{ "gpu_agent_events_total", "counter", "result", { EVENTS_RESULT_NAMES },
	  "Events the agent posted (allocation problems, device health), by result.", EVENTS_RESULT_MEANING,
	  AT(events, AT_EVENTS) },
};
#define NFAMILIES ((int)(sizeof(families) / sizeof(families[0])))

const struct metric_family *dp_auditor_families(int *n)
{
	*n = NFAMILIES;
	return families;
}

void dp_auditor_reference(FILE *out)
{
	metrics_reference(out, families, NFAMILIES);
}

void dp_auditor_metrics(struct dp_auditor *a, struct buf *out)
{
	for (int i = 0; i < NFAMILIES; i++) {
		const struct metric_family *f = &families[i];
		const char *at = (const char *)a + f->index;
		metrics_header(out, f);
		if (f->source == AT_TIME)
			buf_printf(out, "%s %lld\n", f->name, (long long)atomic_load((const atomic_int_fast64_t *)at));
		else if (f->source == AT_ONE)
			buf_printf(out, "%s %llu\n", f->name,
				   (unsigned long long)atomic_load((const atomic_uint_fast64_t *)at));
		for (int k = 0; f->source == AT_ARRAY && k < 8 && f->values[k]; k++)
			buf_printf(out, "%s{%s=\"%s\"} %llu\n", f->name, f->labels, f->values[k],
				   (unsigned long long)atomic_load((const atomic_uint_fast64_t *)at + k));
		uint64_t ev[EVENTS_NRESULT];
		events_counts(a->events, ev);
		for (int k = 0; f->source == AT_EVENTS && k < EVENTS_NRESULT; k++)
			buf_printf(out, "%s{%s=\"%s\"} %llu\n", f->name, f->labels, f->values[k], (unsigned long long)ev[k]);
	}
}

static void on_metrics(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)req;
	dp_auditor_metrics(ctx, &resp->body);
	resp->content_type = "text/plain; version=0.0.4";
}

static struct httpd *serve_metrics(struct dp_auditor *a, char *err, size_t errlen)
{
	char host[128];
	snprintf(host, sizeof(host), "%s", a->cfg.metrics_listen);
	char *colon = strrchr(host, ':');
	int port = 0;
	if (!colon || !strnum_int(colon + 1, 1, 65535, &port)) {
		snprintf(err, errlen, "--metrics-listen wants host:port, not '%s'", a->cfg.metrics_listen);
		return NULL;
	}
	*colon = '\0';
	struct http_route routes[] = { { "GET", "/metrics", on_metrics, a, VERB_OTHER, false, NULL, false } };
	struct httpd_config hc = { .host = host[0] ? host : "0.0.0.0", .port = port, .url_prefix = "",
				   .max_body = 4096, .threads = 1, .max_connections = 32, .max_per_address = 8 };
	struct httpd *h = httpd_start(&hc, routes, 1, err, errlen);
	if (h)
		log_info("serving the agent's /metrics", "address=%s:%d", hc.host, httpd_port(h));
	return h;
}

/* ---- the interface ------------------------------------------------------------------ */

struct dp_auditor *dp_auditor_start(const struct dp_config *cfg, struct kube_client *kube, struct events *events,
				    struct dp_pods *pods, char *err, size_t errlen)
{
	struct dp_auditor *a = calloc(1, sizeof(*a));
	if (!a) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	a->t = calloc(MAX_TRACKED, sizeof(*a->t));
	a->cfg = *cfg;
	if (a->cfg.audit_every_s <= 0)
		a->cfg.audit_every_s = 30;
	a->kube = kube;
	a->events = events;
	a->pods = pods;
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	if (!a->t || (cfg->metrics_listen[0] && !(a->httpd = serve_metrics(a, err, errlen))))
		goto fail;
	if (pthread_create(&a->thread, NULL, auditor_main, a)) {
		snprintf(err, errlen, "cannot start a thread");
		goto fail;
	}
	return a;
fail:
	if (!a->t)
		snprintf(err, errlen, "out of memory");
	if (a->httpd)
		httpd_stop(a->httpd);
	pthread_cond_destroy(&a->cv);
	pthread_mutex_destroy(&a->mu);
	free(a->t);
	free(a);
	return NULL;
}

void dp_auditor_inventory(struct dp_auditor *a, const struct dp_inventory *inv)
{
	struct dp_inventory *copy = malloc(sizeof(*copy));
	if (!copy)
		return;                 /* the previous one stays */
	*copy = *inv;
	pthread_mutex_lock(&a->mu);
	free(a->inv);
	a->inv = copy;
	pthread_mutex_unlock(&a->mu);
}

void dp_auditor_kick(struct dp_auditor *a)
{
	pthread_mutex_lock(&a->mu);
	if (!a->kick_at)
		a->kick_at = clock_mono_ms() + KICK_DELAY_MS;
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

void dp_auditor_prestart(struct dp_auditor *a, enum dp_verdict v, const char *ns, const char *pod,
			 const char *other_ns, const char *other, const char *msg)
{
	atomic_fetch_add(&a->prestart[v == DP_REFUSED ? PS_REFUSED : v == DP_UNVERIFIED ? PS_UNVERIFIED : PS_VERIFIED],
			 1);
	if (v == DP_REFUSED) {
		post_event(a, ns ? ns : "", pod ? pod : "", "GPUPreStartRefused", msg);
		post_event(a, other_ns ? other_ns : "", other ? other : "", "GPUPreStartRefused", msg);
	}
	pthread_mutex_lock(&a->mu);
	if (!a->kick_at)
		a->kick_at = clock_mono_ms() + KICK_DELAY_MS;
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

void dp_auditor_stop(struct dp_auditor *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->mu);
	a->stop = true;
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
	pthread_join(a->thread, NULL);
	if (a->httpd)
		httpd_stop(a->httpd);
	pthread_cond_destroy(&a->cv);
	pthread_mutex_destroy(&a->mu);
	free(a->inv);
	free(a->t);
	free(a);
}
