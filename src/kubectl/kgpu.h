/*
 * kgpu: `kubectl gpu`, the cluster's GPUs as the API server records them
 * (docs/kubectl-gpu.md). Reads GpuNodeStatus (what the agents found), the
 * ledger Leases (what the extender reserved), pods, GpuClaims and PodGroups;
 * never the extender, so it works while that is down.
 *
 * Everything here is pure: lists of objects (cJSON) in, a report (cJSON)
 * out, then text. Only src/kubectl/kgpu_main.c talks to the API server.
 * A report is the same document for every output: -o json prints it, -o
 * yaml converts it, the default and -o wide render it as tables.
 */
#ifndef GPU_KGPU_H
#define GPU_KGPU_H

#include "api.h"
#include "buf.h"
#include "gpu.h"
#include "ledger.h"

#include <cjson/cJSON.h>
#include <stdbool.h>

/* One node: the agent's devices with the ledger's reservations applied. */
struct kg_node {
	char name[254];
	struct gpu_node *gn;        /* from GpuNodeStatus (+ Node labels); NULL when the agent published none */
	bool has_ledger;
	struct ledger led;          /* the node's reservations (empty without a ledger) */
	char ledger_err[224];       /* a ledger that did not decode */
};

/* What the caller could read: each list is NULL when the API refused it (or it is absent). */
struct kg_inputs {
	const cJSON *gns;           /* GpuNodeStatus items */
	const cJSON *ledgers;       /* ledger Lease items */
	const cJSON *nodes;         /* Node items (labels, for selectors), optional */
	const cJSON *pods;          /* Pod items */
	const cJSON *claims;        /* GpuClaim items */
	const cJSON *podgroups;     /* coscheduling PodGroup items (scheduling.x-k8s.io) */
	const cJSON *workloads;     /* Workload items (scheduling.k8s.io/v1alpha1, Kubernetes 1.35) */
	const cJSON *k8s_podgroups; /* PodGroup items of scheduling.k8s.io (1.36 on) */
	const char *pods_ns;        /* namespace pods were listed in; NULL: every namespace */
	bool pods_refused;          /* every namespace's pods were asked for and refused (so pods_ns's were read) */
};

struct kg_pod_key {
	const char *ns, *name;
	const cJSON *pod;
};

struct kg_cluster {
	struct kg_inputs in;
	int n;
	struct kg_node *nodes;      /* sorted by name */
	int npods;
	struct kg_pod_key *pods;    /* sorted by namespace, name */
	cJSON *notes;               /* array of strings: what could not be read, and so not shown */
};

/*
 * Builds the model from what was read (the lists stay the caller's and must
 * outlive c). A GpuNodeStatus or ledger that does not decode is noted, not
 * fatal. 0, or -1 with err when out of memory.
 */
int kg_cluster_build(struct kg_cluster *c, const struct kg_inputs *in, char *err, size_t errlen);
void kg_cluster_release(struct kg_cluster *c);
const struct kg_node *kg_cluster_node(const struct kg_cluster *c, const char *name);
/* The pod if it was read, else NULL. */
const cJSON *kg_cluster_pod(const struct kg_cluster *c, const char *ns, const char *name);
/* Whether pods of ns were read (so a missing one is really missing). */
bool kg_ns_readable(const struct kg_cluster *c, const char *ns);

/*
 * Who holds a reservation, as the reader may see it: "ns/pod", "ns/gang
 * (gang place)", "ns/pod (no such pod)" when its namespace was read and the
 * pod is not there, or "other" when the reader cannot read that namespace's
 * pods (the ledgers name pods of every namespace; the plugin does not pass
 * those names on).
 */
void kg_holder(const struct kg_cluster *c, const struct ledger_entry *e, char *out, size_t size);

/* A node's devices counted. */
struct kg_counts {
	int total, whole, shared, free, unhealthy, external;
	double frag_pct;            /* idle compute on partly used devices (shares only), % of the idle compute */
	double fgd_gpus;            /* the FGD measure (frag.h, default workload): idle GPUs typical tasks cannot use */
};
void kg_node_counts(const struct kg_node *n, struct kg_counts *out);

/*
 * Where the ledger and the agent (or the pods) disagree on a node: one line
 * each, appended to issues (a cJSON array).
 */
void kg_node_issues(const struct kg_cluster *c, const struct kg_node *n, cJSON *issues);

/* The reports. NULL with err when the subject is missing (no such node or pod) or out of memory. */
cJSON *kg_report_nodes(const struct kg_cluster *c, char *err, size_t errlen);
cJSON *kg_report_node(const struct kg_cluster *c, const char *node, char *err, size_t errlen);
cJSON *kg_report_pods(const struct kg_cluster *c, char *err, size_t errlen);
/* Why the pod ns/name waits (or where it runs). */
cJSON *kg_report_why(const struct kg_cluster *c, const char *ns, const char *name, char *err, size_t errlen);

/* Output options. */
struct kg_style {
	bool wide;
	bool color;                 /* ANSI colours (only on a terminal, without NO_COLOR) */
};
/* A report as text tables (kind says which: "nodes", "node", "pods", "why"). 0, or -1 (out of memory). */
int kg_render(const char *kind, const cJSON *report, const struct kg_style *st, struct buf *out);
/*
 * The GPUs as an HTML page (html.h, the extender's /debug/nodes page drawn
 * from the ledgers): node's, or every node's when node is NULL. 0, or -1
 * with err (no such node, out of memory).
 */
int kg_html(const struct kg_cluster *c, const char *node, struct buf *out, char *err, size_t errlen);
/* A JSON document as YAML (block style; strings quoted where YAML would read them otherwise). */
int kg_yaml(const cJSON *doc, struct buf *out);

#endif
