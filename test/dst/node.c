/*
 * The nodes: a kubelet model and the node agent's device plugin, whose
 * decisions are the real code of src/devplugin (the pod store of pods.c,
 * dp_prefer and dp_match of alloc.c, dp_response_build, and the
 * PreStartContainer check of verify.c against kubelet's record).
 *
 * kubelet (modelled): a watch of the pods bound to its node; each batch of
 * new pods is admitted in creation order, one pod at a time, as
 * HandlePodAdditions does (a watch event is one such batch, a list
 * another): the devices not held by its other pods are the
 * available ones, GetPreferredAllocation is asked, kubelet takes the
 * preferred ones that are available and fills up at random, then Allocate;
 * too few devices or an Allocate error fails the pod (status Failed).
 * Later its pod worker starts the container: PreStartContainer first; a
 * refusal leaves the container waiting (retried at later starts). Its
 * record (checkpoint, PodResources) survives its restarts; after one it
 * lists its pods and admits those it has not in creation order. Pods that
 * finish or are deleted free their devices in kubelet first (it stops the
 * containers before the API server lets the pod go).
 *
 * The agent: the glue of plugin.c around the real code, redone here (the
 * gRPC layer is not run): the pod that Allocate last answered for
 * ("current"), the look again after a refresh when a pod is not found,
 * the ring of what each Allocate delivered, and at its start kubelet's
 * record marking containers done. Its pod watch is fed to the store's own
 * sink (dp_pods_sink).
 */
#include "dst.h"
#include "api.h"
#include "devplugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KMAX 64                 /* pods a kubelet keeps at once */
#define KTOMB 256               /* uids it forgot (events of them come late) */
#define RING 16

enum kstate { K_ADMITTED, K_RUNNING, K_REFUSED };

struct kpod {
	char ns[16], name[32], uid[64];
	int64_t created;
	char allocated[64];     /* the binding annotation as kubelet saw it */
	int gpus;
	enum kstate st;
	bool blind;             /* admitted after a relist of kubelet's own brought 2+ new GPU pods */
	int nids;
	char ids[8][DP_ID_MAX];
};

struct node_sim {
	int idx;
	char name[8];
	/* kubelet */
	struct kpod pod[KMAX];
	int npod;
	char tomb[KTOMB][64];
	int ntomb;
	bool blind;             /* kubelet's own relist admitted 2+ GPU pods in an order the agent cannot see */
	/* the agent */
	struct dp_config cfg;
	struct dp_inventory inv;
	struct dp_pods *store;
	char current[64];
	struct {
		char key[8 * DP_ID_MAX];
		char uid[64];
	} ring[RING];
	int nring;
};

/* ---- kubelet's bookkeeping ---- */

static struct kpod *kfind(struct node_sim *n, const char *uid)
{
	for (int i = 0; i < n->npod; i++)
		if (!strcmp(n->pod[i].uid, uid))
			return &n->pod[i];
	return NULL;
}

static bool tombed(const struct node_sim *n, const char *uid)
{
	for (int i = 0; i < n->ntomb && i < KTOMB; i++)
		if (!strcmp(n->tomb[i], uid))
			return true;
	return false;
}

/* kubelet lets the pod go: its devices are free in its record. */
static void kforget(struct node_sim *n, const char *uid)
{
	struct kpod *p = kfind(n, uid);
	if (!tombed(n, uid))
		snprintf(n->tomb[n->ntomb++ % KTOMB], 64, "%s", uid);
	if (p)
		*p = n->pod[--n->npod];
}

static bool held(const struct node_sim *n, const char *id)
{
	for (int i = 0; i < n->npod; i++)
		for (int k = 0; k < n->pod[i].nids; k++)
			if (!strcmp(n->pod[i].ids[k], id))
				return true;
	return false;
}

