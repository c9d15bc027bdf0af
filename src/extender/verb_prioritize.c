/*
 * POST /prioritize: each node's rating under the pod's policy, scaled to
 * kube-scheduler's 0..10. The rating of one node is also what filter
 * makes for the nodes that pass (kept for this prioritize, or used by
 * filterKeepsBest).
 */
#include "extender_impl.h"
#include "metrics.h"

#include <stdlib.h>
#include <string.h>

/* ---- rating one node, and a request's nodes ------------------------------ */

bool extender_rate_node(void *job, const struct cache_node *cn, struct class_result *r)
{
	const struct prio_job *j = job;
	const struct verb_args *a = j->l.a;
	struct fit f;
	*r = (struct class_result){ .reason = -1 };
	if (j->l.by_counts && policy_rate_whole(j->pctx.id, &cn->whole, &a->claim, &r->raw)) {
		r->ok = true;
		return true;
	}
	r->ok = policy_place(&j->pctx, cn->node, &a->claim, &f, &r->raw);
	if (r->ok)
		return true;
	struct gpu_node *own = extender_without_own(cn, a);
	if (own)
		r->ok = policy_place(&j->pctx, own, &a->claim, &f, &r->raw);
	gpu_node_free(own);
	return !own;
}

void extender_rate_nodes(struct prio_job *j)
{
	const struct verb_args *a = j->l.a;
	for (int i = 0; i < a->n; i++) {
		const struct cache_node *cn = j->l.node[i];
		if ((j->only && j->only[i].reason >= 0) || (j->known && j->known[i]))
			continue;
		if (!claim_wants_gpu(&a->claim)) {
			/* Pods without GPUs: prefer nodes that have none, keep GPUs for GPU pods. */
			j->ok[i] = true;
			j->raw[i] = !cn || cn->node->ndev == 0;
			continue;
		}
		if (!cn || !cn->has_gns)
			continue;
		struct class_result r = loop_result(&j->l, i, extender_rate_node, j);
		j->ok[i] = r.ok;
		j->raw[i] = r.raw;
	}
}

void extender_rating_begin(struct extender *x, struct prio_job *j, enum policy_id policy)
{
	j->wl = extender_wl_acquire(x);
	j->pctx = (struct policy_ctx){ .id = policy, .wl = j->wl ? &j->wl->wl : NULL, .seed = policy_hash(j->l.a->ref.uid) };
	j->l.by_counts = j->l.a->claim_ok && fit_whole_applies(&j->l.a->claim) &&
			 (policy == POLICY_BINPACK || policy == POLICY_SPREAD);
	j->l.rating = true;
}

void extender_rating_end(struct prio_job *j)
{
	extender_wl_release(j->wl);
	j->wl = NULL;
}

struct ratings_key extender_rating_key(const struct prio_job *j)
{
	return (struct ratings_key){ .uid = j->l.a->ref.uid, .policy = j->pctx.id,
				     .workload = j->wl ? j->wl->wl.version : 0 };
}

/* ---- the verb ------------------------------------------------------------ */

/*
 * Rates the request's nodes: those unchanged since the pod's filter rated
 * them (known[i] set) get its ratings, the others are rated now.
 */
static void rate_request(struct extender *x, struct prio_job *j, enum policy_id policy, bool *known)
{
	const struct verb_args *a = j->l.a;
	struct snapshot *snap = cache_acquire(x->o.cache);
	snapshot_find_all(snap, a->names, a->n, j->l.node);
	extender_rating_begin(x, j, policy);
	struct ratings_key k = extender_rating_key(j);
	int kept = ratings_get(&x->ratings, &k, j->l.node, a->n, j->raw, j->ok, known);
	metrics_add(M_RATINGS, RATINGS_KEPT, (uint64_t)kept);
	metrics_add(M_RATINGS, RATINGS_MADE, (uint64_t)(a->n - kept));
	if (kept < a->n) {
		j->known = kept ? known : NULL;
		extender_rate_nodes(j);
	}
	extender_rating_end(j);
	snapshot_release(snap);
}

/* The HostPriorityList: the nodes that score, with their scores. 0, or what the last buf_add* said. */
static int add_scores(struct buf *out, const struct verb_args *a, const int64_t *score)
{
	buf_addc(out, '[');
	bool first = true;
	for (int i = 0; i < a->n; i++) {
		/* A node left out gets 0 from an extender: the scheduler encodes and
		 * decodes in its serial cycle only the nodes that score (binpack on a
		 * filling cluster: a few of hundreds). */
		if (score[i] <= 0)
			continue;
		/* Scores are 1..10: two digits by hand, not printf for every node. */
		char tail[16] = ",\"Score\":";
		size_t t = strlen(tail);
		if (score[i] >= 10)
			tail[t++] = (char)('0' + score[i] / 10);
		tail[t++] = (char)('0' + score[i] % 10);
		tail[t++] = '}';
		buf_adds(out, first ? "{\"Host\":" : ",{\"Host\":");
		extender_add_name(out, a, i);
		buf_add(out, tail, t);
		first = false;
	}
	return buf_adds(out, "]\n");
}

void extender_prioritize(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct extender *x = ctx;
	struct verb_args a;
	int64_t *score = NULL;
	bool *known = NULL;
	struct prio_job j = { .l.a = &a };
	if (extender_not_ready(x, resp, 503))
		return;
	if (extender_parse_args(x, req, &a, resp))
		goto out;
	enum policy_id policy = extender_policy(x, &a.claim);
	j.raw = calloc((size_t)a.n + 1, sizeof(*j.raw));
	j.ok = calloc((size_t)a.n + 1, sizeof(*j.ok));
	score = calloc((size_t)a.n + 1, sizeof(*score));
	known = calloc((size_t)a.n + 1, sizeof(*known));
	if (extender_loop_init(&j.l, &a, extender_fit_by_state(&a) && !policy_flags(policy)) ||
	    !j.raw || !j.ok || !score || !known) {
		httpd_error(resp, 500, "out of memory");
		goto out;
	}
	if (a.claim_ok)
		rate_request(x, &j, policy, known);
	policy_scale(j.raw, j.ok, (size_t)a.n, score);
	/* Each name comes back with 23 bytes of {"Host":,"Score":10}: one allocation. */
	buf_reserve(&resp->body, req->body_len + (size_t)a.n * 23 + 64);
	if (add_scores(&resp->body, &a, score))
		httpd_error(resp, 500, "reply too large");
out:
	extender_loop_release(&j.l);
	free(j.raw);
	free(j.ok);
	free(score);
	free(known);
	extender_args_release(&a);
}
