/*
 * What the files of src/extender/ share; the verbs' contract is extender.h.
 *
 *   extender.c         the extender: lifecycle, readiness, the learned workload
 *   verb_args.c        decoding ExtenderArgs (filter, prioritize; preempt's pod)
 *   node_loop.c        the loop filter and prioritize run over a request's nodes
 *   assume.c           devices counted in the cache ahead of the ledger
 *   verb_filter.c      POST /filter
 *   verb_prioritize.c  POST /prioritize, and the rating filter borrows
 *   verb_bind.c        POST /bind (its arrival step; the standalone binder)
 *   backlog.c          the filter's back-pressure on binds that queue
 *   verb_preempt.c     POST /preempt
 *   debug.c            GET /debug/nodes (JSON, or html.h's page for a browser)
 */
#ifndef GPU_EXTENDER_IMPL_H
#define GPU_EXTENDER_IMPL_H

#include "extender.h"
#include "backlog.h"
#include "choices.h"
#include "class_memo.h"
#include "pending.h"
#include "ratings.h"
#include "workload.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/*
 * Claims kept between filter and bind: a pod's entry must outlive the
 * filters of the pods scheduled while its bind is under way (hundreds at a
 * few hundred pods/s); an entry is about 1.1 KB, so 65536 held 72 MiB in a
 * busy cluster. An entry evicted early costs cluster mode a read of the pod.
 */
#define PENDING_CAP 8192

/*
 * Nodes chosen by filters alone (filterKeepsBest 1), counted as assumed
 * until the pod's bind arrives: a few hundred milliseconds of binds in
 * flight. A choice no bind follows (the pod was deleted, or another
 * plugin turned it away) stops counting after CHOICE_TTL_MS.
 */
#define CHOICES_CAP 4096
#define CHOICE_TTL_MS 5000

/* ---- the extender (extender.c) ------------------------------------------- */

/* An immutable copy of the learned workload that requests read. */
struct wl_copy {
	atomic_int refs;
	struct workload wl;
};

struct extender {
	struct extender_opts o;
	struct api_resources res;
	struct pending pending;
	struct choices choices;       /* used with filterKeepsBest 1 in cluster mode */
	bool assume_choices;
	pthread_mutex_t wl_lock;      /* guards wl_master and wl_current */
	struct workload wl_master;
	struct wl_copy *wl_current;
	struct ratings ratings;       /* a filter's, for the prioritize that follows */
	struct backlog backlog;       /* binds in flight, for the filter's back-pressure */
};

/* The current copy of the learned workload, held (or NULL); extender_wl_release lets it go. */
struct wl_copy *extender_wl_acquire(struct extender *x);
void extender_wl_release(struct wl_copy *w);
/* Learns a scheduled pod's shape; publishes a new copy when the mix moved. */
void extender_wl_observe(struct extender *x, const struct claim *c);

/* Refuses the request (with status, or 200 and Error where the protocol wants that) until ready. */
bool extender_not_ready(struct extender *x, struct http_response *resp, int status);

/* The policy a claim is placed under: its own, else the extender's default. */
static inline enum policy_id extender_policy(const struct extender *x, const struct claim *c)
{
	return c->policy >= 0 ? (enum policy_id)c->policy : x->o.default_policy;
}

/* ---- request decoding (verb_args.c) -------------------------------------- */

/* What filter, prioritize and preempt share: the pod, its claim, the nodes. */
struct verb_args {
	cJSON *root;            /* the Pod (filter, prioritize) or the whole request (preempt) */
	cJSON *nodes_root;      /* the Nodes list, when the request sends one */
	char *text;             /* a copy of the body; NodeNames are decoded in place */
	const cJSON *pod;
	struct api_pod_ref ref;
	uint64_t uid_bits;      /* cache_uid_bits(ref.uid) */
	struct claim claim;
	bool claim_ok;
	char claim_err[256];
	bool soft_preferences;  /* api_pod_soft_preferences: filterKeepsBest leaves every node in */
	bool by_name;           /* NodeNames (nodeCacheCapable) vs Nodes */
	int n;
	const char **names;
	int32_t *plain_len;     /* NodeNames form: the name's length when it needs no escaping, else -1 */
	cJSON **items;          /* Nodes form: the node objects, to echo back */
};