/* kubelet's record as PodResources lists it. */
static void record(const struct node_sim *n, struct dp_record *rec)
{
	dp_record_init(rec);
	for (int i = 0; i < n->npod; i++) {
		const struct kpod *p = &n->pod[i];
		const char *ids[8];
		for (int k = 0; k < p->nids; k++)
			ids[k] = p->ids[k];
		if (p->nids)
			dp_record_add(rec, p->ns, p->name, "c", dp_resource_name(DP_GPU), ids, (size_t)p->nids);
	}
}

/* ---- the agent ---- */

static void ring_key(const char *const *ids, int n, char *out, size_t size)
{
	const char *s[8];
	memcpy(s, ids, (size_t)n * sizeof(*s));
	for (int i = 1; i < n; i++)      /* sorted: kubelet's order of them varies */
		for (int j = i; j > 0 && strcmp(s[j - 1], s[j]) > 0; j--) {
			const char *t = s[j];
			s[j] = s[j - 1];
			s[j - 1] = t;
		}
	size_t at = 0;
	out[0] = '\0';
	for (int i = 0; i < n && at < size; i++)
		at += (size_t)snprintf(out + at, size - at, "%s,", s[i]);
}

static const char *delivered_to(const struct node_sim *n, const char *const *ids, int nids)
{
	char key[sizeof(n->ring[0].key)];
	ring_key(ids, nids, key, sizeof(key));
	int have = n->nring < RING ? n->nring : RING;
	for (int i = 1; i <= have; i++)
		if (!strcmp(n->ring[(n->nring - i) % RING].key, key))
			return n->ring[(n->nring - i) % RING].uid;
	return "";
}

/* The agent's pods for the attempt-th look: the store, then after a refresh (a list of the node's pods; first, after kubelet restarted). */
static struct dp_pod *agent_pods(struct world *w, struct node_sim *n, int attempt, int *np)
{
	if (attempt || dp_pods_restart_unread(n->store)) {
		cJSON *items = apis_node_pods(w->api, n->idx);
		dp_pods_apply_list(n->store, items);
		cJSON_Delete(items);
	}
	return dp_pods_copy(n->store, np);
}

static void agent_start(struct world *w, struct node_sim *n)
{
	n->store = dp_pods_start(NULL, n->name, NULL, 0);
	n->current[0] = '\0';
	n->nring = 0;
	struct reflector_sink s;
	dp_pods_sink(n->store, &s);
	cJSON *items = apis_node_pods(w->api, n->idx), *item;
	s.lock(s.ctx);
	s.list_begin(s.ctx);
	cJSON_ArrayForEach(item, items)
		s.apply(s.ctx, false, item);
	s.list_end(s.ctx);
	s.unlock(s.ctx);
	cJSON_Delete(items);
	apis_node_relist(w->api, n->idx, NW_AGENT);
	/* kubelet's record: containers given devices before this start are done */
	for (int i = 0; i < n->npod; i++)
		if (n->pod[i].nids)
			dp_pods_mark_named(n->store, n->pod[i].ns, n->pod[i].name, "c", DP_GPU);
}

static struct node_sim *node_new(struct world *w, int idx)
{
	struct node_sim *n = calloc(1, sizeof(*n));
	n->idx = idx;
	snprintf(n->name, sizeof(n->name), "n%d", idx);
	dp_config_default(&n->cfg);
	snprintf(n->cfg.node, sizeof(n->cfg.node), "%s", n->name);
	int gpus = idx == 0 ? 8 : 4;
	n->inv.ndev = gpus;
	for (int d = 0; d < gpus; d++) {
		struct dp_device *dev = &n->inv.dev[d];
		dev->id = d;
		dev->vendor = GPU_VENDOR_NVIDIA;
		dev->index = d;
		dev->healthy = true;
		snprintf(dev->uuid, sizeof(dev->uuid), "GPU-n%d-%d", idx, d);
		snprintf(dev->kubelet_id, sizeof(dev->kubelet_id), "GPU-n%d-%d", idx, d);
		dev->nnode = 1;
		snprintf(dev->node[0].path, sizeof(dev->node[0].path), "/dev/nvidia%d", d);
		snprintf(dev->node[0].host_path, sizeof(dev->node[0].host_path), "/dev/nvidia%d", d);
	}
	apis_node_relist(w->api, idx, NW_KUBELET);
	agent_start(w, n);
	return n;
}

