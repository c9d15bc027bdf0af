/*
 * metrics: Prometheus counters, gauges and latency histograms, rendered in
 * the text exposition format. Updates are lock-free atomics, so the hot path
 * pays a few nanoseconds per request.
 */
#ifndef GPU_METRICS_H
#define GPU_METRICS_H

#include "buf.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

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
	M_NODE_SUMMARY_WRITES, /* GpuNodeStatus counts written (nodesum.h), by result: NSUM_* */
	M_FILTER_WAITS,        /* filters that waited for queued binds (backlog.h), reason: binds_queued */
	M_FILTER_CHOICES,      /* what became of the nodes filters chose alone, by result: CHOICE_* */
	M_COUNTER_COUNT
};

enum { GANG_RESERVED = 0, GANG_NO_FIT, GANG_WAITING, GANG_CONFLICT, GANG_ROLLED_BACK };
enum { RES_NODES = 0, RES_GNS, RES_GPUCLAIMS, RES_PODS, RES_LEASES, RES_COUNT };
enum { RATINGS_KEPT = 0, RATINGS_MADE };
enum { NSUM_WRITTEN = 0, NSUM_GONE, NSUM_FAILED };
enum { CHOICE_BOUND = 0, CHOICE_ELSEWHERE, CHOICE_EXPIRED, CHOICE_UNCOUNTED };
enum { REL_POD_GONE = 0, REL_POD_FINISHED, REL_BIND_TIMEOUT, REL_BIND_FAILED, REL_GANG_TIMEOUT, REL_POD_ELSEWHERE };

/* Records one served request: its verb, HTTP status and duration. */
void metrics_request(enum metric_verb v, int status, double seconds);
void metrics_inc(enum metric_counter m, int label);
void metrics_add(enum metric_counter m, int label, uint64_t n);
/* Unix time of the newest watch event of a resource (for the age gauge). */
void metrics_event_seen(int resource);

/*
 * One metric family: what /metrics prints in its HELP and TYPE lines and
 * what docs/metrics.md says of it. Each program keeps its families in one
 * table that its renderer walks, so the reference cannot drift from what is
 * served (both programs print it: `gpu-extender metrics`, `gpu-agent metrics`).
 */
struct metric_family {
	const char *name;
	const char *type;        /* "counter", "gauge" or "histogram" */
	const char *labels;      /* NULL: one series without labels; else names, ", " between */
	const char *values[8];   /* one label with fixed values: those, in order; else none */
	const char *help;        /* the HELP line */
	const char *more;        /* NULL, or what the reference adds (label values, when it moves) */
	int source, index;       /* where the program's renderer finds the values (its own codes) */
};

/* The Markdown table of the families f[0..n-1]: metric, type, labels, meaning. */
void metrics_reference(FILE *out, const struct metric_family *f, int n);
/* A family's HELP and TYPE lines. */
void metrics_header(struct buf *out, const struct metric_family *f);
/* Appends s as a label value: quoted, with \\, " and newline escaped. */
void metrics_quote(struct buf *out, const char *s);
/* The extender's families, in the order metrics_render prints them. */
const struct metric_family *metrics_families(int *n);

/* The per-node GPU counts a gpu_extender_node_gpus series carries. */
enum metrics_gpu_state { MGPU_WHOLE = 0, MGPU_SHARED, MGPU_FREE, MGPU_UNHEALTHY, MGPU_STATES };
extern const char *const metrics_gpu_state_names[MGPU_STATES];
enum { MNODE_GPUS = 0, MNODE_FRAGMENTATION };

/* Extra gauges supplied by the program at render time. */
struct metrics_gauges {
	double cache_nodes, cache_devices, cache_allocations, cache_gpuclaims;
	double ready;          /* 1 when /readyz would answer 200 */
	double node_summary_pending;   /* nodes whose GpuNodeStatus counts wait for a write (nodesum.h) */
	double heap_in_use, heap_free; /* malloc's bytes: held by the program, free in its arenas */
	uint64_t events[8];    /* the Event recorder's counts by result, in events.h's order */
	uint64_t nudges[8];    /* the nudger's counts by result, in nudge.h's order */
	/*
	 * Appends the series of a per-node family f (f->index: MNODE_GPUS,
	 * MNODE_FRAGMENTATION) from the cache, some nodes from *pos on (0 at
	 * the family's start), and moves *pos past them; true while nodes
	 * remain. NULL: none.
	 */
	bool (*per_node)(void *ctx, const struct metric_family *f, size_t *pos, struct buf *out);
	void *ctx;
};

/* The whole page. */
void metrics_render(struct buf *out, const struct metrics_gauges *g);

/*
 * The page a part at a time, for a response sent as it is made (a page at
 * 65,000 nodes is 25 MiB): a family whole, or some nodes of a per-node
 * family. Start with a zeroed cursor; false once the page is done (then
 * nothing was appended). metrics_render is these parts in a row.
 */
struct metrics_cursor {
	int family;
	size_t node;
	bool begun;            /* the family's header is out */
};
bool metrics_render_part(struct buf *out, const struct metrics_gauges *g, struct metrics_cursor *c);

#endif
