/* The extender verbs: request decoding, the core on one snapshot, replies. */
#include "extender.h"
#include "choices.h"
#include "class_memo.h"
#include "clock.h"
#include "jsonarena.h"
#include "jsonscan.h"
#include "log.h"
#include "metrics.h"
#include "pending.h"
#include "ratings.h"
#include "workload.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
};

/* ---- the learned workload ------------------------------------------------ */

static void wl_copy_release(struct wl_copy *w)
{
	if (w && atomic_fetch_sub(&w->refs, 1) == 1)
		free(w);
}

static struct wl_copy *wl_acquire(struct extender *x)
{
	pthread_mutex_lock(&x->wl_lock);
	struct wl_copy *w = x->wl_current;
	if (w)
		atomic_fetch_add(&w->refs, 1);
	pthread_mutex_unlock(&x->wl_lock);
	return w;
}

/* Makes a copy of the master mix the current one; returns the replaced copy. Under wl_lock. */
static struct wl_copy *wl_publish(struct extender *x)
{
	struct wl_copy *w = malloc(sizeof(*w));
	if (!w)
		return NULL;
	atomic_init(&w->refs, 1);
	memcpy(&w->wl, &x->wl_master, sizeof(w->wl));
	struct wl_copy *old = x->wl_current;
	x->wl_current = w;
	return old;
}

/* Learns a scheduled pod's shape; publishes a new copy when the mix moved. */
static void wl_observe(struct extender *x, const struct claim *c)
{
	pthread_mutex_lock(&x->wl_lock);
	uint32_t before = x->wl_master.version;
	workload_observe(&x->wl_master, c);
	struct wl_copy *old = NULL;
	if (x->wl_master.version != before || !x->wl_current)
		old = wl_publish(x);
	pthread_mutex_unlock(&x->wl_lock);
	wl_copy_release(old);
}

/* ---- lifecycle ----------------------------------------------------------- */

struct extender *extender_new(const struct extender_opts *opts)
{
	struct extender *x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	x->o = *opts;
	x->res = *opts->res;
	x->o.res = &x->res;
	if (pending_init(&x->pending, PENDING_CAP)) {
		free(x);
		return NULL;
	}
	x->assume_choices = opts->assume_binds && opts->filter_keeps_best == 1;
	if (x->assume_choices && choices_init(&x->choices, CHOICES_CAP)) {
		pending_release(&x->pending);
		free(x);
		return NULL;
	}
	pthread_mutex_init(&x->wl_lock, NULL);
	ratings_init(&x->ratings);
	workload_init(&x->wl_master, true);
	wl_publish(x);   /* none yet: replaces nothing */
	return x;
}

void extender_free(struct extender *x)
{
	if (!x)
		return;
	pending_release(&x->pending);
	choices_release(&x->choices);
	wl_copy_release(x->wl_current);
	pthread_mutex_destroy(&x->wl_lock);
	ratings_release(&x->ratings);
	free(x);
}

/* ---- request decoding ---------------------------------------------------- */

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
	bool by_name;           /* NodeNames (nodeCacheCapable) vs Nodes */
	int n;
	const char **names;
	int32_t *plain_len;     /* NodeNames form: the name's length when it needs no escaping, else -1 */
	cJSON **items;          /* Nodes form: the node objects, to echo back */
};

static void args_release(struct verb_args *a)
{
	claim_release(&a->claim);
	free(a->names);
	free(a->plain_len);
	free(a->items);
	free(a->text);
	jsonarena_delete(a->root);
	jsonarena_delete(a->nodes_root);
}

static int parse_pod(struct extender *x, struct verb_args *a, const cJSON *pod,
		     struct http_response *resp)
{
	a->pod = pod;
	if (!cJSON_IsObject(a->pod)) {
		httpd_error(resp, 400, "request has no Pod object");
		return -1;
	}
	api_pod_ref(a->pod, &a->ref);
	cache_claims_rdlock(x->o.cache);
	a->claim_ok = !api_pod_claim(a->pod, x->o.res, cache_gpuclaim_lookup, x->o.cache,
				     &a->claim, a->claim_err, sizeof(a->claim_err));
	cache_claims_unlock(x->o.cache);
	if (a->claim_ok && a->ref.uid[0])
		pending_put(&x->pending, a->ref.uid, &a->claim);
	return 0;
}

/*
 * NodeNames, the request's one big value, without a cJSON node per name:
 * each name is decoded in place in a->text (a decoded string and its NUL
 * never outgrow the literal).
 */
