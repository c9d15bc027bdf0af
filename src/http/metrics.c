#include "metrics.h"

#include <stddef.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* Latency buckets in seconds: 50 us to 5 s, what the 5 s httpTimeout allows. */
static const double buckets[] = { 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
				  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5 };
#define NBUCKETS (sizeof(buckets) / sizeof(buckets[0]))
#define NVALUES 8

struct verb_stats {
	_Atomic uint64_t count;
	_Atomic uint64_t errors;            /* status >= 400 */
	_Atomic uint64_t bucket[NBUCKETS];  /* not cumulative; summed when rendered */
	_Atomic uint64_t sum_ns;
};

static struct verb_stats verbs[VERB_COUNT];
static _Atomic uint64_t counts[M_COUNTER_COUNT][NVALUES];
static _Atomic int64_t newest_event[RES_COUNT];

const char *const metrics_gpu_state_names[MGPU_STATES] = { "whole", "shared", "free", "unhealthy" };

/* Where metrics_render finds a family's values (metric_family.source). */
enum { SRC_REQUESTS, SRC_ERRORS, SRC_DURATION, SRC_COUNTER, SRC_EVENT_AGE, SRC_GAUGE, SRC_NODE, SRC_EVENTS, SRC_NUDGES };

#define VERBS { "filter", "prioritize", "bind", "preempt", "mutate", "other" }
#define RESOURCES { "nodes", "gpunodestatuses", "gpuclaims", "pods", "leases" }
#define GAUGE(field) .source = SRC_GAUGE, .index = (int)offsetof(struct metrics_gauges, field)