/*
 * Decodes ExtenderArgs (filter, prioritize) into *a, which the caller
 * releases whatever the outcome. 0, or -1 with a 400 (or 500) reply set.
 */
int extender_parse_args(struct extender *x, const struct http_request *req, struct verb_args *a,
			struct http_response *resp);
/*
 * The pod and its claim (read under the GpuClaims' lock), remembered for
 * its bind. 0, or -1 with a 400 reply when pod is not an object.
 */
int extender_parse_pod(struct extender *x, struct verb_args *a, const cJSON *pod, struct http_response *resp);
void extender_args_release(struct verb_args *a);
/* Writes node i's name as a JSON string. */
void extender_add_name(struct buf *out, const struct verb_args *a, int i);

/* ---- the node loop of filter and prioritize (node_loop.c) ---------------- */

/* How many nodes ahead of the one decided the loops fetch a node to decide. */
#define DECIDE_AHEAD 4

/* What the filter and prioritize node loops share. */
struct node_loop {
	const struct verb_args *a;
	struct class_memo *memo;          /* NULL: every node on its own */
	const struct cache_node **node;   /* the request's nodes in the snapshot, NULL where unknown */
	bool by_counts;                   /* a node's fit_whole counts decide most nodes (fit_whole_applies) */
	bool rating;                      /* prioritize: the counts must also rate (policy_rate_whole) */
};

/*
 * Whether the nodes of one state share their fit in this request
 * (class_memo.h). Filter needs only the fit; prioritize also needs its
 * policy to read nothing but the state (policy_flags() == 0).
 */
bool extender_fit_by_state(const struct verb_args *a);
/* A memo when results go by state; NULL otherwise, or when out of memory (then every node on its own). */
struct class_memo *extender_memo_new(bool by_state);
/* Room for the request's nodes, and a memo when their results go by state. 0, or -1 (no memory). */
int extender_loop_init(struct node_loop *l, const struct verb_args *a, bool by_state);
void extender_loop_release(struct node_loop *l);
/* Takes the usage of the records of the listed pods off n. */
void extender_unapply_pods(struct gpu_node *n, const struct cache_node *cn, const char *const *uids, int nuid);
/*
 * The node without this pod's own reservation, or NULL when it holds none
 * there. A bind of the pod that broke off half-way leaves one until the
 * reaper's bound; a retried bind reuses it, so the node must not count it
 * against the pod. (Asked of each node that did not fit, most nodes of a
 * busy cluster: the view's uid bits answer it without reading the records.)
 */
struct gpu_node *extender_without_own(const struct cache_node *cn, const struct verb_args *a);

/*
 * The steps below run for every node of every request: inline, so that
 * each verb's loop is compiled with its decide function.
 */

/* Whether the request's pod has a reservation of its own on the node. */
static inline bool loop_own_alloc(const struct cache_node *cn, const struct verb_args *a)
{
	if (!a->ref.uid[0] || !cache_node_may_hold(cn, a->uid_bits))
		return false;
	const struct alloc_rec *r = cn->allocs;
	for (int i = 0; i < cn->nallocs; i++, r = alloc_rec_next(r))
		if (!strcmp(alloc_rec_uid(r), a->ref.uid))
			return true;
	return false;
}

/* Whether node cn's counts decide it: the claim fits, and for a rating the node's use is whole. */
static inline bool loop_counts_decide(const struct node_loop *l, const struct cache_node *cn)
{
	return l->by_counts && cn->whole.free >= l->a->claim.count && (!l->rating || cn->whole.exact);
}

/*
 * Fetches node i + DECIDE_AHEAD's devices unless its state's result is
 * known or its counts decide it. When counts may, the header that holds
 * them is fetched DECIDE_AHEAD nodes earlier, so that reading it does not
 * wait.
 */