static int parse_names(struct verb_args *a, struct jsonscan *s, struct http_response *resp)
{
	if (jsonscan_open(s, '[')) {
		httpd_error(resp, 400, "NodeNames must be a list of strings");
		return -1;
	}
	a->by_name = true;
	int cap = 0, seen = 0, more;
	while ((more = jsonscan_next(s, '[', &seen, NULL)) == 1) {
		struct json_str lit;
		if (jsonscan_string(s, &lit)) {
			httpd_error(resp, 400, "NodeNames[%d] is not a string", a->n);
			return -1;
		}
		char *name = (char *)lit.raw + 1;   /* inside a->text, which we own */
		long len = json_str_decode(&lit, name);
		if (len < 0) {
			httpd_error(resp, 400, "NodeNames[%d] has an invalid \\u escape", a->n);
			return -1;
		}
		if (a->n == cap) {
			cap = cap ? cap * 2 : 1024;
			const char **names = realloc(a->names, (size_t)cap * sizeof(*names));
			if (names)
				a->names = names;
			int32_t *lens = realloc(a->plain_len, (size_t)cap * sizeof(*lens));
			if (lens)
				a->plain_len = lens;
			if (!names || !lens) {
				httpd_error(resp, 500, "out of memory");
				return -1;
			}
		}
		/* A literal without escapes has nothing to escape on the way back. */
		a->plain_len[a->n] = lit.escaped || len > INT32_MAX ? -1 : (int32_t)len;
		a->names[a->n++] = name;
	}
	if (more) {
		httpd_error(resp, 400, "request body is not valid JSON (in NodeNames)");
		return -1;
	}
	return 0;
}

static cJSON *parse_member(const struct jsonscan *v)
{
	return v->p ? cJSON_ParseWithLength(v->p, (size_t)(v->end - v->p)) : NULL;
}

/* The Nodes form: the names from each item's metadata. */
static int parse_nodes(struct verb_args *a, const struct jsonscan *v, struct http_response *resp)
{
	a->nodes_root = parse_member(v);
	const cJSON *nodes = a->nodes_root;
	const cJSON *items = cJSON_GetObjectItem(nodes, "items");
	if (!cJSON_IsObject(nodes) || (items && !cJSON_IsNull(items) && !cJSON_IsArray(items))) {
		httpd_error(resp, 400, "request has neither NodeNames nor a Nodes list");
		return -1;
	}
	a->n = cJSON_GetArraySize(items);
	a->names = calloc((size_t)a->n + 1, sizeof(*a->names));
	a->items = calloc((size_t)a->n + 1, sizeof(*a->items));
	if (!a->names || !a->items) {
		httpd_error(resp, 500, "out of memory");
		return -1;
	}
	int i = 0;
	cJSON *it;
	cJSON_ArrayForEach(it, items) {
		const char *name = api_str(api_path(it, "metadata"), "name");
		if (!name) {
			httpd_error(resp, 400, "Nodes.items[%d] has no metadata.name", i);
			return -1;
		}
		a->items[i] = it;
		a->names[i++] = name;
	}
	return 0;
}

/* Writes node i's name as a JSON string. */
static void add_name(struct buf *out, const struct verb_args *a, int i)
{
	if (a->plain_len && a->plain_len[i] >= 0)
		buf_add_quoted(out, a->names[i], (size_t)a->plain_len[i]);
	else
		buf_add_json_str(out, a->names[i]);
}

/*
 * Decodes ExtenderArgs in one checked pass over the body; on a malformed
 * request sets a 400 reply. Of a member named twice the first counts (as
 * cJSON picks); names match ignoring case (as Go's encoding/json does).
 */
static int parse_args(struct extender *x, const struct http_request *req, struct verb_args *a,
		      struct http_response *resp)
{
	memset(a, 0, sizeof(*a));
	claim_init(&a->claim);
	a->text = malloc(req->body_len + 1);
	if (!a->text) {
		httpd_error(resp, 500, "out of memory");
		return -1;
	}
	memcpy(a->text, req->body, req->body_len);
	a->text[req->body_len] = '\0';
	struct jsonscan s = { a->text, a->text + req->body_len }, pod = { 0 }, nodes = { 0 };
	bool names_seen = false;
	int seen = 0, more = -1;
	struct json_str key;
	if (!jsonscan_open(&s, '{')) {
		while ((more = jsonscan_next(&s, '{', &seen, &key)) == 1) {
			if (!names_seen && json_str_ieq(&key, "NodeNames")) {
				names_seen = true;
				if (jsonscan_peek(&s) != 'n') {
					if (parse_names(a, &s, resp))
						return -1;
					continue;
				}
			}
			jsonscan_peek(&s);   /* past the blanks: value starts at the value */
			struct jsonscan value = s;
			if (jsonscan_skip(&s))
				break;
			value.end = s.p;
			if (!pod.p && json_str_ieq(&key, "Pod"))
				pod = value;
			else if (!nodes.p && json_str_ieq(&key, "Nodes"))
				nodes = value;
		}
	}
	if (more || !jsonscan_at_end(&s)) {
		httpd_error(resp, 400, "request body is not a JSON object");
		return -1;
	}
	a->root = parse_member(&pod);
	if (parse_pod(x, a, a->root, resp))
		return -1;
	a->uid_bits = cache_uid_bits(a->ref.uid);
	return a->by_name ? 0 : parse_nodes(a, &nodes, resp);
}