void node_init(struct world *w)
{
	for (int i = 0; i < DST_NODES; i++)
		w->node[i] = node_new(w, i);
}

void node_free(struct world *w)
{
	for (int i = 0; i < DST_NODES; i++) {
		if (!w->node[i])
			continue;
		dp_pods_stop(w->node[i]->store);
		free(w->node[i]);
		w->node[i] = NULL;
	}
}

/* GetPreferredAllocation of one container: the ids the agent prefers into out; 0, or -1 (kubelet chooses). */
static int agent_prefer(struct world *w, struct node_sim *n, const char *const *avail, int navail, int size,
			char (*out)[DP_ID_MAX], char *why, size_t whylen)
{
	int rc = -1, np = 0;
	struct dp_pod *pods = NULL;
	struct dp_choice ch;
	memset(&ch, 0, sizeof(ch));
	for (int attempt = 0; rc && attempt < 2; attempt++) {
		free(pods);
		dp_choice_release(&ch);
		pods = agent_pods(w, n, attempt, &np);
		rc = dp_prefer(&n->inv, DP_GPU, pods, np, n->current, avail, (size_t)navail, NULL, 0, size, &ch, why,
			       whylen);
	}
	int got = 0;
	if (!rc) {
		snprintf(n->current, sizeof(n->current), "%s", pods[ch.pod].uid);
		for (int k = 0; k < ch.nid && k < 8; k++)
			snprintf(out[got++], DP_ID_MAX, "%s", ch.id[k]);
	}
	dp_choice_release(&ch);
	free(pods);
	return rc ? -1 : got;
}

/* Allocate of one container: 0 (the pod it answered for in uid), or -1 with err (kubelet fails the pod). */
static int agent_allocate(struct world *w, struct node_sim *n, const char *const *ids, int nids, char *uid,
			  char *err, size_t errlen)
{
	int rc = -1, np = 0;
	struct dp_pod *pods = NULL;
	struct dp_choice ch;
	memset(&ch, 0, sizeof(ch));
	for (int attempt = 0; rc && attempt < 2; attempt++) {
		free(pods);
		dp_choice_release(&ch);
		pods = agent_pods(w, n, attempt, &np);
		rc = dp_match(&n->inv, DP_GPU, pods, np, n->current, ids, (size_t)nids, &ch, err, errlen);
	}
	if (!rc) {
		const struct dp_pod *p = &pods[ch.pod];
		struct dp_response *resp = malloc(sizeof(*resp));
		rc = dp_response_build(&n->inv, &n->cfg, ch.dev, ch.ndev, p->shared ? p : NULL, resp, err, errlen);
		free(resp);
		if (!rc) {
			dp_pods_mark_done(n->store, p->uid, ch.container, DP_GPU);
			int slot = n->nring++ % RING;
			ring_key(ids, nids, n->ring[slot].key, sizeof(n->ring[slot].key));
			snprintf(n->ring[slot].uid, sizeof(n->ring[slot].uid), "%s", p->uid);
			snprintf(n->current, sizeof(n->current), "%s", p->uid);
			snprintf(uid, 64, "%s", p->uid);
		}
	}
	dp_choice_release(&ch);
	free(pods);
	return rc;
}

/* PreStartContainer of a container kubelet gave ids. */
static enum dp_verdict agent_prestart(struct world *w, struct node_sim *n, const struct kpod *k, char *msg,
				      size_t msglen)
{
	const char *ids[8];
	for (int i = 0; i < k->nids; i++)
		ids[i] = k->ids[i];
	struct dp_record rec;
	record(n, &rec);
	const char *deliv = delivered_to(n, ids, k->nids);
	enum dp_verdict v = DP_UNVERIFIED;
	int holder = -1, owner = -1, np = 0;
	struct dp_pod *pods = NULL;
	for (int attempt = 0; attempt < 2 && (attempt == 0 || v == DP_REFUSED); attempt++) {
		free(pods);
		pods = agent_pods(w, n, attempt, &np);
		v = dp_prestart_check(&n->inv, DP_GPU, ids, (size_t)k->nids, &rec, pods, np, deliv, &holder, &owner, msg,
				      msglen);
	}
	free(pods);
	dp_record_release(&rec);
	return v;
}

