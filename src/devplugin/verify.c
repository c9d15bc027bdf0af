/*
 * Checking what kubelet did against what the extender bound. Pure: the
 * inventory, kubelet's record (PodResources), the node's pods and ledger
 * in; a verdict or a list of problems out.
 *
 * The guess in alloc.c can be wrong (kubelet's device-plugin calls name no
 * pod). kubelet's record does name the pod: it is written at admission,
 * before kubelet starts any container, so PreStartContainer, which kubelet
 * calls before each start with the container's device ids, can compare the
 * two and stop a container that was given another pod's devices. The audit
 * compares the same record with every binding and with the ledger, for
 * whatever the cause.
 */
#include "devplugin.h"

#include "ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dp_record_init(struct dp_record *rec)
{
	memset(rec, 0, sizeof(*rec));
}

void dp_record_release(struct dp_record *rec)
{
	free(rec->h);
	dp_record_init(rec);
}

int dp_record_add(struct dp_record *rec, const char *ns, const char *pod, const char *container,
		  const char *resource, const char *const *ids, size_t nids)
{
	int r = -1;
	for (int i = 0; i < DP_NRES && r < 0; i++)
		if (!strcmp(resource, dp_resource_name((enum dp_resource)i)))
			r = i;
	if (r < 0)
		return 0;
	if (rec->n == rec->cap) {
		int nc = rec->cap ? rec->cap * 2 : 16;
		struct dp_held *nh = realloc(rec->h, (size_t)nc * sizeof(*nh));
		if (!nh)
			return -1;
		rec->h = nh;
		rec->cap = nc;
	}
	struct dp_held *h = &rec->h[rec->n++];
	memset(h, 0, sizeof(*h));
	snprintf(h->ns, sizeof(h->ns), "%s", ns ? ns : "");
	snprintf(h->pod, sizeof(h->pod), "%s", pod ? pod : "");
	snprintf(h->container, sizeof(h->container), "%s", container ? container : "");
	h->r = (enum dp_resource)r;
	for (size_t k = 0; k < nids && h->nids < GPU_MAX_DEVICES; k++)
		snprintf(h->ids[h->nids++], DP_ID_MAX, "%s", ids[k]);
	return 0;
}

const char *dp_problem_name(enum dp_problem_kind k)
{
	static const char *const names[DP_NPROB] = { "held_twice", "unbound", "outside_binding", "not_in_ledger" };
	return k < DP_NPROB ? names[k] : "unknown";
}

/* ---- helpers ------------------------------------------------------------------- */

static int find_pod(const struct dp_pod *pods, int npods, const char *ns, const char *name)
{
	for (int i = 0; i < npods; i++)
		if (!strcmp(pods[i].ns, ns) && !strcmp(pods[i].name, name))
			return i;
	return -1;
}

/* The inventory index of the GPU a kubelet id of r names (a slot: its GPU); -1. */
static int gpu_of(const struct dp_inventory *inv, enum dp_resource r, const char *id)
{
	char kid[DP_ID_MAX];
	if (r == DP_SHARE) {
		if (!dp_slot_device(id, kid, sizeof(kid)))
			return -1;
	} else if (snprintf(kid, sizeof(kid), "%s", id) >= (int)sizeof(kid)) {
		return -1;
	}
	return dp_inventory_find_kubelet_id(inv, kid);
}

/* Whether inventory device d is in p's binding. */
static bool bound_to(const struct dp_inventory *inv, const struct dp_pod *p, int d)
{
	for (int k = 0; k < p->nids; k++)
		if (p->ids[k] == inv->dev[d].id)
			return true;
	return false;
}

/* The first pod other than skip whose binding holds device d; -1. */
static int bound_elsewhere(const struct dp_inventory *inv, const struct dp_pod *pods, int npods, int skip, int d)
{
	for (int i = 0; i < npods; i++)
		if (i != skip && !pods[i].finished && bound_to(inv, &pods[i], d))
			return i;
	return -1;
}

static bool held_has(const struct dp_held *h, const char *id)
{
	for (int k = 0; k < h->nids; k++)
		if (!strcmp(h->ids[k], id))
			return true;
	return false;
}

static bool wants(const struct dp_pod *p, enum dp_resource r)
{
	for (int k = 0; k < p->ncontainers; k++)
		if (p->c[k].want[r] > 0)
			return true;
	return false;
}

static void binding_str(const struct dp_pod *p, char *out, size_t size)
{
	out[0] = '\0';
	for (int k = 0; k < p->nids; k++) {
		size_t len = strlen(out);
		snprintf(out + len, size - len, "%s%d", k ? "," : "", p->ids[k]);
	}
}

/* ---- PreStartContainer ------------------------------------------------------------- */