/* Refuses the request (with status, or 200 and Error where the protocol wants that) until ready. */
static bool not_ready(struct extender *x, struct http_response *resp, int status)
{
	char why[300];
	if (!x->o.ready || x->o.ready(x->o.ready_ctx, why, sizeof(why)))
		return false;
	httpd_error(resp, status, "extender not ready: %s", why);
	return true;
}

/* Whether the request's pod has a reservation of its own on the node. */
static bool own_alloc(const struct cache_node *cn, const struct verb_args *a)
{
	if (!a->ref.uid[0] || !cache_node_may_hold(cn, a->uid_bits))
		return false;
	const struct alloc_rec *r = cn->allocs;
	for (int i = 0; i < cn->nallocs; i++, r = alloc_rec_next(r))
		if (!strcmp(alloc_rec_uid(r), a->ref.uid))
			return true;
	return false;
}

/* Takes the usage of the records of the listed pods off n. */
static void unapply_pods(struct gpu_node *n, const struct cache_node *cn, const char *const *uids, int nuid)
{
	const struct alloc_rec *r = cn->allocs;
	for (int i = 0; i < cn->nallocs; i++, r = alloc_rec_next(r))
		for (int k = 0; k < nuid; k++)
			if (!strcmp(alloc_rec_uid(r), uids[k])) {
				struct alloc a;
				alloc_rec_unpack(r, &a);
				alloc_unapply(n, &a);
			}
}

/*
 * The node without this pod's own reservation, or NULL when it holds none
 * there. A bind of the pod that broke off half-way leaves one until the
 * reaper's bound; a retried bind reuses it, so the node must not count it
 * against the pod. (Asked of each node that did not fit, most nodes of a
 * busy cluster: the view's uid bits answer it without reading the records.)
 */
static struct gpu_node *without_own(const struct cache_node *cn, const struct verb_args *a)
{
	struct gpu_node *n = own_alloc(cn, a) ? gpu_node_clone(cn->node) : NULL;
	const char *uid = a->ref.uid;
	if (n)
		unapply_pods(n, cn, &uid, 1);
	return n;
}

static enum policy_id claim_policy(const struct extender *x, const struct claim *c)
{
	return c->policy >= 0 ? (enum policy_id)c->policy : x->o.default_policy;
}

/* ---- the node loops of filter and prioritize ----------------------------- */

/*
 * Whether the nodes of one state share their fit in this request
 * (class_memo.h). Filter needs only the fit; prioritize also needs its
 * policy to read nothing but the state (policy_flags() == 0).
 */
static bool fit_by_state(const struct verb_args *a)
{
	return a->claim_ok && claim_wants_gpu(&a->claim) && !claim_reads_node_strings(&a->claim);
}

/* What the filter and prioritize node loops share. */
struct node_loop {
	const struct verb_args *a;
	struct class_memo *memo;          /* NULL: every node on its own */
	const struct cache_node **node;   /* the request's nodes in the snapshot, NULL where unknown */
	bool by_counts;                   /* a node's fit_whole counts decide most nodes (fit_whole_applies) */
	bool rating;                      /* prioritize: the counts must also rate (policy_rate_whole) */
};

/* Whether node cn's counts decide it: the claim fits, and for a rating the node's use is whole. */
static bool counts_decide(const struct node_loop *l, const struct cache_node *cn)
{
	return l->by_counts && cn->whole.free >= l->a->claim.count && (!l->rating || cn->whole.exact);
}

/* A memo when results go by state; NULL otherwise, or when out of memory (then every node on its own). */
static struct class_memo *memo_new(bool by_state)
{
	struct class_memo *m = by_state ? malloc(sizeof(*m)) : NULL;
	if (m)
		class_memo_init(m);
	return m;
}

/* Room for the request's nodes, and a memo when their results go by state. 0, or -1 (no memory). */
static int loop_init(struct node_loop *l, const struct verb_args *a, bool by_state)
{
	l->a = a;
	l->node = malloc(((size_t)a->n + 1) * sizeof(*l->node));
	l->memo = memo_new(by_state);
	return l->node ? 0 : -1;
}

static void loop_release(struct node_loop *l)
{
	free(l->node);
	free(l->memo);
}

/* How many nodes ahead of the one decided the loops fetch a node to decide. */
#define DECIDE_AHEAD 4

/*
 * Fetches node i + DECIDE_AHEAD's devices unless its state's result is
 * known or its counts decide it. When counts may, the header that holds
 * them is fetched DECIDE_AHEAD nodes earlier, so that reading it does not
 * wait.
 */