/* The extender's metrics: the one table /metrics and docs/metrics.md come from. */
static const struct metric_family families[] = {
	{ "gpu_extender_requests_total", "counter", "verb", VERBS, "Requests served, by verb.",
	  "`mutate` is the admission webhook, `other` the probes and /metrics.", SRC_REQUESTS, 0 },
	{ "gpu_extender_request_errors_total", "counter", "verb", VERBS,
	  "Requests answered with an HTTP error status.", "401: a caller without a certificate of the client CA.",
	  SRC_ERRORS, 0 },
	{ "gpu_extender_request_duration_seconds", "histogram", "verb", VERBS, "Time to answer a request.",
	  "Buckets (`le`) from 50 us to 5 s, kube-scheduler's default `httpTimeout`.", SRC_DURATION, 0 },
	{ "gpu_extender_binds_total", "counter", "result", { "ok", "no_fit", "conflict", "error" },
	  "Bind requests by result.",
	  "`no_fit`: the node no longer fits the pod; `conflict`: the reservation lost to another writer; "
	  "`error`: the API server refused or could not be reached.", SRC_COUNTER, M_BINDS },
	{ "gpu_extender_reservation_conflicts_total", "counter", "resource", { "lease" },
	  "Reservation writes that lost a race (HTTP 409) and were retried.", NULL, SRC_COUNTER, M_RESERVE_CONFLICTS },
	{ "gpu_extender_watch_restarts_total", "counter", "resource", RESOURCES, "Watches re-opened.",
	  "A watch the API server ended or that broke; each re-open resumes at the last version seen.", SRC_COUNTER,
	  M_WATCH_RESTARTS },
	{ "gpu_extender_relists_total", "counter", "resource", RESOURCES, "Full lists, the first one included.",
	  "More than one per resource: a watch's version expired (HTTP 410) and the cache was listed again.",
	  SRC_COUNTER, M_RELISTS },
	{ "gpu_extender_watch_events_total", "counter", "resource", RESOURCES, "Watch events applied to the cache.",
	  NULL, SRC_COUNTER, M_WATCH_EVENTS },
	{ "gpu_extender_reservations_released_total", "counter", "reason",
	  { "pod_gone", "pod_finished", "bind_timeout", "bind_failed", "gang_timeout", "pod_elsewhere" },
	  "Reservations released, by reason.",
	  "The reaper's releases: the pod deleted, finished, never bound in time, its bind failed, its gang timed "
	  "out, or bound to another node.", SRC_COUNTER, M_RELEASED },
	{ "gpu_extender_gang_reservations_total", "counter", "result",
	  { "reserved", "no_fit", "waiting", "conflict", "rolled_back" },
	  "Attempts to reserve a whole gang's places, by result.",
	  "`waiting`: members still missing; `rolled_back`: a member's reservation failed and the others were "
	  "released.", SRC_COUNTER, M_GANGS },
	{ "gpu_extender_connections_refused_total", "counter", "reason", { "connection_limit" },
	  "Connections closed at once, at maxConnections or maxConnectionsPerAddress.", NULL, SRC_COUNTER,
	  M_HTTP_REFUSED },
	{ "gpu_extender_filter_waits_total", "counter", "reason", { "binds_queued" },
	  "GPU pods' filters that waited because binds queued (bindQueueLimitMs).",
	  "kube-scheduler's cycle held back while the oldest bind in flight had waited over the limit: the API "
	  "server takes binds slower than the scheduler places pods.", SRC_COUNTER, M_FILTER_WAITS },
	{ "gpu_extender_filter_choices_total", "counter", "result", { "bound", "elsewhere", "expired", "uncounted" },
	  "Nodes a filter passed alone (filterKeepsBest 1), whose devices count as the pod's until its bind arrives, "
	  "by what became of them.",
	  "`bound`: the bind came for that node; `elsewhere`: the pod was filtered again or bound elsewhere; "
	  "`expired`: no bind within 5 s; `uncounted`: the node filled between the filter's rating and its count. "
	  "The last two let the next pods' filters send one pod too many to a node, which its bind refuses.",
	  SRC_COUNTER, M_FILTER_CHOICES },
	{ "gpu_extender_prioritize_ratings_total", "counter", "source", { "filter", "made" },
	  "Nodes prioritize rated, by where the rating came from: the pod's filter (its node unchanged since), "
	  "or made.", NULL, SRC_COUNTER, M_RATINGS },
	{ "gpu_extender_newest_event_age_seconds", "gauge", "resource", RESOURCES,
	  "Seconds since the newest watch event of a resource (-1: none yet).",
	  "GpuNodeStatuses change at least every 5 minutes (each agent's resync); far more: the agents or the "
	  "watch are stuck.", SRC_EVENT_AGE, 0 },
	{ "gpu_extender_cache_nodes", "gauge", NULL, { NULL }, "Nodes in the capacity cache.", NULL,
	  GAUGE(cache_nodes) },
	{ "gpu_extender_cache_devices", "gauge", NULL, { NULL }, "GPU devices in the capacity cache.", NULL,
	  GAUGE(cache_devices) },
	{ "gpu_extender_cache_allocations", "gauge", NULL, { NULL }, "Pod allocations recorded in the cache.", NULL,
	  GAUGE(cache_allocations) },
	{ "gpu_extender_cache_gpuclaims", "gauge", NULL, { NULL }, "GpuClaim objects in the cache.", NULL,
	  GAUGE(cache_gpuclaims) },
	{ "gpu_extender_ready", "gauge", NULL, { NULL }, "1 when the extender is ready to serve.",
	  "0 while the inventory or the first lists are not loaded, or the reservations are being rebuilt.", GAUGE(ready) },
	{ "gpu_extender_node_gpus", "gauge", "node, model, state", { NULL },
	  "GPUs of a node by model and state, reservations included.",
	  "`state`: `whole` (held by one pod, or by pods the extender does not track), `shared` (held by shares), `free`, `unhealthy`; nodes with "
	  "no GPUs have no series.", SRC_NODE, MNODE_GPUS },
	{ "gpu_extender_node_fragmentation_ratio", "gauge", "node", { NULL },
	  "Idle GPU compute of a node that only shares can use (on devices a share holds), over all its idle compute.",
	  "0: every idle GPU is whole; 1: every idle bit of GPU is a remnant beside a share.", SRC_NODE,
	  MNODE_FRAGMENTATION },
	{ "gpu_extender_node_summary_writes_total", "counter", "result", { "written", "gone", "failed" },
	  "Writes of a node's GPU counts into its GpuNodeStatus (status.allocation, the columns of kubectl get gns), "
	  "by result.",
	  "At most one a node a pass (`nodeSummary.intervalSeconds`) and only when its counts changed; none per bind. "
	  "`gone`: the GpuNodeStatus was deleted meanwhile; `failed`: written again at the next pass.", SRC_COUNTER,
	  M_NODE_SUMMARY_WRITES },
	{ "gpu_extender_node_summary_pending", "gauge", NULL, { NULL },
	  "Nodes whose GpuNodeStatus counts are behind and wait for a write.",
	  "Above 0 for more than a pass: more nodes change each pass than `nodeSummary.writesPerSecond` allows, or "
	  "the writes fail.", GAUGE(node_summary_pending) },
	{ "gpu_extender_heap_in_use_bytes", "gauge", NULL, { NULL }, "Bytes malloc has handed out and not had back.",
	  "The rest of the RSS is malloc's free memory (below), the threads' stacks and the mapped files.",
	  GAUGE(heap_in_use) },
	{ "gpu_extender_heap_free_bytes", "gauge", NULL, { NULL }, "Bytes free in malloc's arenas, kept for reuse.",
	  "Given back to the system (a trim) when no request is in flight, and at least once a minute.",
	  GAUGE(heap_free) },
	/* the values are events.h's EVENTS_RESULT_NAMES, in order (test_events checks) */
	{ "gpu_extender_events_total", "counter", "result", { "sent", "patched", "failed", "dropped", "limited", "gone" },
	  "Events the extender posted (bindings, releases, gangs, claims that fit nowhere), by result.",
	  "`sent`: a new Event; `patched`: a repeat counted on one; `dropped`: the queue was full; `limited`: past "
	  "the rate limits; `gone`: its object no longer exists.", SRC_EVENTS, 0 },
	/* the values are nudge.h's NUDGE_RESULT_NAMES, in order (test_nudge checks) */
	{ "gpu_extender_nudges_total", "counter", "result", { "sent", "failed", "limited", "gone" },
	  "Waiting GPU pods annotated so that kube-scheduler tries them again, after GPUs they fit freed, by result.",
	  "`sent`: the pod annotated; `failed`: the API server refused or could not be reached; `limited`: held "
	  "back by `nudge.perSecond` (tried again a moment later); `gone`: the pod no longer exists.",
	  SRC_NUDGES, 0 },
};
#define NFAMILIES ((int)(sizeof(families) / sizeof(families[0])))