/*
 * The pod kubelet gave the ids to: the pods (ns/name) of the record's
 * containers of r holding any of them. 1 and *at set when exactly one; 0
 * when none; 2 when more (then *at and *second are two of them).
 */
static int holder_of(const struct dp_record *rec, enum dp_resource r, const char *const *ids, size_t nids,
		     int *at, int *second)
{
	int found = 0;
	*at = *second = -1;
	for (int i = 0; i < rec->n; i++) {
		const struct dp_held *h = &rec->h[i];
		bool hit = false;
		for (size_t k = 0; h->r == r && k < nids && !hit; k++)
			hit = held_has(h, ids[k]);
		if (!hit)
			continue;
		if (*at < 0) {
			*at = i;
			found = 1;
		} else if (strcmp(rec->h[*at].ns, h->ns) || strcmp(rec->h[*at].pod, h->pod)) {
			*second = i;
			return 2;
		}
	}
	return found;
}

/* A claim ticket: pod k asks for one, and the agent handed this container k's own devices. */
static enum dp_verdict check_claim(const char *const *ids, size_t nids, const struct dp_held *h,
				   const struct dp_pod *pods, int npods, int ki, const char *delivered, int *owner,
				   char *msg, size_t msglen)
{
	const struct dp_pod *k = &pods[ki];
	if (!wants(k, DP_CLAIM)) {
		snprintf(msg, msglen, "kubelet gave claim ticket %s to pod %s/%s, which asks for no claim ticket",
			 nids ? ids[0] : "", h->ns, h->pod);
		return DP_REFUSED;
	}
	if (!delivered || !delivered[0]) {
		snprintf(msg, msglen, "the agent did not answer the Allocate of claim ticket %s itself (restarted since)",
			 nids ? ids[0] : "");
		return DP_UNVERIFIED;
	}
	if (strcmp(delivered, k->uid)) {
		int p = -1;
		for (int i = 0; i < npods && p < 0; i++)
			if (!strcmp(pods[i].uid, delivered))
				p = i;
		*owner = p;
		snprintf(msg, msglen,
			 "container %s of pod %s/%s was given the devices of pod %s (claim ticket %s); "
			 "not starting it",
			 h->container, h->ns, h->pod, p >= 0 ? pods[p].name : delivered, nids ? ids[0] : "");
		return DP_REFUSED;
	}
	return DP_VERIFIED;
}

/* Devices by id: each one inside pod ki's binding (a shared one only to a sharing pod). */
static enum dp_verdict check_devices(const struct dp_inventory *inv, enum dp_resource r, const char *const *ids,
				     size_t nids, const struct dp_held *h, const struct dp_pod *pods, int npods,
				     int ki, int *owner, char *msg, size_t msglen)
{
	const struct dp_pod *k = &pods[ki];
	char bound[256];
	binding_str(k, bound, sizeof(bound));
	for (size_t i = 0; i < nids; i++) {
		int d = gpu_of(inv, r, ids[i]);
		if (d >= 0 && bound_to(inv, k, d) && (r != DP_SHARE || k->shared))
			continue;
		int p = d >= 0 ? bound_elsewhere(inv, pods, npods, ki, d) : -1;
		*owner = p;
		if (p >= 0)
			snprintf(msg, msglen,
				 "container %s of pod %s/%s was given %s, which the extender bound to pod %s/%s "
				 "(%s/%s is bound to GPUs %s); not starting it",
				 h->container, h->ns, h->pod, ids[i], pods[p].ns, pods[p].name, h->ns, h->pod, bound);
		else
			snprintf(msg, msglen,
				 "container %s of pod %s/%s was given %s, outside its binding (GPUs %s); not starting it",
				 h->container, h->ns, h->pod, ids[i], bound);
		return DP_REFUSED;
	}
	return DP_VERIFIED;
}

/* A share: the limits the agent handed out are pod ki's, not another sharing pod's. */
static enum dp_verdict check_share_limits(const struct dp_held *h, const struct dp_pod *pods, int npods, int ki,
					  const char *delivered, int *owner, char *msg, size_t msglen)
{
	const struct dp_pod *k = &pods[ki];
	if (!delivered || !delivered[0] || !strcmp(delivered, k->uid))
		return DP_VERIFIED;
	for (int i = 0; i < npods; i++)
		if (!strcmp(pods[i].uid, delivered) &&
		    (pods[i].mem_mib != k->mem_mib || pods[i].core_pct != k->core_pct)) {
			*owner = i;
			snprintf(msg, msglen,
				 "container %s of pod %s/%s was given the share limits of pod %s/%s; not starting it",
				 h->container, h->ns, h->pod, pods[i].ns, pods[i].name);
			return DP_REFUSED;
		}
	return DP_VERIFIED;
}