static void fetch_ahead(const struct node_loop *l, int i)
{
	if (l->by_counts && i + 2 * DECIDE_AHEAD < l->a->n && l->node[i + 2 * DECIDE_AHEAD])
		__builtin_prefetch(l->node[i + 2 * DECIDE_AHEAD]);
	const struct cache_node *cn = i + DECIDE_AHEAD < l->a->n ? l->node[i + DECIDE_AHEAD] : NULL;
	if (cn && cn->has_gns && !counts_decide(l, cn) && (!l->memo || !class_memo_find(l->memo, cn->state)))
		cache_node_prefetch(cn);
}

/* Decides node i into r; returns whether r holds for every node in its state. */
typedef bool (*decide_fn)(void *job, const struct cache_node *cn, struct class_result *r);

/* Node i's result: the memo's when it knows the state, else decide's (learned when shared). */
static struct class_result result_of(const struct node_loop *l, int i, decide_fn decide, void *job)
{
	fetch_ahead(l, i);
	const struct cache_node *cn = l->node[i];
	struct class_memo *m = cn && cn->has_gns ? l->memo : NULL;   /* a state needs a GpuNodeStatus */
	const struct class_result *known = m ? class_memo_find(m, cn->state) : NULL;
	if (m)
		class_memo_count(m, known != NULL);
	/* A failure does not hold where the pod has a reservation of its own (see without_own). */
	if (known && (known->ok || !own_alloc(cn, l->a)))
		return *known;
	struct class_result r;
	if (decide(job, cn, &r) && m && !known)
		class_memo_add(m, cn->state, &r);
	return r;
}

/* ---- devices assumed ahead of the ledger -------------------------------- */

/*
 * Counts the devices the pod would take on node in the cache as assumed
 * (cache_assume), chosen on the cache's view as the bind will choose on the
 * ledger; the ledger decides. False when none fit there.
 */
static bool assume_devices(struct extender *x, const struct api_pod_ref *pod, const char *node, const struct claim *c)
{
	struct bind_request br = {
		.ns = pod->ns, .name = pod->name, .uid = pod->uid, .node = node, .claim = c,
		.policy = { .id = claim_policy(x, c), .seed = policy_hash(pod->uid) },
	};
	bool ok = false;
	cache_lock(x->o.cache);
	const struct gpu_node *view = cache_peek(x->o.cache, node);
	struct fit f;
	double score;
	if (view && policy_place(&br.policy, view, c, &f, &score)) {
		struct alloc al;
		ok = !bind_alloc(&al, &br, view, &f, NULL, 0) && !cache_assume(x->o.cache, node, &al);
	}
	cache_unlock(x->o.cache);
	return ok;
}

static void forget_assumed(struct extender *x, const char *uid, const char *node)
{
	cache_lock(x->o.cache);
	cache_forget(x->o.cache, uid, node);
	cache_unlock(x->o.cache);
}

/* Stops counting the pod's earlier choice (uid NULL: none), and every choice expired. */
static void forget_choices(struct extender *x, const char *uid)
{
	struct choice old[16];
	if (uid && choices_take(&x->choices, uid, &old[0]))
		forget_assumed(x, old[0].uid, old[0].node);
	int n;
	while ((n = choices_take_expired(&x->choices, clock_mono_ms(), old, 16)) > 0)
		for (int i = 0; i < n; i++)
			forget_assumed(x, old[i].uid, old[i].node);
}

/* A filter passed the pod to one node only: its devices there count until its bind arrives. */
static void assume_choice(struct extender *x, const struct api_pod_ref *pod, const char *node, const struct claim *c)
{
	if (assume_devices(x, pod, node, c) &&
	    !choices_put(&x->choices, pod->uid, node, clock_mono_ms() + CHOICE_TTL_MS))
		forget_assumed(x, pod->uid, node);   /* full: not counted rather than never forgotten */
}

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

/* ---- filter -------------------------------------------------------------- */

/* One filter request's node loop. */
struct filter_job {
	struct node_loop l;
	enum gpu_pack pack;
	struct verdict {
		int32_t reason;    /* offset into reasons; -1: the node passes */
		bool unresolvable;
		bool kept_out;     /* passes, but filterKeepsBest kept better nodes */
	} *v;
	struct buf reasons;        /* the reasons of rejected nodes, NUL-separated */
	int32_t invalid_reason;    /* offset of the reason for every node when the claim is invalid, or -1 */
	int32_t no_status_reason;  /* offset of the reason for nodes without a GpuNodeStatus, or -1 */
	struct prio_job *rating;   /* rates each node that passes, while its devices are in the caches; or NULL */
	bool oom;
};

static bool prio_node(void *job, const struct cache_node *cn, struct class_result *r);

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
		holds = prio_node(j->rating, cn, &rated);
		r->raw = rated.raw;
		r->rated = rated.ok;
		if (rated.ok)
			return holds;
	}
	if (counts_decide(&j->l, cn) || fit_possible(cn->node, &a->claim))
		return holds;
	struct gpu_node *own = without_own(cn, a);
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
		struct class_result r = result_of(&j->l, i, filter_node, j);
		j->v[i].reason = r.ok ? -1 : r.reason;
		j->v[i].unresolvable = r.unresolvable;
		if (j->rating) {
			j->rating->raw[i] = r.raw;
			j->rating->ok[i] = r.ok && r.rated;
		}
	}
}

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
		add_name(out, a, i);
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