/* ---- kubelet's actions ---- */

static int64_t created_of(const cJSON *pod)
{
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	const char *s = api_str(api_path(pod, "metadata"), "creationTimestamp");
	if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
			 &tm.tm_sec) != 6)
		return 0;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t)timegm(&tm);
}

static bool finished(const cJSON *pod)
{
	const char *ph = api_str(api_path(pod, "status"), "phase");
	return ph && (!strcmp(ph, "Succeeded") || !strcmp(ph, "Failed"));
}

/* Admission of one pod: the device manager's allocation, then the pod is kubelet's (or Failed). */
static void admit(struct world *w, struct node_sim *n, const cJSON *pod, const char *from)
{
	struct api_pod_ref ref;
	api_pod_ref(pod, &ref);
	if (!ref.uid || kfind(n, ref.uid) || tombed(n, ref.uid) || n->npod >= KMAX)
		return;
	const cJSON *c0 = cJSON_GetArrayItem(api_path(pod, "spec.containers"), 0);
	const char *gs = api_str(api_path(c0, "resources.limits"), dp_resource_name(DP_GPU));
	int size = gs ? atoi(gs) : 0;
	const char *ann = api_annotation(pod, ANN_ALLOCATED);
	struct kpod *k = &n->pod[n->npod];
	memset(k, 0, sizeof(*k));
	snprintf(k->ns, sizeof(k->ns), "%s", ref.ns);
	snprintf(k->name, sizeof(k->name), "%s", ref.name);
	snprintf(k->uid, sizeof(k->uid), "%s", ref.uid);
	snprintf(k->allocated, sizeof(k->allocated), "%s", ann ? ann : "");
	k->created = created_of(pod);
	k->gpus = size;
	k->blind = n->blind;
	const char *avail[GPU_MAX_DEVICES];
	int navail = 0;
	for (int d = 0; d < n->inv.ndev; d++)
		if (n->inv.dev[d].healthy && !held(n, n->inv.dev[d].kubelet_id))
			avail[navail++] = n->inv.dev[d].kubelet_id;
	char err[512] = "", uid[64] = "";
	if (size > 8 || navail < size) {
		snprintf(err, sizeof(err), "requested %d, %d available", size, navail);
	} else if (size > 0) {
		char pref[8][DP_ID_MAX], why[256];
		int np = agent_prefer(w, n, avail, navail, size, pref, why, sizeof(why));
		/* kubelet takes the preferred ones it has, then any available (Go's map order: at random) */
		for (int i = 0; i < np && k->nids < size; i++)
			for (int a = 0; a < navail; a++)
				if (!strcmp(avail[a], pref[i])) {
					snprintf(k->ids[k->nids++], DP_ID_MAX, "%s", avail[a]);
					avail[a] = avail[--navail];
					break;
				}
		while (k->nids < size) {
			int a = (int)rng_below(&w->g, (uint32_t)navail);
			snprintf(k->ids[k->nids++], DP_ID_MAX, "%s", avail[a]);
			avail[a] = avail[--navail];
		}
		const char *ids[8];
		for (int i = 0; i < k->nids; i++)
			ids[i] = k->ids[i];
		if (agent_allocate(w, n, ids, k->nids, uid, err, sizeof(err)) == 0)
			err[0] = '\0';
		else if (!err[0])
			snprintf(err, sizeof(err), "Allocate failed");
	}
	char list[256] = "";
	for (int i = 0; i < k->nids; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? "," : "", k->ids[i] + 4);
	if (err[0]) {
		dst_trace(w, "kubelet %s: %s refused at admission: %.150s", n->name, k->name, err);
		w->node_stats.admit_failed++;
		memcpy(n->tomb[n->ntomb++ % KTOMB], k->uid, sizeof(k->uid));   /* (both 64 bytes) */
		apis_pod_phase(w->api, k->ns, k->name, "Failed");
		return;
	}
	n->npod++;
	w->node_stats.admitted++;
	dst_trace(w, "kubelet %s: %s admitted from %s on %s (Allocate answered for %s)", n->name, k->name, from,
		  list[0] ? list : "-", uid[0] ? uid : "-");
}

