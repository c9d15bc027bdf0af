#include "metrics.h"

#include <stdatomic.h>
#include <time.h>

/* Latency buckets in seconds: 50 us to 5 s, what the 5 s httpTimeout allows. */
static const double buckets[] = { 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
				  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5 };
#define NBUCKETS (sizeof(buckets) / sizeof(buckets[0]))

struct verb_stats {
	_Atomic uint64_t count;
	_Atomic uint64_t errors;            /* status >= 400 */
	_Atomic uint64_t bucket[NBUCKETS];  /* not cumulative; summed when rendered */
	_Atomic uint64_t sum_ns;
};

static struct verb_stats verbs[VERB_COUNT];

static const char *const verb_names[VERB_COUNT] = {
	"filter", "prioritize", "bind", "preempt", "mutate", "other"
};

struct counter_family {
	const char *name, *help, *label;
	const char *values[6];
	_Atomic uint64_t v[6];
};

static struct counter_family counters[M_COUNTER_COUNT] = {
	[M_BINDS] = { "gpu_extender_binds_total", "Bind requests by result.", "result",
		      { "ok", "no_fit", "conflict", "error" }, { 0 } },
	[M_RESERVE_CONFLICTS] = { "gpu_extender_reservation_conflicts_total",
				  "Reservation writes that lost a race (HTTP 409) and were retried.", "resource",
				  { "lease" }, { 0 } },
	[M_WATCH_RESTARTS] = { "gpu_extender_watch_restarts_total", "Watches re-opened.", "resource",
			       { "nodes", "gpunodestatuses", "gpuclaims", "pods", "leases" }, { 0 } },
	[M_RELISTS] = { "gpu_extender_relists_total", "Full lists, the first one included.", "resource",
			{ "nodes", "gpunodestatuses", "gpuclaims", "pods", "leases" }, { 0 } },
	[M_WATCH_EVENTS] = { "gpu_extender_watch_events_total", "Watch events applied to the cache.", "resource",
			     { "nodes", "gpunodestatuses", "gpuclaims", "pods", "leases" }, { 0 } },
	[M_RELEASED] = { "gpu_extender_reservations_released_total", "Reservations released, by reason.", "reason",
			 { "pod_gone", "pod_finished", "bind_timeout", "bind_failed", "gang_timeout", "pod_elsewhere" }, { 0 } },
	[M_GANGS] = { "gpu_extender_gang_reservations_total",
		      "Attempts to reserve a whole gang's places, by result.", "result",
		      { "reserved", "no_fit", "waiting", "conflict", "rolled_back" }, { 0 } },
	[M_HTTP_REFUSED] = { "gpu_extender_connections_refused_total",
			     "Connections closed at once, at maxConnections or maxConnectionsPerAddress.", "reason",
			     { "connection_limit" }, { 0 } },
	[M_RATINGS] = { "gpu_extender_prioritize_ratings_total",
			"Nodes prioritize rated, by where the rating came from: the pod's filter (its node unchanged since), "
			"or made.", "source", { "filter", "made" }, { 0 } },
};

static _Atomic int64_t newest_event[RES_COUNT];

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
	if ((unsigned)m < M_COUNTER_COUNT && label >= 0 && label < 6)
		atomic_fetch_add_explicit(&counters[m].v[label], n, memory_order_relaxed);
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

static void gauge(struct buf *out, const char *name, const char *help, double v)
{
	buf_printf(out, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

void metrics_render(struct buf *out, const struct metrics_gauges *g)
{
	buf_adds(out, "# HELP gpu_extender_requests_total Requests served, by verb.\n"
		      "# TYPE gpu_extender_requests_total counter\n");
	for (int v = 0; v < VERB_COUNT; v++)
		buf_printf(out, "gpu_extender_requests_total{verb=\"%s\"} %llu\n", verb_names[v],
			   (unsigned long long)atomic_load(&verbs[v].count));
	buf_adds(out, "# HELP gpu_extender_request_errors_total Requests answered with an HTTP error status.\n"
		      "# TYPE gpu_extender_request_errors_total counter\n");
	for (int v = 0; v < VERB_COUNT; v++)
		buf_printf(out, "gpu_extender_request_errors_total{verb=\"%s\"} %llu\n", verb_names[v],
			   (unsigned long long)atomic_load(&verbs[v].errors));
	buf_adds(out, "# HELP gpu_extender_request_duration_seconds Time to answer a request.\n"
		      "# TYPE gpu_extender_request_duration_seconds histogram\n");
	for (int v = 0; v < VERB_COUNT; v++) {
		uint64_t cum = 0;
		for (size_t i = 0; i < NBUCKETS; i++) {
			cum += atomic_load(&verbs[v].bucket[i]);
			buf_printf(out, "gpu_extender_request_duration_seconds_bucket{verb=\"%s\",le=\"%g\"} %llu\n",
				   verb_names[v], buckets[i], (unsigned long long)cum);
		}
		uint64_t count = atomic_load(&verbs[v].count);
		buf_printf(out, "gpu_extender_request_duration_seconds_bucket{verb=\"%s\",le=\"+Inf\"} %llu\n",
			   verb_names[v], (unsigned long long)count);
		buf_printf(out, "gpu_extender_request_duration_seconds_sum{verb=\"%s\"} %.9f\n",
			   verb_names[v], (double)atomic_load(&verbs[v].sum_ns) / 1e9);
		buf_printf(out, "gpu_extender_request_duration_seconds_count{verb=\"%s\"} %llu\n",
			   verb_names[v], (unsigned long long)count);
	}
	for (int m = 0; m < M_COUNTER_COUNT; m++) {
		struct counter_family *f = &counters[m];
		buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n", f->name, f->help, f->name);
		for (int i = 0; i < 6 && f->values[i]; i++)
			buf_printf(out, "%s{%s=\"%s\"} %llu\n", f->name, f->label, f->values[i],
				   (unsigned long long)atomic_load(&f->v[i]));
	}
	buf_adds(out, "# HELP gpu_extender_newest_event_age_seconds Seconds since the newest watch event of a resource (-1: none yet).\n"
		      "# TYPE gpu_extender_newest_event_age_seconds gauge\n");
	int64_t now = (int64_t)time(NULL);
	for (int r = 0; r < RES_COUNT; r++) {
		int64_t t = atomic_load(&newest_event[r]);
		buf_printf(out, "gpu_extender_newest_event_age_seconds{resource=\"%s\"} %lld\n",
			   counters[M_WATCH_EVENTS].values[r], (long long)(t ? now - t : -1));
	}
	gauge(out, "gpu_extender_cache_nodes", "Nodes in the capacity cache.", g->cache_nodes);
	gauge(out, "gpu_extender_cache_devices", "GPU devices in the capacity cache.", g->cache_devices);
	gauge(out, "gpu_extender_cache_allocations", "Pod allocations recorded in the cache.", g->cache_allocations);
	gauge(out, "gpu_extender_cache_gpuclaims", "GpuClaim objects in the cache.", g->cache_gpuclaims);
	gauge(out, "gpu_extender_ready", "1 when the extender is ready to serve.", g->ready);
}
