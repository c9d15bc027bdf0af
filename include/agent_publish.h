/*
 * agent_publish: how `gpu-agent run` puts what it detected into the
 * cluster. Each round (see agent_run()):
 *
 *   agent_detect_round() --> struct agent_node (last good result kept per vendor)
 *   agent_node_label_set() --> merge patch of the Node's labels, sent only
 *       when the labels changed (and on every resync)
 *   agent_gns_json() --> the GpuNodeStatus, written only when it changed
 *       (status.lastUpdated aside) and on every resync: GET it; 404 -> POST;
 *       else PUT with the resourceVersion the GET gave (409 -> GET again,
 *       a few times)
 *
 * The body builders, the change test and the backoff are pure (no I/O, no
 * globals) and unit tested; agent_publish() does the API calls through the
 * shared client (kube.h). Nothing here exits or logs but agent_run().
 * docs/agent.md ("Publishing") has the same in prose.
 */
#ifndef GPU_AGENT_PUBLISH_H
#define GPU_AGENT_PUBLISH_H

#include "agent.h"
#include "agent_toolrun.h"
#include "buf.h"
#include "kube.h"

struct dp_config;

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AGENT_GNS_API "/apis/gpu.scheduling/v1/gpunodestatuses"
#define AGENT_PUT_TRIES 5            /* GET+PUT attempts when the object keeps changing (409) */
#define AGENT_NODE_NAME_MAX 253      /* a DNS subdomain */

/* ---- pure: bodies ---- */

/* True when name is a valid Node name (DNS subdomain: [a-z0-9.-], <= 253, alphanumeric ends). */
bool agent_node_name_valid(const char *name);

/*
 * The JSON merge patch (application/merge-patch+json) that makes the
 * Node's agent-owned labels equal want: every key of want with its value,
 * and null for every other agent-owned key (agent_label_managed_keys()),
 * which removes it if present (a vendor that disappeared). Labels the
 * agent does not own are not mentioned, so an operator's stay. Appends
 * {"metadata":{"labels":{...}}} to out; 0, or a BUF_ error.
 */
int agent_labels_patch(const struct agent_labels *want, struct buf *out);

/*
 * The GpuNodeStatus to POST: desired (agent_gns_json() output) with an
 * ownerReference to its Node when node_uid is not empty, so the garbage
 * collector deletes the status with the Node. Heap string the caller
 * frees, or NULL with err.
 */
char *agent_gns_create_body(const char *desired, const char *node_uid, char *err, size_t errlen);

/*
 * The GpuNodeStatus to PUT: current (the object as the server returned it)
 * with its spec and status replaced by desired's, and its metadata kept
 * (resourceVersion, which makes the update conditional, and anyone else's
 * labels, annotations, finalizers and owners), plus the ownerReference to
 * the Node when node_uid is set (an older Node reference is replaced).
 * Server-filled metadata (managedFields) is dropped. NULL with err when
 * current is not an object with metadata.resourceVersion.
 */
char *agent_gns_update_body(const char *current, size_t current_len, const char *desired,
			    const char *node_uid, char *err, size_t errlen);

/* ---- pure: when to write ---- */

/*
 * What was last written successfully. fingerprint is the GpuNodeStatus
 * without status.lastUpdated (agent_gns_json(node, NULL, false)).
 */
struct agent_pub_state {
	char *gns;                   /* owned fingerprint; NULL = not written yet */
	char gns_uid[64];            /* the Node uid its ownerReference named */
	int64_t gns_at_ms;           /* monotonic time of that write */
	bool labels_ok;              /* labels holds what the Node has */
	struct agent_labels labels;
	int64_t labels_at_ms;
};

void agent_pub_state_init(struct agent_pub_state *s);
void agent_pub_state_release(struct agent_pub_state *s);

/*
 * Whether the GpuNodeStatus must be written now: never written, the
 * fingerprint or the Node uid changed, or resync_ms passed since the last
 * write (resync_ms <= 0: never for age alone).
 */
bool agent_pub_gns_due(const struct agent_pub_state *s, const char *fingerprint, const char *node_uid,
		       int64_t now_ms, int64_t resync_ms);
/* Whether the Node's labels must be patched now (same rules). */
bool agent_pub_labels_due(const struct agent_pub_state *s, const struct agent_labels *want,
			  int64_t now_ms, int64_t resync_ms);

/* ---- pure: backoff after failures ---- */

struct agent_backoff {
	int failures;                /* in the current streak; 0 = healthy */
	int64_t since_ms;            /* when the streak began */
};

/*
 * Records one more failure and returns the wait before the next try:
 * base_ms * 2^(failures-1), at most cap_ms, then "equal jitter": half of
 * it fixed and half scaled by r (0 <= r < 1, a random number the caller
 * draws), so replicas that failed together do not retry together.
 */
int64_t agent_backoff_fail(struct agent_backoff *b, int64_t now_ms, int64_t base_ms, int64_t cap_ms, double r);
/* Ends a streak; returns the number of failures it had (0: none). */
int agent_backoff_ok(struct agent_backoff *b);

/* ---- the API calls ---- */

struct agent_publisher {
	struct kube_client *kube;    /* borrowed */
	char node[AGENT_NODE_NAME_MAX + 1];
	char node_uid[64];           /* learnt from the label patch's answer */
	long timeout_s;              /* per request */
	struct agent_pub_state st;
	long retry_after_s;          /* from the last failed answer (429/503), else 0 */
};

void agent_publisher_init(struct agent_publisher *p, struct kube_client *kube, const char *node);
void agent_publisher_release(struct agent_publisher *p);

/* What one agent_publish() call did. */
struct agent_pub_result {
	bool labels_patched;
	bool gns_written;
	bool gns_created;            /* POST rather than PUT */
	bool gns_changed;            /* written because it differed, not for age or force */
	int conflicts;               /* 409s retried */
};

/*
 * Brings the cluster up to date with node: patches the labels and writes
 * the GpuNodeStatus when each is due (force: both are due). timestamp is
 * status.lastUpdated (RFC 3339). Both steps are tried even when the first
 * fails. Returns 0, or -1 with one line in err that says what failed and,
 * where it is a setup problem (403 RBAC, 404 CRD or Node), what to do.
 */
int agent_publish(struct agent_publisher *p, const struct agent_node *node, const char *timestamp,
		  int64_t now_ms, int64_t resync_ms, bool force, struct agent_pub_result *res,
		  char *err, size_t errlen);

/* ---- the loop (src/agentd/run.c) ---- */

struct agent_run_opts {
	const char *kubeconfig;      /* NULL: in-cluster, else $KUBECONFIG */
	const char *context;
	const char *node;            /* the Node's name (required) */
	int interval_s;              /* detection period (default 30) */
	int resync_rounds;           /* write even without changes every N rounds (default 10) */
	bool once;                   /* one round, then return */
	struct toolrun_opts tools;
	const struct dp_config *plugin;   /* serve kubelet as its device plugin; NULL = no */
};

/*
 * `gpu-agent run`: detect, publish, wait; until SIGTERM or SIGINT (the
 * current round is finished first). SIGHUP starts a round at once and
 * forces a full write. Failures to publish give one log line per streak
 * and exponential backoff with jitter; nothing here exits. Returns the
 * process exit status: 0; 1 setup or (with once) publish failure; 3 (with
 * once) published, but some vendor's tools failed.
 */
int agent_run(const struct agent_run_opts *o);

#endif
