/*
 * POST /filter: which of the request's nodes can take the pod, and why not
 * for the others. A gang member goes only where its gang's places are; the
 * nodes that pass are rated on the way (for the prioritize that follows,
 * or to keep the best, filterKeepsBest); a node a filter chose alone
 * counts the pod's devices until its bind arrives.
 */
#include "extender_impl.h"
#include "events.h"
#include "nudge.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One filter request's node loop. */
struct filter_job {
	struct node_loop l;
	enum policy_id policy;
	enum gpu_pack pack;
	struct verdict *v;
	struct buf reasons;        /* the reasons of rejected nodes, NUL-separated */
	int32_t invalid_reason;    /* offset of the reason for every node when the claim is invalid, or -1 */
	int32_t no_status_reason;  /* offset of the reason for nodes without a GpuNodeStatus, or -1 */
	struct prio_job *rating;   /* rates each node that passes, while its devices are in the caches; or NULL */
	struct prio_job rates;     /* what rating points to */
	bool oom;
	bool gang;                 /* its gang's route decided (the gang's own Events tell why) */
	bool gang_retry;           /* no node now, but another try may place it (gang_route.retry) */
};

/* Whether node i is in the reply's list of nodes that pass. */
static bool passes(const struct filter_job *j, int i)
{
	return j->v[i].reason < 0 && !j->v[i].kept_out;
}

/* ---- deciding each node -------------------------------------------------- */

/* Rejects with the reason at *at, which goes into j->reasons the first time only. */
static void reject_unresolvable(struct filter_job *j, int32_t *at, const char *reason, struct class_result *r)
{
	if (*at < 0) {
		*at = (int32_t)j->reasons.len;
		if (buf_add(&j->reasons, reason, strlen(reason) + 1))
			j->oom = true;
	}
	r->ok = false;
	r->unresolvable = true;
	r->reason = *at;
}

/*
 * Decides one node into r; the reason of a failure goes to j->reasons.
 * Returns whether r holds for every node in cn's state (it does not when
 * the pod's own reservation there was counted out). A decide_fn.
 */
static bool filter_node(void *job, const struct cache_node *cn, struct class_result *r)
{
	struct filter_job *j = job;
	const struct verb_args *a = j->l.a;
	*r = (struct class_result){ .ok = true, .reason = -1 };
	if (!a->claim_ok) {
		char why[sizeof(((struct fit *)0)->reason)];
		snprintf(why, sizeof(why), "pod's GPU request is invalid: %s", a->claim_err);
		reject_unresolvable(j, &j->invalid_reason, why, r);
		return true;
	}
	if (!claim_wants_gpu(&a->claim))
		return true;
	if (!cn || !cn->has_gns) {
		reject_unresolvable(j, &j->no_status_reason,
				    "no GpuNodeStatus for this node (no GPUs reported; is gpu-agent running there?)", r);
		return true;
	}
	/*
	 * Rating the node (for the prioritize that follows) places the claim
	 * there, which is a fit, while its devices are in the caches. Without
	 * a rating, filter needs no device choice: the cheap checks first, the
	 * reason only on failure.
	 */
	bool holds = true;
	if (j->rating) {
		struct class_result rated;
		holds = extender_rate_node(j->rating, cn, &rated);
		r->raw = rated.raw;
		r->rated = rated.ok;
		if (rated.ok)
			return holds;
	}
	if (loop_counts_decide(&j->l, cn) || fit_possible(cn->node, &a->claim))
		return holds;
	struct gpu_node *own = extender_without_own(cn, a);
	struct fit f;
	bool ok = fit_node(own ? own : cn->node, &a->claim, j->pack, &f);
	gpu_node_free(own);
	if (!ok) {
		r->ok = false;
		r->unresolvable = f.unresolvable;
		r->reason = (int32_t)j->reasons.len;
		if (buf_add(&j->reasons, f.reason, strlen(f.reason) + 1))
			j->oom = true;
	}
	return holds && !own;
}

static void filter_nodes(struct filter_job *j)
{
	for (int i = 0; i < j->l.a->n; i++) {
		struct class_result r = loop_result(&j->l, i, filter_node, j);
		j->v[i].reason = r.ok ? -1 : r.reason;
		j->v[i].unresolvable = r.unresolvable;
		if (j->rating) {
			j->rating->raw[i] = r.raw;
			j->rating->ok[i] = r.ok && r.rated;
		}
	}
}