/* ---- rating: prioritize's node loop, and filter's that keeps the best ---- */

/* Rates one node into r; returns whether r holds for every node in cn's state. A decide_fn. */
static bool prio_node(void *job, const struct cache_node *cn, struct class_result *r)
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
	struct gpu_node *own = without_own(cn, a);
	if (own)
		r->ok = policy_place(&j->pctx, own, &a->claim, &f, &r->raw);
	gpu_node_free(own);
	return !own;
}

static void prio_nodes(struct prio_job *j)
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
		struct class_result r = result_of(&j->l, i, prio_node, j);
		j->ok[i] = r.ok;
		j->raw[i] = r.raw;
	}
}

/* Readies j to rate nodes under policy, with the learned workload (rating_end lets it go). */
static void rating_begin(struct extender *x, struct prio_job *j, enum policy_id policy)
{
	j->wl = wl_acquire(x);
	j->pctx = (struct policy_ctx){ .id = policy, .wl = j->wl ? &j->wl->wl : NULL, .seed = policy_hash(j->l.a->ref.uid) };
	j->l.by_counts = j->l.a->claim_ok && fit_whole_applies(&j->l.a->claim) &&
			 (policy == POLICY_BINPACK || policy == POLICY_SPREAD);
	j->l.rating = true;
}

static void rating_end(struct prio_job *j)
{
	wl_copy_release(j->wl);
	j->wl = NULL;
}

/* What the ratings made under j's policy and workload are kept under. */
static struct ratings_key rating_key(const struct prio_job *j)
{
	return (struct ratings_key){ .uid = j->l.a->ref.uid, .policy = j->pctx.id,
				     .workload = j->wl ? j->wl->wl.version : 0 };
}

/* Rates j's nodes (found in a snapshot the caller holds) under policy, with the learned workload. */
static void rate_nodes(struct extender *x, struct prio_job *j, enum policy_id policy)
{
	rating_begin(x, j, policy);
	prio_nodes(j);
	rating_end(j);
}

/* ---- filter keeping the best --------------------------------------------- */

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
		own = (struct prio_job){
			.l = { .a = a, .node = fj->l.node, .memo = memo_new(fit_by_state(a) && !policy_flags(policy)) },
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
		if (j->v[i].reason >= 0 || j->v[i].kept_out)
			continue;
		view[n] = j->l.node[i] ? j->l.node[i]->id : 0;
		raw[n] = j->rating->raw[i];
		ok[n++] = j->rating->ok[i];
	}
	struct ratings_key k = rating_key(j->rating);
	ratings_put(&x->ratings, &k, view, raw, ok, n);   /* (they are its now) */
}

/* ---- the filter and prioritize verbs ------------------------------------ */