const struct metric_family *metrics_families(int *n)
{
	*n = NFAMILIES;
	return families;
}

void metrics_request(enum metric_verb v, int status, double seconds)
{
	struct verb_stats *s = &verbs[(unsigned)v < VERB_COUNT ? v : VERB_OTHER];
	atomic_fetch_add_explicit(&s->count, 1, memory_order_relaxed);
	if (status >= 400)
		atomic_fetch_add_explicit(&s->errors, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->sum_ns, (uint64_t)(seconds * 1e9), memory_order_relaxed);
	for (size_t i = 0; i < NBUCKETS; i++) {
		if (seconds <= buckets[i]) {
			atomic_fetch_add_explicit(&s->bucket[i], 1, memory_order_relaxed);
			break;
		}
	}
}

void metrics_add(enum metric_counter m, int label, uint64_t n)
{
	if ((unsigned)m < M_COUNTER_COUNT && label >= 0 && label < NVALUES)
		atomic_fetch_add_explicit(&counts[m][label], n, memory_order_relaxed);
}

void metrics_inc(enum metric_counter m, int label)
{
	metrics_add(m, label, 1);
}

void metrics_event_seen(int resource)
{
	if (resource >= 0 && resource < RES_COUNT)
		atomic_store(&newest_event[resource], (int64_t)time(NULL));
}

void metrics_header(struct buf *out, const struct metric_family *f)
{
	buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, f->type);
}

void metrics_quote(struct buf *out, const char *s)
{
	/* Runs without an escape go in at once: a page at 65,000 nodes quotes 325,000 names. */
	buf_addc(out, '"');
	for (;;) {
		size_t run = strcspn(s, "\\\"\n");
		buf_add(out, s, run);
		s += run;
		if (!*s)
			break;
		buf_adds(out, *s == '\n' ? "\\n" : *s == '"' ? "\\\"" : "\\\\");
		s++;
	}
	buf_addc(out, '"');
}

/* One series of a family with one label: name{label="value"} v. */
static void series(struct buf *out, const struct metric_family *f, int i, long long v)
{
	buf_printf(out, "%s{%s=\"%s\"} %lld\n", f->name, f->labels, f->values[i], v);
}