static int cmp_created(const void *a, const void *b)
{
	const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
	int64_t cx = created_of(x), cy = created_of(y);
	if (cx != cy)
		return cx < cy ? -1 : 1;
	return strcmp(api_str(api_path(x, "metadata"), "name"), api_str(api_path(y, "metadata"), "name"));
}

/* A batch of new pods: admitted one at a time in creation order (HandlePodAdditions). */
static void admit_batch(struct world *w, struct node_sim *n, const cJSON **pods, int np, const char *from)
{
	qsort(pods, (size_t)np, sizeof(*pods), cmp_created);
	for (int i = 0; i < np; i++)
		admit(w, n, pods[i], from);
}

/* kubelet's watch delivers up to max events (0: all). */
static void kubelet_deliver(struct world *w, struct node_sim *n, int max)
{
	struct watch *wt = apis_node_watch(w->api, n->idx, NW_KUBELET);
	int m = max && max < wt->n ? max : wt->n;
	if (!m)
		return;
	const cJSON *add[64];
	int nadd = 0;
	for (int i = 0; i < m; i++) {
		const struct watch_event *e = &wt->ev[i];
		struct api_pod_ref ref;
		api_pod_ref(e->obj, &ref);
		if (!ref.uid)
			continue;
		if (e->deleted || finished(e->obj)) {
			if (kfind(n, ref.uid))
				kforget(n, ref.uid);
		} else if (!kfind(n, ref.uid) && !tombed(n, ref.uid) && nadd < 64) {
			bool dup = false;
			for (int j = 0; j < nadd; j++)
				dup = dup || !strcmp(api_str(api_path(add[j], "metadata"), "uid"), ref.uid);
			if (!dup)
				add[nadd++] = e->obj;
		}
	}
	/* (a pod added and deleted in one batch is not admitted) */
	int keep = 0;
	for (int j = 0; j < nadd; j++) {
		const char *uid = api_str(api_path(add[j], "metadata"), "uid");
		bool gone = false;
		for (int i = 0; i < m; i++) {
			struct api_pod_ref ref;
			api_pod_ref(wt->ev[i].obj, &ref);
			gone = gone || (ref.uid && !strcmp(ref.uid, uid) && (wt->ev[i].deleted || finished(wt->ev[i].obj)));
		}
		if (!gone)
			add[keep++] = add[j];
	}
	dst_trace(w, "kubelet %s: %d pod event(s)", n->name, m);
	/* one ADD per watch event (its config source merges them one by one): event order */
	for (int j = 0; j < keep; j++)
		admit(w, n, add[j], "its watch");
	apis_watch_pop(wt, m);
}