void extender_filter(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct extender *x = ctx;
	struct verb_args a;
	struct filter_job j = { .l.a = &a, .invalid_reason = -1, .no_status_reason = -1 };
	struct prio_job rating = { .raw = NULL };
	if (not_ready(x, resp, 200))
		return;
	buf_init(&j.reasons, (size_t)1 << 28);
	if (parse_args(x, req, &a, resp))
		goto out;
	enum policy_id policy = claim_policy(x, &a.claim);
	j.pack = policy == POLICY_SPREAD ? PACK_SPREAD : PACK_BINPACK;
	j.v = calloc((size_t)a.n + 1, sizeof(*j.v));
	if (loop_init(&j.l, &a, fit_by_state(&a)) || !j.v) {
		httpd_error(resp, 500, "out of memory");
		goto out;
	}
	j.l.by_counts = a.claim_ok && fit_whole_applies(&a.claim);
	/*
	 * The nodes that pass are rated too, for the prioritize that follows
	 * (or the nodes filterKeepsBest keeps), where the state's memo allows:
	 * a rating that reads more than the state is not the state's.
	 */
	if (a.claim_ok && claim_wants_gpu(&a.claim) && (!j.l.memo || !policy_flags(policy))) {
		rating.l.a = &a;
		rating.raw = calloc((size_t)a.n + 1, sizeof(*rating.raw));
		rating.ok = calloc((size_t)a.n + 1, sizeof(*rating.ok));
		if (rating.raw && rating.ok) {
			rating_begin(x, &rating, policy);
			j.rating = &rating;
		}
	}
	bool choosing = x->assume_choices && a.claim_ok && claim_wants_gpu(&a.claim);
	if (choosing)
		forget_choices(x, a.ref.uid);   /* a pod filtered again does not compete with itself */
	struct snapshot *snap = cache_acquire(x->o.cache);
	snapshot_find_all(snap, a.names, a.n, j.l.node);
	if (!route_gang(x, &j)) {
		filter_nodes(&j);
		if (x->o.filter_keeps_best > 0 && a.claim_ok && claim_wants_gpu(&a.claim) &&
		    keep_best(x, &j, policy, x->o.filter_keeps_best))
			j.oom = true;
		else if (j.rating && !j.oom)
			keep_ratings(x, &j);
		int chosen = -1, passed = 0;
		for (int i = 0; choosing && i < a.n; i++)
			if (j.v[i].reason < 0 && !j.v[i].kept_out && j.l.node[i])
				chosen = i, passed++;
		if (passed == 1)
			assume_choice(x, &a.ref, j.l.node[chosen]->node->name, &a.claim);
	}
	snapshot_release(snap);
	if (j.oom) {
		httpd_error(resp, 500, "out of memory");
		goto out;
	}

	struct buf *out = &resp->body;
	buf_reserve(out, req->body_len + 64);   /* the names that pass, in one allocation */
	if (a.by_name) {
		buf_adds(out, "{\"NodeNames\":[");
		bool first = true;
		for (int i = 0; i < a.n; i++) {
			if (j.v[i].reason >= 0 || j.v[i].kept_out)
				continue;
			if (!first)
				buf_addc(out, ',');
			first = false;
			add_name(out, &a, i);
		}
		buf_adds(out, "],\"Nodes\":null");
	} else {
		/* Not cache-capable: the survivors go back as whole Node objects. */
		buf_adds(out, "{\"NodeNames\":null,\"Nodes\":{\"metadata\":{},\"items\":[");
		bool first = true;
		for (int i = 0; i < a.n; i++) {
			if (j.v[i].reason >= 0 || j.v[i].kept_out)
				continue;
			char *js = cJSON_PrintUnformatted(a.items[i]);
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
	add_failed_map(out, "FailedNodes", &j, false);
	add_failed_map(out, "FailedAndUnresolvableNodes", &j, true);
	if (buf_adds(out, ",\"Error\":\"\"}\n"))
		httpd_error(resp, 500, "reply too large");
out:
	if (j.rating)
		rating_end(j.rating);
	free(rating.raw);
	free(rating.ok);
	free(j.v);
	loop_release(&j.l);
	buf_release(&j.reasons);
	args_release(&a);
}

void extender_prioritize(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct extender *x = ctx;
	struct verb_args a;
	int64_t *score = NULL;
	bool *known = NULL;
	struct prio_job j = { .l.a = &a };
	if (not_ready(x, resp, 503))
		return;
	if (parse_args(x, req, &a, resp))
		goto out;
	enum policy_id policy = claim_policy(x, &a.claim);
	j.raw = calloc((size_t)a.n + 1, sizeof(*j.raw));
	j.ok = calloc((size_t)a.n + 1, sizeof(*j.ok));
	score = calloc((size_t)a.n + 1, sizeof(*score));
	known = calloc((size_t)a.n + 1, sizeof(*known));
	if (loop_init(&j.l, &a, fit_by_state(&a) && !policy_flags(policy)) || !j.raw || !j.ok || !score || !known) {
		httpd_error(resp, 500, "out of memory");
		goto out;
	}
	if (a.claim_ok) {
		struct snapshot *snap = cache_acquire(x->o.cache);
		snapshot_find_all(snap, a.names, a.n, j.l.node);
		rating_begin(x, &j, policy);
		/* Nodes unchanged since the pod's filter rated them: its ratings; the others rated now. */
		struct ratings_key k = rating_key(&j);
		int kept = ratings_get(&x->ratings, &k, j.l.node, a.n, j.raw, j.ok, known);
		metrics_add(M_RATINGS, RATINGS_KEPT, (uint64_t)kept);
		metrics_add(M_RATINGS, RATINGS_MADE, (uint64_t)(a.n - kept));
		if (kept < a.n) {
			j.known = kept ? known : NULL;
			prio_nodes(&j);
		}
		rating_end(&j);
		snapshot_release(snap);
	}
	policy_scale(j.raw, j.ok, (size_t)a.n, score);
	struct buf *out = &resp->body;
	/* Each name comes back with 23 bytes of {"Host":,"Score":10}: one allocation. */
	buf_reserve(out, req->body_len + (size_t)a.n * 23 + 64);
	buf_addc(out, '[');
	bool first = true;
	for (int i = 0; i < a.n; i++) {
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
		add_name(out, &a, i);
		buf_add(out, tail, t);
		first = false;
	}
	if (buf_adds(out, "]\n"))
		httpd_error(resp, 500, "reply too large");
out:
	loop_release(&j.l);
	free(j.raw);
	free(j.ok);
	free(score);
	free(known);
	args_release(&a);
}

/* ---- bind ---------------------------------------------------------------- */

int bind_alloc(struct alloc *a, const struct bind_request *req, const struct gpu_node *n, const struct fit *f,
	       char *err, size_t errlen)
{
	const struct claim *c = req->claim;
	memset(a, 0, sizeof(*a));
	snprintf(a->uid, sizeof(a->uid), "%s", req->uid);
	alloc_set_pod(a, req->ns, req->name);
	a->since = clock_wall_s();
	a->mode = c->mode;
	a->mem_mib = c->mode == CLAIM_SHARED ? c->mem_mib : 0;
	a->core = c->mode == CLAIM_SHARED ? c->core : 0;
	for (int k = 0; k < f->ndev; k++) {
		if (alloc_add_id(a, n->dev[f->dev[k]].id)) {
			if (err)
				snprintf(err, errlen, "node %s: the devices' ids lie more than %d apart", req->node, ALLOC_ID_SPAN);
			return -1;
		}
	}
	return 0;
}

static void bind_reply(struct http_response *resp, const char *err)
{
	buf_clear(&resp->body);
	buf_adds(&resp->body, "{\"Error\":");
	buf_add_json_str(&resp->body, err);
	buf_adds(&resp->body, "}\n");
}

/* The pod and node of a bind request (strings in root); false unless all are there. */
struct bind_args {
	const char *name, *ns, *uid, *node;
};

static bool bind_args(const cJSON *root, struct bind_args *a)
{
	/* Any casing of the keys, as kube-scheduler's own decoder accepts. */
	a->name = cJSON_GetStringValue(cJSON_GetObjectItem(root, "PodName"));
	a->ns = cJSON_GetStringValue(cJSON_GetObjectItem(root, "PodNamespace"));
	a->uid = cJSON_GetStringValue(cJSON_GetObjectItem(root, "PodUID"));
	a->node = cJSON_GetStringValue(cJSON_GetObjectItem(root, "Node"));
	return cJSON_IsObject(root) && a->name && a->ns && a->uid && a->node && *a->name && *a->node;
}

void extender_bind_arrive(void *ctx, const struct http_request *req)
{
	struct extender *x = ctx;
	if (!x->o.assume_binds)
		return;
	cJSON *root = cJSON_ParseWithLength(req->body, req->body_len);
	struct bind_args a;
	struct claim c;
	claim_init(&c);
	bool have_args = bind_args(root, &a);
	if (have_args && x->assume_choices)
		forget_choices(x, a.uid);      /* the bind's own assumption below replaces the filter's */
	/* (A gang member's devices are its gang's place, counted already.) */
	if (have_args && pending_get(&x->pending, a.uid, &c) && claim_wants_gpu(&c) && !c.gang[0]) {
		/* kube-scheduler places its next pods while this bind waits on the API
		 * server: they must see these devices taken. */
		struct api_pod_ref pod = { .ns = a.ns, .name = a.name, .uid = a.uid };
		assume_devices(x, &pod, a.node, &c);
	}
	claim_release(&c);
	jsonarena_delete(root);
}

void extender_bind(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct extender *x = ctx;
	cJSON *root = cJSON_ParseWithLength(req->body, req->body_len);
	struct bind_args a;
	bool have_args = bind_args(root, &a);
	const char *name = a.name, *ns = a.ns, *uid = a.uid, *node = a.node;
	char err[512] = "";
	struct claim c;
	claim_init(&c);
	int result = BIND_ERROR;
	if (not_ready(x, resp, 200))
		goto out;
	if (!have_args) {
		httpd_error(resp, 400, cJSON_IsObject(root) ? "bind needs PodName, PodNamespace, PodUID and Node"
							     : "request body is not a JSON object (an ExtenderBindingArgs)");
		goto out;
	}
	if (!pending_get(&x->pending, uid, &c)) {
		if (!x->o.fetch) {
			snprintf(err, sizeof(err), "pod %s/%s (uid %s) was not seen in filter; its GPU request is unknown",
				 ns, name, uid);
			goto done;
		}
		if (x->o.fetch(x->o.fetch_ctx, ns, name, uid, &c, err, sizeof(err)))
			goto done;
	}
	struct wl_copy *w = wl_acquire(x);
	struct bind_request br = {
		.ns = ns, .name = name, .uid = uid, .node = node, .claim = &c,
		.policy = { .id = claim_policy(x, &c), .wl = w ? &w->wl : NULL, .seed = policy_hash(uid) },
	};
	result = x->o.bind(x->o.bind_ctx, &br, err, sizeof(err));
	wl_copy_release(w);
	if (result == BIND_OK) {
		/* The pending entry stays (it ages out): a retried bind must succeed again. */
		wl_observe(x, &c);
		err[0] = '\0';
	}
done:
	metrics_inc(M_BINDS, result);
	if (result == BIND_OK)
		log_info("bound", "pod=%s/%s node=%s", ns, name, node);
	else
		log_warn("bind refused", "pod=%s/%s node=%s reason=\"%s\"", ns, name, node, LOG_Q(err));
	bind_reply(resp, err);
out:
	/* What the arrival step assumed: the bind's own record (or nothing) stands now. */
	if (x->o.assume_binds && have_args)
		forget_assumed(x, uid, node);
	claim_release(&c);
	jsonarena_delete(root);
}

int extender_bind_local(void *ctx, const struct bind_request *req, char *err, size_t errlen)
{
	struct cache *c = ctx;
	if (!claim_wants_gpu(req->claim))
		return BIND_OK;      /* nothing to reserve, and no API server to tell */
	int rc = BIND_OK;
	cache_lock(c);
	struct alloc a;
	char where[256];
	if (cache_find_alloc(c, req->uid, &a, where, sizeof(where))) {
		if (strcmp(where, req->node)) {
			snprintf(err, errlen, "pod already holds GPUs on node %s", where);
			rc = BIND_CONFLICT;
		}
		goto out;   /* the same bind again: already done */
	}
	const struct gpu_node *n = cache_peek(c, req->node);
	struct fit f;
	double score;
	if (!n) {
		snprintf(err, errlen, "node %s is not in the inventory", req->node);
		rc = BIND_NO_FIT;
	} else if (!policy_place(&req->policy, n, req->claim, &f, &score)) {
		snprintf(err, errlen, "node %s no longer fits: %s", req->node, f.reason);
		rc = BIND_NO_FIT;
	} else if (bind_alloc(&a, req, n, &f, err, errlen)) {
		rc = BIND_ERROR;
	} else if (cache_add_alloc(c, req->node, &a)) {
		snprintf(err, errlen, "out of memory");
		rc = BIND_ERROR;
	}
out:
	cache_unlock(c);
	return rc;
}

/* ---- preempt ------------------------------------------------------------- */

/* The victims' UIDs of one node entry (meta form or full pods). */
static int victim_uids(const cJSON *entry, const char **uids, int max)
{
	int n = 0;
	const cJSON *p;
	cJSON_ArrayForEach(p, cJSON_GetObjectItem(entry, "Pods")) {
		const char *uid = cJSON_GetStringValue(cJSON_GetObjectItem(p, "UID"));
		if (!uid)
			uid = api_str(api_path(p, "metadata"), "uid");
		if (uid && n < max)
			uids[n++] = uid;
	}
	return n;
}

/* Would the claim fit on the node once the victims' GPUs are free? */
static bool fits_without(const struct cache_node *cn, const struct claim *c, const char **uids, int nv)
{
	if (!claim_wants_gpu(c))
		return true;
	if (!cn || !cn->has_gns)
		return false;
	struct gpu_node *n = gpu_node_clone(cn->node);
	if (!n)
		return false;
	unapply_pods(n, cn, uids, nv);
	bool ok = fit_possible(n, c);
	gpu_node_free(n);
	return ok;
}

void extender_preempt(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct extender *x = ctx;
	if (not_ready(x, resp, 503))
		return;
	struct verb_args a;
	memset(&a, 0, sizeof(a));
	claim_init(&a.claim);
	a.root = cJSON_ParseWithLength(req->body, req->body_len);
	if (!cJSON_IsObject(a.root)) {
		httpd_error(resp, 400, "request body is not a JSON object");
		goto out;
	}
	if (parse_pod(x, &a, cJSON_GetObjectItem(a.root, "Pod"), resp))
		goto out;
	const cJSON *map = cJSON_GetObjectItem(a.root, "NodeNameToMetaVictims");
	if (!cJSON_IsObject(map))
		map = cJSON_GetObjectItem(a.root, "NodeNameToVictims");
	struct buf *out = &resp->body;
	buf_adds(out, "{\"NodeNameToMetaVictims\":{");
	bool first = true;
	struct snapshot *snap = cache_acquire(x->o.cache);
	const cJSON *entry;
	cJSON_ArrayForEach(entry, map) {
		const char *uids[512];
		int nv = victim_uids(entry, uids, 512);
		if (!a.claim_ok || !nv || !fits_without(snapshot_find(snap, entry->string), &a.claim, uids, nv))
			continue;
		if (!first)
			buf_addc(out, ',');
		first = false;
		buf_add_json_str(out, entry->string);
		buf_adds(out, ":{\"Pods\":[");
		for (int k = 0; k < nv; k++) {
			buf_adds(out, k ? ",{\"UID\":" : "{\"UID\":");
			buf_add_json_str(out, uids[k]);
			buf_addc(out, '}');
		}
		double pdbs = 0;
		api_whole(cJSON_GetObjectItem(entry, "NumPDBViolations"), 0, 1e9, &pdbs);
		buf_printf(out, "],\"NumPDBViolations\":%lld}", (long long)pdbs);
	}
	snapshot_release(snap);
	if (buf_adds(out, "}}\n"))
		httpd_error(resp, 500, "reply too large");
out:
	args_release(&a);
}