static void histogram(struct buf *out, const struct metric_family *f)
{
	for (int v = 0; v < VERB_COUNT; v++) {
		uint64_t cum = 0;
		for (size_t i = 0; i < NBUCKETS; i++) {
			cum += atomic_load(&verbs[v].bucket[i]);
			buf_printf(out, "%s_bucket{verb=\"%s\",le=\"%g\"} %llu\n", f->name, f->values[v], buckets[i],
				   (unsigned long long)cum);
		}
		uint64_t count = atomic_load(&verbs[v].count);
		buf_printf(out, "%s_bucket{verb=\"%s\",le=\"+Inf\"} %llu\n", f->name, f->values[v],
			   (unsigned long long)count);
		buf_printf(out, "%s_sum{verb=\"%s\"} %.9f\n", f->name, f->values[v],
			   (double)atomic_load(&verbs[v].sum_ns) / 1e9);
		buf_printf(out, "%s_count{verb=\"%s\"} %llu\n", f->name, f->values[v], (unsigned long long)count);
	}
}

static void family(struct buf *out, const struct metric_family *f, const struct metrics_gauges *g, int64_t now)
{
	int n = 0;
	while (n < NVALUES && f->values[n])
		n++;
	switch (f->source) {
	case SRC_REQUESTS:
	case SRC_ERRORS:
		for (int v = 0; v < VERB_COUNT; v++)
			series(out, f, v, (long long)atomic_load(f->source == SRC_REQUESTS ? &verbs[v].count
											    : &verbs[v].errors));
		break;
	case SRC_DURATION:
		histogram(out, f);
		break;
	case SRC_COUNTER:
		for (int i = 0; i < n; i++)
			series(out, f, i, (long long)atomic_load(&counts[f->index][i]));
		break;
	case SRC_EVENT_AGE:
		for (int r = 0; r < n && r < RES_COUNT; r++) {
			int64_t t = atomic_load(&newest_event[r]);
			series(out, f, r, (long long)(t ? now - t : -1));
		}
		break;
	case SRC_GAUGE:
		buf_printf(out, "%s %.17g\n", f->name, *(const double *)((const char *)g + f->index));
		break;
	case SRC_NODE:
		break;   /* a part at a time (metrics_render_part) */
	case SRC_EVENTS:
	case SRC_NUDGES:
		for (int i = 0; i < n; i++)
			series(out, f, i, (long long)(f->source == SRC_EVENTS ? g->events[i] : g->nudges[i]));
		break;
	}
}

bool metrics_render_part(struct buf *out, const struct metrics_gauges *g, struct metrics_cursor *c)
{
	if (c->family >= NFAMILIES)
		return false;
	const struct metric_family *f = &families[c->family];
	if (!c->begun)
		metrics_header(out, f);
	c->begun = true;
	bool more = false;
	if (f->source == SRC_NODE)
		more = g->per_node && g->per_node(g->ctx, f, &c->node, out);
	else
		family(out, f, g, (int64_t)time(NULL));
	if (!more)
		*c = (struct metrics_cursor){ .family = c->family + 1 };
	return true;
}

void metrics_render(struct buf *out, const struct metrics_gauges *g)
{
	struct metrics_cursor c = { 0 };
	while (metrics_render_part(out, g, &c))
		;
}

void metrics_reference(FILE *out, const struct metric_family *f, int n)
{
	fputs("| metric | type | labels | meaning |\n|---|---|---|---|\n", out);
	for (int i = 0; i < n; i++) {
		fprintf(out, "| `%s` | %s | ", f[i].name, f[i].type);
		if (!f[i].labels)
			fputs("none", out);
		for (const char *p = f[i].labels; p && *p;) {
			size_t len = strcspn(p, ", ");
			fprintf(out, "%s`%.*s`", p == f[i].labels ? "" : ", ", (int)len, p);
			p += len + strspn(p + len, ", ");
		}
		for (int k = 0; k < NVALUES && f[i].values[k]; k++)
			fprintf(out, "%s`%s`", k ? ", " : ": ", f[i].values[k]);
		fprintf(out, " | %s%s%s |\n", f[i].help, f[i].more ? " " : "", f[i].more ? f[i].more : "");
	}
}