/* kubelet lists its pods (a restart, or its watch ended): gone ones are let go, new ones admitted. */
static void kubelet_list(struct world *w, struct node_sim *n, const char *from, bool restart)
{
	struct watch *wt = apis_node_watch(w->api, n->idx, NW_KUBELET);
	apis_watch_pop(wt, wt->n);
	cJSON *items = apis_node_pods(w->api, n->idx);
	for (int i = n->npod - 1; i >= 0; i--) {
		bool live = false;
		const cJSON *item;
		cJSON_ArrayForEach(item, items) {
			const char *uid = api_str(api_path(item, "metadata"), "uid");
			live = live || (!strcmp(uid, n->pod[i].uid) && !finished(item));
		}
		if (!live)
			kforget(n, n->pod[i].uid);
	}
	const cJSON *add[DST_MAX_PODS], *item;
	int nadd = 0;
	cJSON_ArrayForEach(item, items)
		if (!finished(item) && nadd < DST_MAX_PODS)
			add[nadd++] = item;
	apis_node_relist(w->api, n->idx, NW_KUBELET);
	if (!restart) {
		/* the agent is not told of this list (kubelet.sock stays): when it brings two
		   or more new GPU pods, their order is kubelet's alone from here on */
		int fresh = 0;
		for (int i = 0; i < nadd; i++) {
			const char *uid = api_str(api_path(add[i], "metadata"), "uid");
			const cJSON *c0 = cJSON_GetArrayItem(api_path(add[i], "spec.containers"), 0);
			fresh += !kfind(n, uid) && !tombed(n, uid) &&
				 api_str(api_path(c0, "resources.limits"), dp_resource_name(DP_GPU)) &&
				 api_annotation(add[i], ANN_ALLOCATED);
		}
		n->blind = n->blind || fresh >= 2;
	}
	admit_batch(w, n, add, nadd, from);
	cJSON_Delete(items);
}

/* The pod worker starts an admitted container (or tries a refused one again): PreStartContainer first. */
static void kubelet_start(struct world *w, struct node_sim *n, struct kpod *k)
{
	char msg[512] = "";
	enum dp_verdict v = k->nids ? agent_prestart(w, n, k, msg, sizeof(msg)) : DP_VERIFIED;
	bool again = k->st == K_REFUSED;
	if (v == DP_REFUSED) {
		if (!again)
			w->node_stats.prestart_refused++;
		k->st = K_REFUSED;
		if (!again)     /* (its tries again keep the trace for what led to it) */
			dst_trace(w, "kubelet %s: container of %s refused at PreStart: %.150s", n->name, k->name, msg);
		return;
	}
	if (v == DP_UNVERIFIED)
		w->node_stats.unverified++;
	if (again)
		w->node_stats.prestart_later++;
	k->st = K_RUNNING;
	apis_pod_phase(w->api, k->ns, k->name, "Running");
	dst_trace(w, "kubelet %s: container of %s started%s", n->name, k->name, v == DP_UNVERIFIED ? " (unverified)" : "");
}

static void agent_deliver(struct world *w, struct node_sim *n, int max)
{
	struct watch *wt = apis_node_watch(w->api, n->idx, NW_AGENT);
	int m = max && max < wt->n ? max : wt->n;
	if (!m)
		return;
	struct reflector_sink s;
	dp_pods_sink(n->store, &s);
	s.lock(s.ctx);
	for (int i = 0; i < m; i++)
		s.apply(s.ctx, wt->ev[i].deleted, wt->ev[i].obj);
	s.unlock(s.ctx);
	dst_trace(w, "agent %s: %d pod event(s)", n->name, m);
	apis_watch_pop(wt, m);
}

static void agent_relist(struct world *w, struct node_sim *n)
{
	struct reflector_sink s;
	dp_pods_sink(n->store, &s);
	cJSON *items = apis_node_pods(w->api, n->idx), *item;
	s.lock(s.ctx);
	s.list_begin(s.ctx);
	cJSON_ArrayForEach(item, items)
		s.apply(s.ctx, false, item);
	s.list_end(s.ctx);
	s.unlock(s.ctx);
	cJSON_Delete(items);
	apis_node_relist(w->api, n->idx, NW_AGENT);
	dst_trace(w, "agent %s: pods relisted", n->name);
}

/* ---- what the simulator calls ---- */

void node_deliver(struct world *w, int node, enum node_watch_kind k, int max)
{
	struct node_sim *n = w->node[node];
	struct watch *wt = apis_node_watch(w->api, node, k);
	if (!wt->open) {
		if (k == NW_KUBELET) {
			kubelet_list(w, n, "a relist", false);
			dst_trace(w, "kubelet %s: pods relisted", n->name);
		} else {
			agent_relist(w, n);
		}
	} else if (k == NW_KUBELET) {
		kubelet_deliver(w, n, max);
	} else {
		agent_deliver(w, n, max);
	}
}