enum dp_verdict dp_prestart_check(const struct dp_inventory *inv, enum dp_resource r, const char *const *ids,
				  size_t nids, const struct dp_record *rec, const struct dp_pod *pods, int npods,
				  const char *delivered, int *holder, int *owner, char *msg, size_t msglen)
{
	*holder = *owner = -1;
	msg[0] = '\0';
	int at, second;
	int n = holder_of(rec, r, ids, nids, &at, &second);
	if (n == 0) {
		snprintf(msg, msglen, "kubelet's PodResources record names no container holding %s %s%s",
			 dp_resource_name(r), nids ? ids[0] : "", nids > 1 ? ",..." : "");
		return DP_UNVERIFIED;
	}
	const struct dp_held *h = &rec->h[at];
	if (n == 2) {
		snprintf(msg, msglen, "kubelet's record gives %s %s to two pods, %s/%s and %s/%s; not starting the container",
			 dp_resource_name(r), ids[0], h->ns, h->pod, rec->h[second].ns, rec->h[second].pod);
		return DP_REFUSED;
	}
	int ki = find_pod(pods, npods, h->ns, h->pod);
	if (ki < 0) {
		snprintf(msg, msglen,
			 "kubelet gave %s %s%s to pod %s/%s, which the extender did not bind to this node; "
			 "not starting container %s with devices the extender may have bound to another pod",
			 dp_resource_name(r), nids ? ids[0] : "", nids > 1 ? ",..." : "", h->ns, h->pod, h->container);
		return DP_REFUSED;
	}
	*holder = ki;
	if (r == DP_CLAIM)
		return check_claim(ids, nids, h, pods, npods, ki, delivered, owner, msg, msglen);
	enum dp_verdict v = check_devices(inv, r, ids, nids, h, pods, npods, ki, owner, msg, msglen);
	if (v == DP_VERIFIED && r == DP_SHARE)
		v = check_share_limits(h, pods, npods, ki, delivered, owner, msg, msglen);
	return v;
}

/* ---- the audit -------------------------------------------------------------------- */

#define MAX_HOLDERS 8

struct gpu_holders {
	int n;
	int held[MAX_HOLDERS];       /* record indexes */
	bool whole[MAX_HOLDERS];     /* held exclusively (not a share) */
};

struct audit {
	struct dp_problem *out;
	int max, count;
	struct dp_problem spare;     /* written past max, never read: the count is what matters there */
};

static struct dp_problem *problem(struct audit *a, enum dp_problem_kind kind, const char *ns, const char *pod)
{
	struct dp_problem *p = a->count < a->max ? &a->out[a->count] : &a->spare;
	a->count++;
	memset(p, 0, sizeof(*p));
	p->kind = kind;
	snprintf(p->ns, sizeof(p->ns), "%s", ns);
	snprintf(p->pod, sizeof(p->pod), "%s", pod);
	return p;
}

/* The GPUs (inventory indexes) a record entry holds; claim tickets hold their pod's binding. */
static int held_gpus(const struct dp_inventory *inv, const struct dp_held *h, const struct dp_pod *pod, int *gpus)
{
	int n = 0;
	if (h->r == DP_CLAIM) {
		for (int k = 0; pod && k < pod->nids; k++) {
			int d = dp_inventory_find(inv, pod->ids[k]);
			if (d >= 0)
				gpus[n++] = d;
		}
		return n;
	}
	for (int k = 0; k < h->nids; k++) {
		int d = gpu_of(inv, h->r, h->ids[k]);
		if (d >= 0)
			gpus[n++] = d;
	}
	return n;
}