/* FailedNodes or FailedAndUnresolvableNodes: the nodes that fail so, with their reasons. */
static void add_failed_map(struct buf *out, const char *key, const struct filter_job *j, bool unresolvable)
{
	const struct verb_args *a = j->l.a;
	buf_printf(out, ",\"%s\":{", key);
	bool first = true;
	for (int i = 0; i < a->n; i++) {
		const struct verdict *v = &j->v[i];
		if (v->reason < 0 || v->unresolvable != unresolvable)
			continue;
		if (!first)
			buf_addc(out, ',');
		first = false;
		extender_add_name(out, a, i);
		buf_addc(out, ':');
		buf_add_json_str(out, j->reasons.data + v->reason);
	}
	buf_addc(out, '}');
}

/*
 * A gang member goes where its gang's places are (reserved for the whole
 * gang first, when it has none), or nowhere yet, with the gang's reason on
 * every node. False when the pod is not steered (not in a gang, or placed
 * as any pod): then the nodes are filtered as usual.
 */
static bool route_gang(struct extender *x, struct filter_job *j)
{
	const struct verb_args *a = j->l.a;
	if (!x->o.gang || !a->claim_ok || !a->claim.gang[0] || !claim_wants_gpu(&a->claim))
		return false;
	const struct gpu_node **nodes = malloc(((size_t)a->n + 1) * sizeof(*nodes));
	if (!nodes) {
		j->oom = true;
		return true;
	}
	int n = 0;
	for (int i = 0; i < a->n; i++)
		if (j->l.node[i] && j->l.node[i]->has_gns)
			nodes[n++] = j->l.node[i]->node;
	struct gang_route route;
	x->o.gang(x->o.gang_ctx, &a->ref, &a->claim, nodes, n, &route);
	free(nodes);
	if (!route.steered) {
		free(route.nodes);
		return false;
	}
	j->gang_retry = !route.ok && route.retry;
	int32_t elsewhere = -1, why = -1;
	for (int i = 0; i < a->n; i++) {
		bool here = false;
		for (int k = 0; route.ok && k < route.n && !here; k++)
			here = !strcmp(route.nodes[k], j->l.node[i] ? j->l.node[i]->node->name : a->names[i]);
		struct class_result r = { .ok = true, .reason = -1 };
		if (!route.ok)
			reject_unresolvable(j, &why, route.reason, &r);
		else if (!here)
			reject_unresolvable(j, &elsewhere, "the places of its gang are on other nodes", &r);
		j->v[i].reason = r.ok ? -1 : r.reason;
		j->v[i].unresolvable = r.unresolvable;
	}
	free(route.nodes);
	return true;
}

/* ---- filter keeping the best --------------------------------------------- */

/* Rates j's nodes (found in a snapshot the caller holds) under policy, with the learned workload. */
static void rate_nodes(struct extender *x, struct prio_job *j, enum policy_id policy)
{
	extender_rating_begin(x, j, policy);
	extender_rate_nodes(j);
	extender_rating_end(j);
}

struct rated { double raw; int i; };

/* Better first; among equals, the node the request names first. */
static int rated_cmp(const void *pa, const void *pb)
{
	const struct rated *a = pa, *b = pb;
	if (a->raw != b->raw)
		return a->raw > b->raw ? -1 : 1;
	return a->i - b->i;
}

/*
 * filterKeepsBest: of the nodes that pass, the `keep` the policy rates
 * highest stay in; the others are left out of the reply (neither passed nor
 * failed). With one left, kube-scheduler skips prioritize and its own
 * scoring plugins for the pod: the extender alone chooses the node.
 * Returns -1 when out of memory.
 */