static inline void loop_fetch_ahead(const struct node_loop *l, int i)
{
	if (l->by_counts && i + 2 * DECIDE_AHEAD < l->a->n && l->node[i + 2 * DECIDE_AHEAD])
		__builtin_prefetch(l->node[i + 2 * DECIDE_AHEAD]);
	const struct cache_node *cn = i + DECIDE_AHEAD < l->a->n ? l->node[i + DECIDE_AHEAD] : NULL;
	if (cn && cn->has_gns && !loop_counts_decide(l, cn) && (!l->memo || !class_memo_find(l->memo, cn->state)))
		cache_node_prefetch(cn);
}

/* Decides node i into r; returns whether r holds for every node in its state. */
typedef bool (*decide_fn)(void *job, const struct cache_node *cn, struct class_result *r);

/* Node i's result: the memo's when it knows the state, else decide's (learned when shared). */
static inline struct class_result loop_result(const struct node_loop *l, int i, decide_fn decide, void *job)
{
	loop_fetch_ahead(l, i);
	const struct cache_node *cn = l->node[i];
	struct class_memo *m = cn && cn->has_gns ? l->memo : NULL;   /* a state needs a GpuNodeStatus */
	const struct class_result *known = m ? class_memo_find(m, cn->state) : NULL;
	if (m)
		class_memo_count(m, known != NULL);
	/* A failure does not hold where the pod has a reservation of its own (see extender_without_own). */
	if (known && (known->ok || !loop_own_alloc(cn, l->a)))
		return *known;
	struct class_result r;
	if (decide(job, cn, &r) && m && !known)
		class_memo_add(m, cn->state, &r);
	return r;
}

/* ---- devices assumed ahead of the ledger (assume.c) ---------------------- */

/*
 * Counts the devices the pod would take on node in the cache as assumed
 * (cache_assume), chosen on the cache's view as the bind will choose on the
 * ledger; the ledger decides. False when none fit there.
 */
bool extender_assume_devices(struct extender *x, const struct api_pod_ref *pod, const char *node,
			     const struct claim *c);
void extender_forget_assumed(struct extender *x, const char *uid, const char *node);
/* Stops counting the pod's earlier choice (uid NULL: none), and every choice expired. */
void extender_forget_choices(struct extender *x, const char *uid);
/* At a bind's arrival: true when its filter's choice was this node, whose devices then count as the bind's. */
bool extender_choice_to_bind(struct extender *x, const char *uid, const char *node);
/* A filter passed the pod to one node only: its devices there count until its bind arrives. */
void extender_assume_choice(struct extender *x, const struct api_pod_ref *pod, const char *node,
			    const struct claim *c);

/* ---- rating (verb_prioritize.c; filter rates the nodes that pass) -------- */

/* Filter's verdict on one node. */
struct verdict {
	int32_t reason;    /* offset into the filter's reasons; -1: the node passes */
	bool unresolvable;
	bool kept_out;     /* passes, but filterKeepsBest kept better nodes */
};

/* One rating node loop. */
struct prio_job {
	struct node_loop l;
	struct policy_ctx pctx;
	struct wl_copy *wl;           /* the learned workload pctx reads */
	double *raw;
	bool *ok;
	const struct verdict *only;   /* filter's verdicts: rate only the nodes that pass; NULL: all */
	const bool *known;            /* nodes rated already (their filter's ratings); NULL: none */
};

/* Readies j to rate nodes under policy, with the learned workload (extender_rating_end lets it go). */
void extender_rating_begin(struct extender *x, struct prio_job *j, enum policy_id policy);
void extender_rating_end(struct prio_job *j);
/* What the ratings made under j's policy and workload are kept under. */
struct ratings_key extender_rating_key(const struct prio_job *j);
/* Rates one node into r; returns whether r holds for every node in cn's state. A decide_fn. */
bool extender_rate_node(void *job, const struct cache_node *cn, struct class_result *r);
/* Rates j's nodes (found in a snapshot the caller holds) between rating_begin and rating_end. */
void extender_rate_nodes(struct prio_job *j);

#endif