/* A container start of a pod admitted or refused before; false when there is none. */
bool node_start_one(struct world *w, int node)
{
	struct node_sim *n = w->node[node];
	int c[KMAX], m = 0;
	for (int i = 0; i < n->npod; i++)
		if (n->pod[i].st != K_RUNNING)
			c[m++] = i;
	if (!m)
		return false;
	kubelet_start(w, n, &n->pod[c[rng_below(&w->g, (uint32_t)m)]]);
	return true;
}

/* Starts every container that can start (quiescence: refused ones are tried once more). */
void node_start_all(struct world *w)
{
	for (int i = 0; i < DST_NODES; i++) {
		struct node_sim *n = w->node[i];
		for (int k = 0; k < n->npod; k++)
			if (n->pod[k].st != K_RUNNING)
				kubelet_start(w, n, &n->pod[k]);
	}
}

void node_kubelet_restart(struct world *w, int node)
{
	struct node_sim *n = w->node[node];
	dst_trace(w, "kubelet %s restarts (its record kept; it lists its pods)", n->name);
	w->node_stats.kubelet_restarts++;
	/* the agent sees kubelet.sock replaced and registers again before kubelet admits anew */
	dp_pods_kubelet_restarted(n->store);
	n->current[0] = '\0';
	cJSON *items = apis_node_pods(w->api, n->idx);    /* (its list of the pods: kubelet's batch) */
	dp_pods_apply_list(n->store, items);
	cJSON_Delete(items);
	kubelet_list(w, n, "its restart", true);
}

void node_agent_restart(struct world *w, int node)
{
	struct node_sim *n = w->node[node];
	dst_trace(w, "agent %s restarts (its pods listed again, kubelet's record read)", n->name);
	w->node_stats.agent_restarts++;
	dp_pods_stop(n->store);
	agent_start(w, n);
}

/* Kubelet stops a pod that finishes or is deleted before the API server shows it: its devices are free. */
void node_pod_stopped(struct world *w, const char *node, const char *uid)
{
	for (int i = 0; i < DST_NODES; i++)
		if (!strcmp(w->node[i]->name, node) && kfind(w->node[i], uid))
			kforget(w->node[i], uid);
}

bool node_runs(struct world *w, const char *node, const char *uid)
{
	for (int i = 0; i < DST_NODES; i++)
		if (!strcmp(w->node[i]->name, node)) {
			const struct kpod *k = kfind(w->node[i], uid);
			return k && k->st == K_RUNNING;
		}
	return false;
}

void node_close_watches(struct world *w)
{
	for (int i = 0; i < DST_NODES; i++)
		for (int k = 0; k < NW_KINDS; k++) {
			struct watch *wt = apis_node_watch(w->api, i, k);
			apis_watch_pop(wt, wt->n);
			wt->open = false;
			wt->closed_ms = w->now_ms;
		}
}

/* ---- the checks ---- */

/* "GPU-n1-3" -> 3 */
static int dev_of(const char *id)
{
	const char *dash = strrchr(id, '-');
	return dash ? atoi(dash + 1) : -1;
}