static int keep_best(struct extender *x, struct filter_job *fj, enum policy_id policy, int keep)
{
	const struct verb_args *a = fj->l.a;
	int passing = 0;
	for (int i = 0; i < a->n; i++)
		passing += fj->v[i].reason < 0;
	if (passing <= keep)
		return 0;
	/* The filter's ratings; without them, the filter's nodes as found, with a memo of ratings of its own. */
	const struct prio_job *j = fj->rating;
	struct prio_job own = { .raw = NULL };
	struct rated *r = malloc((size_t)passing * sizeof(*r));
	int rc = -1;
	if (!r)
		goto out;
	if (!j) {
		bool by_state = extender_fit_by_state(a) && !policy_flags(policy);
		own = (struct prio_job){
			.l = { .a = a, .node = fj->l.node, .memo = extender_memo_new(by_state) },
			.only = fj->v,
			.raw = calloc((size_t)a->n, sizeof(*own.raw)),
			.ok = calloc((size_t)a->n, sizeof(*own.ok)),
		};
		if (!own.raw || !own.ok)
			goto out;
		rate_nodes(x, &own, policy);
		j = &own;
	}
	int n = 0;
	for (int i = 0; i < a->n; i++)
		if (fj->v[i].reason < 0)
			r[n++] = (struct rated){ .raw = j->ok[i] ? j->raw[i] : -INFINITY, .i = i };
	if (keep == 1) {   /* the common setting: one pass, no sort */
		for (int k = 1; k < n; k++)
			if (rated_cmp(&r[k], &r[0]) < 0)
				r[0] = r[k];
	} else {
		qsort(r, (size_t)n, sizeof(*r), rated_cmp);
	}
	for (int i = 0; i < a->n; i++)
		fj->v[i].kept_out = fj->v[i].reason < 0;
	for (int k = 0; k < keep; k++)
		fj->v[r[k].i].kept_out = false;
	rc = 0;
out:
	free(r), free(own.raw), free(own.ok), free(own.l.memo);
	return rc;
}

/*
 * Keeps the ratings of the nodes the reply passes, in its order (the
 * prioritize that follows names them so), with their views.
 */
static void keep_ratings(struct extender *x, const struct filter_job *j)
{
	const struct verb_args *a = j->l.a;
	uint32_t *view = malloc(((size_t)a->n + 1) * sizeof(*view));
	double *raw = malloc(((size_t)a->n + 1) * sizeof(*raw));
	bool *ok = malloc(((size_t)a->n + 1) * sizeof(*ok));
	int n = 0;
	for (int i = 0; view && raw && ok && i < a->n; i++) {
		if (!passes(j, i))
			continue;
		view[n] = j->l.node[i] ? j->l.node[i]->id : 0;
		raw[n] = j->rating->raw[i];
		ok[n++] = j->rating->ok[i];
	}
	struct ratings_key k = extender_rating_key(j->rating);
	ratings_put(&x->ratings, &k, view, raw, ok, n);   /* (they are its now) */
}

/* ---- the verb ------------------------------------------------------------ */

/*
 * The nodes that pass are rated too, for the prioritize that follows (or
 * the nodes filterKeepsBest keeps), where the state's memo allows: a
 * rating that reads more than the state is not the state's.
 */
static void start_rating(struct extender *x, struct filter_job *j)
{
	const struct verb_args *a = j->l.a;
	if (!a->claim_ok || !claim_wants_gpu(&a->claim) || (j->l.memo && policy_flags(j->policy)))
		return;
	j->rates.l.a = a;
	j->rates.raw = calloc((size_t)a->n + 1, sizeof(*j->rates.raw));
	j->rates.ok = calloc((size_t)a->n + 1, sizeof(*j->rates.ok));
	if (j->rates.raw && j->rates.ok) {
		extender_rating_begin(x, &j->rates, j->policy);
		j->rating = &j->rates;
	}
}

/* Readies the job for the request's nodes. 0, or -1 with a 500 reply (no memory). */
static int filter_start(struct extender *x, struct filter_job *j, struct http_response *resp)
{
	const struct verb_args *a = j->l.a;
	j->policy = extender_policy(x, &a->claim);
	j->pack = j->policy == POLICY_SPREAD ? PACK_SPREAD : PACK_BINPACK;
	j->v = calloc((size_t)a->n + 1, sizeof(*j->v));
	if (extender_loop_init(&j->l, a, extender_fit_by_state(a)) || !j->v) {
		httpd_error(resp, 500, "out of memory");
		return -1;
	}
	j->l.by_counts = a->claim_ok && fit_whole_applies(&a->claim);
	start_rating(x, j);
	return 0;
}