static void audit_record(const struct dp_inventory *inv, const struct dp_record *rec, const struct dp_pod *pods,
			 int npods, struct gpu_holders *holders, struct audit *a)
{
	for (int i = 0; i < rec->n; i++) {
		const struct dp_held *h = &rec->h[i];
		int pi = find_pod(pods, npods, h->ns, h->pod);
		const struct dp_pod *p = pi >= 0 ? &pods[pi] : NULL;
		if (!p) {
			struct dp_problem *pr = problem(a, DP_PROB_UNBOUND, h->ns, h->pod);
			snprintf(pr->key, sizeof(pr->key), "unbound/%s/%s/%s/%d", h->ns, h->pod, h->container, h->r);
			snprintf(pr->msg, sizeof(pr->msg),
				 "container %s of pod %s/%s holds %s %s%s, but the extender bound the pod no GPU on this node",
				 h->container, h->ns, h->pod, dp_resource_name(h->r), h->nids ? h->ids[0] : "",
				 h->nids > 1 ? ",..." : "");
		}
		int gpus[GPU_MAX_DEVICES];
		int n = held_gpus(inv, h, p, gpus);
		for (int k = 0; k < n; k++) {
			int d = gpus[k];
			if (p && !bound_to(inv, p, d)) {
				char bound[256];
				binding_str(p, bound, sizeof(bound));
				struct dp_problem *pr = problem(a, DP_PROB_OUTSIDE, h->ns, h->pod);
				snprintf(pr->key, sizeof(pr->key), "outside/%s/%s/%s/%s", h->ns, h->pod, h->container,
					 inv->dev[d].kubelet_id);
				snprintf(pr->msg, sizeof(pr->msg),
					 "container %s of pod %s/%s holds GPU %d (%s), outside its binding (GPUs %s)",
					 h->container, h->ns, h->pod, inv->dev[d].id, inv->dev[d].kubelet_id, bound);
			}
			struct gpu_holders *g = &holders[d];
			if (g->n < MAX_HOLDERS) {
				g->held[g->n] = i;
				g->whole[g->n++] = h->r == DP_GPU || (h->r == DP_CLAIM && !(p && p->shared));
			}
		}
	}
}

static void audit_twice(const struct dp_inventory *inv, const struct dp_record *rec,
			const struct gpu_holders *holders, struct audit *a)
{
	for (int d = 0; d < inv->ndev; d++) {
		const struct gpu_holders *g = &holders[d];
		for (int x = 0; x < g->n; x++)
			for (int y = x + 1; y < g->n; y++) {
				const struct dp_held *hx = &rec->h[g->held[x]], *hy = &rec->h[g->held[y]];
				bool same = !strcmp(hx->ns, hy->ns) && !strcmp(hx->pod, hy->pod);
				if (same || (!g->whole[x] && !g->whole[y]))
					continue;
				struct dp_problem *pr = problem(a, DP_PROB_TWICE, hx->ns, hx->pod);
				snprintf(pr->other_ns, sizeof(pr->other_ns), "%s", hy->ns);
				snprintf(pr->other, sizeof(pr->other), "%s", hy->pod);
				snprintf(pr->key, sizeof(pr->key), "twice/%s/%s/%s/%s/%s", inv->dev[d].kubelet_id, hx->ns,
					 hx->pod, hy->ns, hy->pod);
				snprintf(pr->msg, sizeof(pr->msg),
					 "GPU %d (%s) is held by two pods: %s/%s (container %s) and %s/%s (container %s)",
					 inv->dev[d].id, inv->dev[d].kubelet_id, hx->ns, hx->pod, hx->container, hy->ns,
					 hy->pod, hy->container);
				x = y = g->n;        /* one report per GPU */
			}
	}
}

static void audit_ledger(const struct dp_pod *pods, int npods, const struct ledger *l, struct audit *a)
{
	for (int i = 0; i < npods; i++) {
		const struct dp_pod *p = &pods[i];
		if (p->finished || !p->nids)
			continue;
		int e = ledger_find(l, p->uid);
		char bound[256];
		binding_str(p, bound, sizeof(bound));
		int missing = -1;
		for (int k = 0; e >= 0 && k < p->nids && missing < 0; k++) {
			bool in = false;
			for (int j = 0; j < l->e[e].a.ndev && !in; j++)
				in = alloc_id(&l->e[e].a, j) == p->ids[k];
			if (!in)
				missing = p->ids[k];
		}
		if (e >= 0 && missing < 0)
			continue;
		struct dp_problem *pr = problem(a, DP_PROB_NOT_IN_LEDGER, p->ns, p->name);
		snprintf(pr->key, sizeof(pr->key), "ledger/%s/%d", p->uid, missing);
		if (e < 0)
			snprintf(pr->msg, sizeof(pr->msg),
				 "pod %s/%s is bound to GPUs %s of node %s, but the node's ledger holds no reservation for it",
				 p->ns, p->name, bound, l->node);
		else
			snprintf(pr->msg, sizeof(pr->msg),
				 "pod %s/%s is bound to GPU %d of node %s, but the node's ledger does not reserve it for the pod",
				 p->ns, p->name, missing, l->node);
	}
}

int dp_audit(const struct dp_inventory *inv, const struct dp_record *rec, const struct dp_pod *pods, int npods,
	     const struct ledger *ledger, struct dp_problem *out, int max)
{
	struct gpu_holders *holders = calloc(GPU_MAX_DEVICES, sizeof(*holders));
	struct audit a = { .out = out, .max = max };
	if (holders) {
		audit_record(inv, rec, pods, npods, holders, &a);
		audit_twice(inv, rec, holders, &a);
	}
	free(holders);
	if (ledger)
		audit_ledger(pods, npods, ledger, &a);
	return a.count;
}