int node_check(struct world *w, char *failure, size_t size, bool (*exempt)(struct world *, const char *))
{
	static struct apis_pod pods[DST_MAX_PODS];
	int np = apis_pods(w->api, pods, DST_MAX_PODS);
	for (int i = 0; i < DST_NODES; i++) {
		struct node_sim *n = w->node[i];
		for (int a = 0; a < n->npod; a++) {
			const struct kpod *k = &n->pod[a];
			for (int b = a + 1; b < n->npod; b++)
				for (int x = 0; x < k->nids; x++)
					for (int y = 0; y < n->pod[b].nids; y++)
						if (!strcmp(k->ids[x], n->pod[b].ids[y])) {
							snprintf(failure, size, "kubelet %s gave %s to two pods: %s and %s", n->name,
								 k->ids[x], k->name, n->pod[b].name);
							return -1;
						}
			if (k->st != K_RUNNING)
				continue;
			/* a running container's devices are its binding's */
			char want[64] = "", got[64];
			int at = snprintf(got, sizeof(got), "%s:", n->name);
			int ids[8];
			for (int x = 0; x < k->nids; x++)
				ids[x] = dev_of(k->ids[x]);
			for (int x = 1; x < k->nids; x++)   /* the annotation lists ids in ascending order */
				for (int y = x; y > 0 && ids[y - 1] > ids[y]; y--) {
					int t = ids[y];
					ids[y] = ids[y - 1];
					ids[y - 1] = t;
				}
			for (int x = 0; x < k->nids; x++)
				at += snprintf(got + at, sizeof(got) - (size_t)at, "%s%d", x ? "," : "", ids[x]);
			snprintf(want, sizeof(want), "%s", k->allocated);
			if (strcmp(want, got) && !exempt(w, k->uid)) {
				snprintf(failure, size, "container of pod %s runs on %s, its binding says '%s'", k->name, got, want);
				return -1;
			}
			/* and no live pod the API server has is bound to one of them */
			for (int p = 0; p < np; p++) {
				int pid[64], m = 0;
				if (!pods[p].allocated || strcmp(pods[p].node, n->name) || pods[p].finished ||
				    !strcmp(pods[p].uid, k->uid) || exempt(w, pods[p].uid) || exempt(w, k->uid))
					continue;
				for (const char *s = strchr(pods[p].allocated, ':'); s && *s && m < 64;) {
					pid[m++] = atoi(s + 1);
					s = strchr(s + 1, ',');
				}
				for (int x = 0; x < k->nids; x++)
					for (int y = 0; y < m; y++)
						if (ids[x] == pid[y]) {
							snprintf(failure, size, "GPU %s:%d runs pod %s's container and is bound to live pod %s",
								 n->name, ids[x], k->name, pods[p].name);
							return -1;
						}
			}
		}
	}
	return 0;
}

/*
 * At quiescence: every live bound pod runs, or its container was refused at
 * PreStart (counted) where the agent could not have known kubelet's order
 * (kubelet's own relist brought two or more new GPU pods before it was
 * admitted; a pod of its node was written after its binding while it
 * waited) or lose-entry let two pods be bound to one GPU; any other
 * refusal is a wrong match the agent could have avoided, and fails.
 */
int node_check_quiescent(struct world *w, char *failure, size_t size, bool (*exempt)(struct world *, const char *))
{
	static struct apis_pod pods[DST_MAX_PODS];
	int np = apis_pods(w->api, pods, DST_MAX_PODS);
	for (int p = 0; p < np; p++) {
		if (!pods[p].node[0] || pods[p].finished)
			continue;
		struct node_sim *n = NULL;
		for (int i = 0; i < DST_NODES; i++)
			if (!strcmp(w->node[i]->name, pods[p].node))
				n = w->node[i];
		const struct kpod *k = n ? kfind(n, pods[p].uid) : NULL;
		if (!k) {
			snprintf(failure, size, "live pod %s bound to %s is not kubelet's", pods[p].name, pods[p].node);
			return -1;
		}
		if (k->st != K_REFUSED)
			continue;
		w->node_stats.refused_at_end++;
		if (k->blind || exempt(w, k->uid))
			continue;
		/* a pod on its node that lose-entry touched, or written after its binding while
		   it waited (a list then orders it by that write, not by its binding) */
		bool other = false;
		for (int q = 0; q < np && !other; q++)
			other = !strcmp(pods[q].node, pods[p].node) &&
				((q != p && exempt(w, pods[q].uid)) || w->pods[atoi(pods[q].name + 1)].edited_waiting);
		if (!other) {
			snprintf(failure, size, "live pod %s on %s stays refused at PreStart (given %s%s, bound '%s'): "
				 "the agent matched it to another pod's devices", pods[p].name, pods[p].node, k->ids[0],
				 k->nids > 1 ? ",..." : "", k->allocated);
			return -1;
		}
	}
	return 0;
}