/* The pod passed to one node alone: its devices there count until its bind arrives. */
static void assume_if_one(struct extender *x, const struct filter_job *j)
{
	const struct verb_args *a = j->l.a;
	int chosen = -1, passed = 0;
	for (int i = 0; i < a->n; i++)
		if (passes(j, i) && j->l.node[i])
			chosen = i, passed++;
	if (passed == 1)
		extender_assume_choice(x, &a->ref, j->l.node[chosen]->node->name, &a->claim);
}

/*
 * How many nodes filterKeepsBest keeps for this pod; 0: every node that
 * fits. A pod that states a soft preference keeps them all, so that
 * kube-scheduler weighs it among the nodes the policy rates equal.
 */
static int nodes_kept(const struct extender *x, const struct verb_args *a)
{
	if (!a->claim_ok || !claim_wants_gpu(&a->claim))
		return 0;
	if (a->soft_preferences && x->o.keep_all_for_preferences)
		return 0;
	return x->o.filter_keeps_best;
}

/* Decides every node on one snapshot: the gang's route, else each node, then the best kept. */
static void filter_decide(struct extender *x, struct filter_job *j)
{
	const struct verb_args *a = j->l.a;
	bool choosing = x->assume_choices && a->claim_ok && claim_wants_gpu(&a->claim);
	if (choosing)
		extender_forget_choices(x, a->ref.uid);   /* a pod filtered again does not compete with itself */
	struct snapshot *snap = cache_acquire(x->o.cache);
	snapshot_find_all(snap, a->names, a->n, j->l.node);
	j->gang = route_gang(x, j);
	if (!j->gang) {
		filter_nodes(j);
		int keep = nodes_kept(x, a);
		if (keep > 0 && keep_best(x, j, j->policy, keep))
			j->oom = true;
		else if (j->rating && !j->oom)
			keep_ratings(x, j);
		if (choosing)
			assume_if_one(x, j);
	}
	snapshot_release(snap);
}

/* NodeNames form (nodeCacheCapable): the names that pass, echoed as read. */
static void add_passed_names(struct buf *out, const struct filter_job *j)
{
	const struct verb_args *a = j->l.a;
	buf_adds(out, "{\"NodeNames\":[");
	bool first = true;
	for (int i = 0; i < a->n; i++) {
		if (!passes(j, i))
			continue;
		if (!first)
			buf_addc(out, ',');
		first = false;
		extender_add_name(out, a, i);
	}
	buf_adds(out, "],\"Nodes\":null");
}

/* Not cache-capable: the nodes that pass go back as whole Node objects. */
static void add_passed_nodes(struct buf *out, const struct filter_job *j)
{
	const struct verb_args *a = j->l.a;
	buf_adds(out, "{\"NodeNames\":null,\"Nodes\":{\"metadata\":{},\"items\":[");
	bool first = true;
	for (int i = 0; i < a->n; i++) {
		if (!passes(j, i))
			continue;
		char *js = cJSON_PrintUnformatted(a->items[i]);
		if (!js)
			continue;
		if (!first)
			buf_addc(out, ',');
		first = false;
		buf_adds(out, js);
		cJSON_free(js);
	}
	buf_adds(out, "]}");
}

/* The ExtenderFilterResult, in the form the request named its nodes. */
static void filter_reply(const struct filter_job *j, const struct http_request *req, struct http_response *resp)
{
	struct buf *out = &resp->body;
	buf_reserve(out, req->body_len + 64);   /* the names that pass, in one allocation */
	if (j->l.a->by_name)
		add_passed_names(out, j);
	else
		add_passed_nodes(out, j);
	add_failed_map(out, "FailedNodes", j, false);
	add_failed_map(out, "FailedAndUnresolvableNodes", j, true);
	if (buf_adds(out, ",\"Error\":\"\"}\n"))
		httpd_error(resp, 500, "reply too large");
}

/* ---- the pod's Event when no node fits ---------------------------------- */

#define UNSATISFIABLE_EVERY_S 60   /* at most one such Event a pod a minute: kube-scheduler retries often */
#define UNSATISFIABLE_REASONS 3

/*
 * No node the request gave fits: a Warning on the pod, the reasons
 * summarised ("6 nodes: 4 node has 2 matching GPUs, claim needs 4; 2 no
 * GpuNodeStatus..."), the most frequent first. Only queued (events.h).
 */
