/*
 * metrics: Prometheus counters, gauges and latency histograms, rendered in
 * the text exposition format. Updates are lock-free atomics, so the hot path
 * pays a few nanoseconds per request.
 */
#ifndef GPU_METRICS_H
#define GPU_METRICS_H

#include "buf.h"

#include <stdint.h>

enum metric_verb {
	VERB_FILTER = 0, VERB_PRIORITIZE, VERB_BIND, VERB_PREEMPT, VERB_MUTATE, VERB_OTHER,
	VERB_COUNT
};

/* Counters with one label; the label's values are fixed per family. */
enum metric_counter {
	M_BINDS = 0,           /* result: ok, no_fit, conflict, error (BIND_*, bind.h) */
	M_RESERVE_CONFLICTS,   /* resource: lease */
	M_WATCH_RESTARTS,      /* resource: nodes, gpunodestatuses, gpuclaims, pods, leases */
	M_RELISTS,             /* resource */
	M_WATCH_EVENTS,        /* resource */
	M_RELEASED,            /* reason: pod_gone, pod_finished, bind_timeout, bind_failed, gang_timeout, pod_elsewhere */
	M_GANGS,               /* result: reserved, no_fit, waiting, conflict, rolled_back */
	M_HTTP_REFUSED,        /* reason: connection_limit */
	M_RATINGS,             /* nodes prioritize rated, by source: filter (kept from the pod's filter), made */
	M_COUNTER_COUNT
};

enum { GANG_RESERVED = 0, GANG_NO_FIT, GANG_WAITING, GANG_CONFLICT, GANG_ROLLED_BACK };
enum { RES_NODES = 0, RES_GNS, RES_GPUCLAIMS, RES_PODS, RES_LEASES, RES_COUNT };
enum { RATINGS_KEPT = 0, RATINGS_MADE };
enum { REL_POD_GONE = 0, REL_POD_FINISHED, REL_BIND_TIMEOUT, REL_BIND_FAILED, REL_GANG_TIMEOUT, REL_POD_ELSEWHERE };

/* Records one served request: its verb, HTTP status and duration. */
void metrics_request(enum metric_verb v, int status, double seconds);
void metrics_inc(enum metric_counter m, int label);
void metrics_add(enum metric_counter m, int label, uint64_t n);
/* Unix time of the newest watch event of a resource (for the age gauge). */
void metrics_event_seen(int resource);

/* Extra gauges supplied by the program at render time. */
struct metrics_gauges {
	double cache_nodes, cache_devices, cache_allocations, cache_gpuclaims;
	double ready;          /* 1 when /readyz would answer 200 */
};

void metrics_render(struct buf *out, const struct metrics_gauges *g);

#endif