static void tell_unsatisfiable(struct extender *x, const struct filter_job *j)
{
	const struct verb_args *a = j->l.a;
	if (!x->o.events || j->oom || j->gang || a->n == 0 || !a->ref.name || (a->claim_ok && !claim_wants_gpu(&a->claim)))
		return;
	int32_t at[UNSATISFIABLE_REASONS];
	int count[UNSATISFIABLE_REASONS], nr = 0, other = 0;
	for (int i = 0; i < a->n; i++) {
		if (j->v[i].reason < 0)
			return;                 /* a node fits */
		const char *why = j->reasons.data + j->v[i].reason;
		int k = 0;
		while (k < nr && at[k] != j->v[i].reason && strcmp(j->reasons.data + at[k], why))
			k++;
		if (k < nr) {
			count[k]++;
		} else if (nr < UNSATISFIABLE_REASONS) {
			at[nr] = j->v[i].reason;
			count[nr++] = 1;
		} else {
			other++;
		}
	}
	for (int k = 1; k < nr; k++)      /* most frequent first */
		for (int m = k; m > 0 && count[m] > count[m - 1]; m--) {
			int c = count[m];
			int32_t o = at[m];
			count[m] = count[m - 1], at[m] = at[m - 1];
			count[m - 1] = c, at[m - 1] = o;
		}
	char msg[512];
	size_t len = (size_t)snprintf(msg, sizeof(msg), "no node of %d fits:", a->n);
	for (int k = 0; k < nr && len < sizeof(msg); k++)
		len += (size_t)snprintf(msg + len, sizeof(msg) - len, "%s %d: %s", k ? ";" : "", count[k],
					j->reasons.data + at[k]);
	if (other && len < sizeof(msg))
		snprintf(msg + len, sizeof(msg) - len, "; %d: other reasons", other);
	events_pod(x->o.events, a->ref.ns, a->ref.name, a->ref.uid, EVENTS_WARNING, "GPUClaimUnsatisfiable",
		   UNSATISFIABLE_EVERY_S, "%s", msg);
}

/*
 * The nudger learns which GPU pods wait (no node fits: kube-scheduler
 * keeps them until an event it watches) and which no longer do. A gang
 * member waits for its gang, not for GPUs alone: told only when another
 * try may place it as things are (nudge_retry).
 */
static void tell_nudger(struct extender *x, const struct filter_job *j)
{
	const struct verb_args *a = j->l.a;
	if (!x->o.nudge || j->oom || !a->claim_ok || !claim_wants_gpu(&a->claim) || !a->ref.uid)
		return;
	for (int i = 0; i < a->n; i++)
		if (passes(j, i)) {
			nudge_forget(x->o.nudge, a->ref.uid);
			return;
		}
	if (j->gang && j->gang_retry)
		nudge_retry(x->o.nudge, &a->ref);
	else if (!j->gang && a->n > 0)
		nudge_waiting(x->o.nudge, &a->ref, &a->claim);
}

static void filter_job_release(struct filter_job *j)
{
	if (j->rating)
		extender_rating_end(j->rating);
	free(j->rates.raw);
	free(j->rates.ok);
	free(j->v);
	extender_loop_release(&j->l);
	buf_release(&j->reasons);
}

void extender_filter(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct extender *x = ctx;
	struct verb_args a;
	struct filter_job j = { .l.a = &a, .invalid_reason = -1, .no_status_reason = -1 };
	if (extender_not_ready(x, resp, 200))
		return;
	buf_init(&j.reasons, (size_t)1 << 28);
	if (extender_parse_args(x, req, &a, resp))
		goto out;
	if (a.claim_ok && claim_wants_gpu(&a.claim) && backlog_wait(&x->backlog, x->o.bind_queue_limit_ms) > 0)
		metrics_inc(M_FILTER_WAITS, 0);
	if (filter_start(x, &j, resp))
		goto out;
	filter_decide(x, &j);
	tell_unsatisfiable(x, &j);
	tell_nudger(x, &j);
	if (j.oom)
		httpd_error(resp, 500, "out of memory");
	else
		filter_reply(&j, req, resp);
out:
	filter_job_release(&j);
	extender_args_release(&a);
}
