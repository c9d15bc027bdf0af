/*
 * Gangs in cluster mode (docs/gang.md): the places of a whole gang are
 * reserved at once, as entries of the nodes' ledgers, before any member is
 * bound; each member is then steered to a node that holds one and its bind
 * takes it over (edit_reserve in reserve.c). A gang that does not fit
 * reserves nothing, so two gangs after the same GPUs never end half-placed
 * each. A lock Lease per gang keeps two replicas from reserving one gang
 * twice; places no member took within the gang's timeout go with the reaper.
 */
#include "reserve_gang.h"
#include "events.h"
#include "api.h"
#include "clock.h"
#include "gang.h"
#include "log.h"
#include "metrics.h"
#include "podread.h"
#include "status.h"
#include "store.h"
#include "update.h"
#include "watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A place of a plan seen Written, where it is. */
struct free_place {
	char node[254];
	struct gang_place pl;
};

/* What the ledgers (as last watched or written) hold of one gang. */
struct gang_view {
	int places, bound;        /* places not taken yet (of any plan); members bound into theirs */
	int nfree;
	struct free_place *free;  /* the places a member may take: of plans seen Written (or from before plans) */
	char pending[9];          /* a plan with places not seen Written yet, or "" */
	char own[254];            /* the node where the pod itself holds a reservation, or "" */
};

static void place_of_alloc(const struct alloc *a, struct gang_place *out)
{
	memset(out, 0, sizeof(*out));
	out->mode = a->mode;
	out->ndev = a->ndev;
	out->mem_mib = a->mem_mib;
	out->core = a->core;
	for (int k = 0; k < a->ndev; k++)
		out->ids[k] = alloc_id(a, k);
}

/* Whether a place's plan was seen Written (places from before plans: yes); else its plan in pending. */
static bool plan_written_locked(struct reserve *r, const char *id, const char *uid, char pending[9])
{
	char plan[9], key[32];
	if (!ledger_place_plan(uid, plan))
		return true;
	snprintf(key, sizeof(key), "%s-p%s", id, plan);
	if (strmap_get(&r->gang_written, key))
		return true;
	if (pending)
		snprintf(pending, 9, "%s", plan);
	return false;
}

static int gang_view(struct reserve *r, const struct api_pod_ref *pod, const char *gang, struct gang_view *v)
{
	memset(v, 0, sizeof(*v));
	char id[17];
	ledger_gang_id(pod->ns, gang, id);
	int rc = 0, cap = 0;
	pthread_mutex_lock(&r->lock);
	const struct ledger_box *box;
	for (size_t pos = 0; !rc && (box = keyset_next(&r->ledgers, &pos));) {
		const char *node = box->node;
		const struct ledger_packed *p = &box->p;
		struct ledger_packed_strs s;
		/* The strings in place: only a place of the gang is unpacked whole. */
		for (size_t at = 0, here = 0; ledger_packed_next_strs(p, &at, &s); here = at) {
			if (!strcmp(s.uid, pod->uid))
				snprintf(v->own, sizeof(v->own), "%s", node);
			if (!s.gang[0] || strcmp(s.gang, gang) || strcmp(s.ns, pod->ns))
				continue;
			struct ledger_entry e;
			if (!ledger_packed_next(p, &here, &e) || !ledger_entry_is_place(&e)) {
				v->bound++;
				continue;
			}
			v->places++;
			if (!plan_written_locked(r, id, e.a.uid, v->pending))
				continue;
			if (v->nfree == cap) {
				cap = cap ? 2 * cap : 8;
				struct free_place *grown = realloc(v->free, (size_t)cap * sizeof(*grown));
				if (!grown) {
					rc = -1;
					break;
				}
				v->free = grown;
			}
			snprintf(v->free[v->nfree].node, sizeof(v->free[0].node), "%s", node);
			place_of_alloc(&e.a, &v->free[v->nfree++].pl);
		}
	}
	pthread_mutex_unlock(&r->lock);
	return rc;
}

/* Members of the gang the pod watch knows that have not finished; the pod itself counts. */
static int members_watched(struct reserve *r, const struct api_pod_ref *pod, const char *gang)
{
	int n = 0;
	bool self = false;
	const struct pod_state *p;
	pthread_mutex_lock(&r->lock);
	for (size_t pos = 0; (p = keyset_next(&r->pods, &pos));) {
		if (p->finished || strcmp(pod_str(p, POD_NS), pod->ns) || strcmp(pod_str(p, POD_GANG), gang))
			continue;
		n++;
		self = self || !strcmp(pod_str(p, POD_UID), pod->uid);
	}
	pthread_mutex_unlock(&r->lock);
	return n + !self;
}

/*
 * The same from the API server (a quorum read): the last member's filter can
 * come before the pod watch brought its peers, created a moment before; and
 * a gang whose last member is turned away waits for a cluster event.
 */
static int members_listed(struct reserve *r, const struct api_pod_ref *pod, const char *gang)
{
	struct buf path;
	buf_init(&path, 4096);
	buf_printf(&path, "/api/v1/namespaces/%s/pods?labelSelector=", pod->ns);
	kube_escape(&path, r->o.pod_selector);
	struct kube_response resp;
	kube_response_init(&resp);
	char err[256];
	int n = -1;
	if (!kube_request(r->o.client, "GET", buf_cstr(&path), NULL, NULL, 10, &resp, err, sizeof(err)) &&
	    resp.status == 200) {
		cJSON *list = cJSON_ParseWithLength(resp.body.data, resp.body.len);
		const cJSON *it;
		bool self = false;
		n = 0;
		cache_claims_rdlock(r->o.cache);
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(list, "items")) {
			struct claim c;
			struct api_pod_ref ref;
			api_pod_ref(it, &ref);
			if (api_pod_finished(it) ||
			    api_pod_claim(it, r->o.res, cache_gpuclaim_lookup, r->o.cache, &c, err, sizeof(err)))
				continue;
			if (!strcmp(c.gang, gang)) {
				n++;
				self = self || (ref.uid && !strcmp(ref.uid, pod->uid));
			}
			claim_release(&c);
		}
		cache_claims_unlock(r->o.cache);
		cJSON_Delete(list);
		n += !self;
	}
	kube_response_release(&resp);
	buf_release(&path);
	return n;
}

/* The size and timeout of a coscheduling PodGroup (scheduling.x-k8s.io). */
static int pod_group(struct reserve *r, const char *ns, const char *name, int *size, int *timeout,
		     char *err, size_t errlen)
{
	char path[512], what[256];
	snprintf(path, sizeof(path), "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/%s/podgroups/%s", ns, name);
	snprintf(what, sizeof(what), "PodGroup %s/%s", ns, name);
	cJSON *pg = kube_get_object(r->o.client, path, what, err, errlen);
	if (!pg)
		return -1;
	double min = 0, secs = 0;
	const cJSON *spec = api_path(pg, "spec");
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(spec, "scheduleTimeoutSeconds");
	int rc = -1;
	if (!api_whole(cJSON_GetObjectItemCaseSensitive(spec, "minMember"), 1, GANG_SIZE_MAX, &min) ||
	    (t && !api_whole(t, 1, 86400, &secs))) {
		snprintf(err, errlen, "%s: spec.minMember must be 1..%d (scheduleTimeoutSeconds 1..86400)", what,
			 GANG_SIZE_MAX);
	} else {
		*size = (int)min;
		*timeout = (int)secs;
		rc = 0;
	}
	cJSON_Delete(pg);
	return rc;
}

/*
 * The gang policy of a Workload's pod group (scheduling.k8s.io/v1alpha1, the
 * only version that serves pods' spec.workloadRef: Kubernetes 1.35):
 * 1 with its minCount, 0 when the group is not a gang (basic policy), -1 with err.
 */
static int workload_group(struct reserve *r, const char *ns, const char *gang, int *size, char *err, size_t errlen)
{
	char workload[128], group[128], path[512], what[256], why[200];
	if (sscanf(gang, "%127[^/]/%127[^/]", workload, group) != 2) {
		snprintf(err, errlen, "workloadRef %s is not workload/podGroup", gang);
		return -1;
	}
	snprintf(path, sizeof(path), "/apis/scheduling.k8s.io/v1alpha1/namespaces/%s/workloads/%s", ns, workload);
	snprintf(what, sizeof(what), "Workload %s/%s", ns, workload);
	cJSON *wl = kube_get_object(r->o.client, path, what, err, errlen);
	if (!wl)
		return -1;
	int rc = api_workload_gang(wl, group, size, why, sizeof(why));
	if (rc < 0)
		snprintf(err, errlen, "%s: %s", what, why);
	cJSON_Delete(wl);
	return rc;
}

/*
 * scheduling.k8s.io's versions that serve PodGroup objects (pods'
 * spec.schedulingGroup, Kubernetes 1.36 on), newest first; all read alike.
 */
static const char *const podgroup_versions[] = { API_PODGROUP_VERSIONS };
#define PODGROUP_DISCOVER_EVERY_MS 30000

/* Discovery: the newest of podgroup_versions the API server serves podgroups in, "" for none; -1 unreachable. */
static int podgroup_discover(struct reserve *r, char ver[16], char *err, size_t errlen)
{
	ver[0] = 0;
	cJSON *group = kube_get_object(r->o.client, "/apis/scheduling.k8s.io", "API group scheduling.k8s.io", err,
				       errlen);
	if (!group)
		return -1;
	int rc = 0;
	for (size_t i = 0; !ver[0] && i < sizeof(podgroup_versions) / sizeof(podgroup_versions[0]); i++) {
		if (!api_group_serves(group, podgroup_versions[i]))
			continue;
		char path[64];
		snprintf(path, sizeof(path), "/apis/scheduling.k8s.io/%s", podgroup_versions[i]);
		cJSON *list = kube_get_object(r->o.client, path, path, err, errlen);
		if (!list)
			rc = -1;
		else if (api_resource_list_has(list, "podgroups"))
			snprintf(ver, 16, "%s", podgroup_versions[i]);
		cJSON_Delete(list);
	}
	cJSON_Delete(group);
	return ver[0] ? 0 : rc;
}

/*
 * The version to read PodGroups in. Discovery decides, on first use and again
 * (at most every PODGROUP_DISCOVER_EVERY_MS) when none was served or when
 * `again` (a read failed: the API server may have been upgraded, or the API
 * turned on, since). Not a blind fallback on 404: a PodGroup may well not exist
 * yet (pods may name one before it is made), which says nothing of versions.
 */
static int podgroup_version(struct reserve *r, bool again, char ver[16], char *err, size_t errlen)
{
	int64_t now = clock_mono_ms();
	pthread_mutex_lock(&r->lock);
	bool keep = r->podgroup_discovered && ((r->podgroup_version[0] && !again) ||
					       now - r->podgroup_checked_ms < PODGROUP_DISCOVER_EVERY_MS);
	snprintf(ver, 16, "%s", r->podgroup_version);
	pthread_mutex_unlock(&r->lock);
	if (!keep) {
		char was[16];
		snprintf(was, sizeof(was), "%s", ver);
		if (podgroup_discover(r, ver, err, errlen))
			return -1;
		pthread_mutex_lock(&r->lock);
		snprintf(r->podgroup_version, sizeof(r->podgroup_version), "%s", ver);
		r->podgroup_discovered = true;
		r->podgroup_checked_ms = now;
		pthread_mutex_unlock(&r->lock);
		if (strcmp(was, ver))
			log_info("reading scheduling.k8s.io PodGroups", "version=%s", ver[0] ? ver : "none");
	}
	if (!ver[0]) {
		snprintf(err, errlen, "the API server serves no scheduling.k8s.io PodGroups (v1beta1, v1alpha3 or "
			 "v1alpha2: Kubernetes 1.36 on, with the GenericWorkload feature gate)");
		return -1;
	}
	return 0;
}

/*
 * The gang policy of a pod's scheduling group: the PodGroup object
 * (CLAIM_PODGROUP_PREFIX "name"), in the newest version served. 1 with its
 * minCount, 0 when it is not a gang (basic policy), -1 with err.
 */
static int scheduling_group(struct reserve *r, const char *ns, const char *gang, int *size, char *err, size_t errlen)
{
	const char *name = gang + strlen(CLAIM_PODGROUP_PREFIX);
	char ver[16], path[512], what[300], why[200];
	snprintf(what, sizeof(what), "PodGroup %s/%s (scheduling.k8s.io)", ns, name);
	cJSON *pg = NULL;
	for (int attempt = 0; !pg && attempt < 2; attempt++) {
		char was[16];
		snprintf(was, sizeof(was), "%s", attempt ? ver : "");
		if (podgroup_version(r, attempt > 0, ver, err, errlen))
			return -1;
		if (attempt && !strcmp(was, ver))
			return -1;          /* the same version again: the first answer stands */
		snprintf(path, sizeof(path), "/apis/scheduling.k8s.io/%s/namespaces/%s/podgroups/%s", ver, ns, name);
		pg = kube_get_object(r->o.client, path, what, err, errlen);
	}
	int rc = api_podgroup_gang(pg, size, why, sizeof(why));
	if (rc < 0)
		snprintf(err, errlen, "%s: %s", what, why);
	cJSON_Delete(pg);
	return rc;
}

/* A gang of Kubernetes' own API: its policy (1 gang with *size, 0 not a gang, -1 err); 2 for another kind. */
static int k8s_gang(struct reserve *r, const char *ns, const struct claim *c, int *size, char *err, size_t errlen)
{
	if (c->gang_kind == GANG_WORKLOAD)
		return workload_group(r, ns, c->gang, size, err, errlen);
	if (c->gang_kind == GANG_SCHEDULING_GROUP)
		return scheduling_group(r, ns, c->gang, size, err, errlen);
	return 2;
}

/* ---- Events ---- */

#define GANG_WAITING_EVERY_S 30   /* a waiting member is filtered again often: one Event a pod in this long */
#define GANG_EVENT_PODS 256       /* members told of a timeout at most */

/* Whether a gang (not a GpuClaim's) is a coscheduling PodGroup's: not "workload/group" nor CLAIM_PODGROUP_PREFIX. */
static bool gang_is_coscheduling(const char *gang)
{
	return !strpbrk(gang, "/:");
}

/* The gang's PodGroup, when it has one (not a GpuClaim's gang nor a Workload's): the recorder skips one not found. */
static void tell_podgroup(struct reserve *r, const char *ns, const char *gang, const char *claim, enum events_type t,
			  const char *reason, int every_s, const char *msg)
{
	if ((claim && claim[0]) || !gang_is_coscheduling(gang))
		return;
	struct events_object pg = { .api_version = "scheduling.x-k8s.io/v1alpha1", .kind = "PodGroup", .ns = ns,
				    .name = gang };
	events_post(r->o.events, &pg, t, reason, every_s, "%s", msg);
}

/* GangWaiting on the member being filtered and on its PodGroup: "2 of 3 members". */
static void tell_waiting(struct reserve *r, const struct api_pod_ref *pod, const struct claim *c, int exist, int size)
{
	if (!r->o.events)
		return;
	char msg[160];
	snprintf(msg, sizeof(msg), "gang %s waits for its members: %d of %d exist; none is placed before all are", c->gang,
		 exist, size);
	events_pod(r->o.events, pod->ns, pod->name, pod->uid, EVENTS_NORMAL, "GangWaiting", GANG_WAITING_EVERY_S, "%s",
		   msg);
	tell_podgroup(r, pod->ns, c->gang, c->gpuclaim, EVENTS_NORMAL, "GangWaiting", GANG_WAITING_EVERY_S, msg);
}

void reserve_gang_timed_out(struct reserve *r, const char *ns, const char *gang, const char *claim)
{
	if (!r->o.events)
		return;
	struct member { char name[254], uid[64]; } *m = malloc(GANG_EVENT_PODS * sizeof(*m));
	int n = 0;
	const struct pod_state *p;
	pthread_mutex_lock(&r->lock);
	for (size_t pos = 0; m && n < GANG_EVENT_PODS && (p = keyset_next(&r->pods, &pos));) {
		if (p->finished || strcmp(pod_str(p, POD_NS), ns) || strcmp(pod_str(p, POD_GANG), gang))
			continue;
		snprintf(m[n].name, sizeof(m[n].name), "%s", pod_str(p, POD_NAME));
		snprintf(m[n].uid, sizeof(m[n].uid), "%s", pod_str(p, POD_UID));
		n++;
	}
	pthread_mutex_unlock(&r->lock);
	const char *msg = "the gang's reserved places were not all taken in time and were released; it is planned again "
			  "once all its members are there";
	for (int i = 0; i < n; i++)
		events_pod(r->o.events, ns, m[i].name, m[i].uid, EVENTS_WARNING, "GangTimedOut", 0, "gang %s: %s", gang, msg);
	char full[300];
	snprintf(full, sizeof(full), "gang %s: %s", gang, msg);
	tell_podgroup(r, ns, gang, claim, EVENTS_WARNING, "GangTimedOut", 0, full);
	free(m);
}

/* ---- status ---- */

#define GANG_STATUS_MEMORY 4096   /* gangs whose last status is remembered (to skip unchanged writes) */

void reserve_gang_status(struct reserve *r, const char *ns, const char *gang, const char *claim, const char *phase,
			 int size, const struct gang_plan *plan, const char *message)
{
	/* Placed and reserved as the ledgers say now. */
	struct api_pod_ref none = { .ns = ns, .name = "", .uid = "" };
	struct gang_view v;
	if (gang_view(r, &none, gang, &v)) {
		free(v.free);
		return;
	}
	free(v.free);
	char key[256], state[512];
	snprintf(key, sizeof(key), "%s/%s", ns, gang);
	snprintf(state, sizeof(state), "%s|%d|%d|%d|%s", phase, size, v.bound, v.places, message);
	pthread_mutex_lock(&r->lock);
	const char *last = strmap_get(&r->gang_status, key);
	bool same = last && !strcmp(last, state);
	if (!same) {
		if (r->gang_status.len >= GANG_STATUS_MEMORY) {
			const char *k;
			void *val;
			for (size_t pos = 0; strmap_next(&r->gang_status, &pos, &k, &val);)
				free(val);
			strmap_release(&r->gang_status);
			strmap_init(&r->gang_status);
		}
		char *copy = strdup(state);
		void *old = NULL;
		if (copy && strmap_put(&r->gang_status, key, copy, &old))
			free(copy);
		free(old);
	}
	pthread_mutex_unlock(&r->lock);
	/* Kubernetes' own groups ("workload/group", "podgroup:name") have no status of ours to write. */
	if (same || !gang_is_coscheduling(gang))
		return;
	char path[768], now[40], what[300];
	snprintf(what, sizeof(what), "the status of gang %s/%s", ns, gang);
	reserve_status_time(now, sizeof(now));
	struct buf body;
	buf_init(&body, 1 << 16);
	if (claim && claim[0]) {
		snprintf(path, sizeof(path), "/apis/gpu.scheduling/v1/namespaces/%s/gpuclaims/%s/status", ns, claim);
		buf_adds(&body, "{\"status\":{\"gang\":{\"name\":");
		buf_add_json_str(&body, gang);
		buf_printf(&body, ",\"phase\":\"%s\",\"bound\":%d,\"reserved\":%d", phase, v.bound, v.places);
	} else {
		snprintf(path, sizeof(path), "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/%s/podgroups/%s/status", ns, gang);
		buf_printf(&body, "{\"status\":{\"phase\":\"%s\",\"placed\":%d,\"reserved\":%d", phase, v.bound,
			   v.places);
	}
	if (size)
		buf_printf(&body, ",\"size\":%d", size);
	if (plan)   /* the spread, as reserved */
		buf_printf(&body, ",\"nodes\":%d,\"domains\":%d", plan->nodes, plan->domains);
	buf_adds(&body, ",\"message\":");
	buf_add_json_str(&body, message);
	buf_printf(&body, ",\"lastTransitionTime\":\"%s\"}}%s", now, claim && claim[0] ? "}" : "");
	reserve_patch_status(r, path, buf_cstr(&body), what);
	buf_release(&body);
}

/* ---- the lock: one replica reserves a gang at a time ---- */

/*
 * How long a plan may stay Writing: its writer gives up at half of it, and
 * another replica takes it back once it saw the lock unchanged this long
 * (on its own clock). Well inside the gang's timeout.
 */
static int write_window_s(int timeout)
{
	int w = timeout / 4;
	return w < 5 ? 5 : w > 30 ? 30 : w;
}

/*
 * 0: this replica holds the gang's lock now, recording the plan in (*lock:
 * as created); 1: another does (holder says which); -1: err.
 */
static int lock_take(struct reserve *r, const char *ns, const char *gang, const char *id, int timeout,
		     const struct gang_intent *in, struct store_lock *lock, char *holder, size_t hsize, char *err,
		     size_t errlen)
{
	for (int attempt = 0; attempt < 3; attempt++) {
		int rc = store_lock_create(&r->store, ns, gang, id, timeout, in, lock, err, errlen);
		if (rc != STORE_CONFLICT)
			return rc == STORE_OK ? 0 : -1;
		/* Held: by a live replica, or left by one that died while reserving. */
		struct store_lock old;
		rc = store_lock_read(&r->store, id, &old, err, errlen);
		if (rc == STORE_ERROR)
			return -1;
		bool unfinished = old.planned && old.in.state != PLAN_WRITTEN;
		snprintf(holder, hsize, "%s", old.holder[0] ? old.holder : "another replica");
		/*
		 * Ours, from a reservation of this gang that lost a place since (a
		 * failed bind): made again for the new plan. One that expired: its
		 * holder is gone. Not one whose plan is unfinished: the reaper takes
		 * its places back first.
		 */
		bool gone = rc == STORE_OK && !unfinished &&
			    (!strcmp(old.holder, r->identity) || old.end < clock_wall_s());
		if (gone)
			store_lock_delete(&r->store, id, old.rv);
		store_lock_release(&old);
		if (!gone)
			return 1;
	}
	return 1;
}

/* Remembers that a plan of the gang is Written: its places may be taken. */
static void plan_is_written(struct reserve *r, const char *id, const char *plan)
{
	char key[32];
	snprintf(key, sizeof(key), "%s-p%s", id, plan);
	pthread_mutex_lock(&r->lock);
	if (r->gang_written.len >= 4096) {   /* plans live for a gang's timeout: forgetting only costs a read */
		strmap_release(&r->gang_written);
		strmap_init(&r->gang_written);
	}
	strmap_put(&r->gang_written, key, (void *)1, NULL);
	pthread_mutex_unlock(&r->lock);
}

/* Reads the gang's lock: whether it records plan as Written (then remembered). */
static bool plan_confirm(struct reserve *r, const char *ns, const char *gang, const char *plan)
{
	char id[17], err[256];
	ledger_gang_id(ns, gang, id);
	struct store_lock lock;
	bool written = store_lock_read(&r->store, id, &lock, err, sizeof(err)) == STORE_OK && lock.planned &&
		       !strcmp(lock.in.plan, plan) && lock.in.state == PLAN_WRITTEN;
	store_lock_release(&lock);
	if (written)
		plan_is_written(r, id, plan);
	return written;
}

/* Takes every place of the plan off its nodes (those a member took are pods' now, and stay); true when all went. */
static bool plan_rollback(struct reserve *r, const char *id, const struct gang_intent *in)
{
	char (*names)[64] = calloc((size_t)in->total, sizeof(*names));
	const char **uids = calloc((size_t)in->total, sizeof(*uids));
	bool ok = names && uids;
	for (int k = 0; ok && k < in->total; k++) {
		ledger_place_uid(id, in->plan, k, names[k], sizeof(names[k]));
		uids[k] = names[k];
	}
	for (int i = 0; ok && i < in->nnodes; i++) {
		char err[256];
		if (reserve_take_back(r, in->nodes[i], uids, in->total, err, sizeof(err))) {
			log_warn("cannot take a gang's unfinished places back now; retrying next pass", "node=%s error=\"%s\"",
				 in->nodes[i], LOG_Q(err));
			ok = false;
		}
	}
	free(names);
	free(uids);
	return ok;
}

/* ---- writing the places ---- */

struct place_ctx {
	struct reserve *r;
	const struct api_pod_ref *pod;
	const char *gang, *id, *plan, *node;
	const struct claim *c;
	const struct gpu_node *devices;  /* the node's devices, unused */
	int first, count;                /* slot numbers first .. first+count-1 */
	int timeout;
	struct ledger_entry *made;       /* room for count entries */
};

/*
 * Adds the node's places to its ledger as read now: the devices are chosen
 * again on the ledger's own state (the plan used the cache's), and if they
 * no longer all fit, nothing is written (the gang is reserved whole or not).
 */
static int edit_places(void *ctx, struct ledger *l, char *err, size_t errlen)
{
	struct place_ctx *p = ctx;
	struct gpu_node *n = reserve_node_in_ledger(p->r, p->devices, l);
	if (!n) {
		snprintf(err, errlen, "out of memory");
		return -BIND_ERROR;
	}
	int rc = LEDGER_WRITE, added = 0;
	for (int k = 0; k < p->count; k++) {
		struct fit f;
		if (!fit_node(n, p->c, PACK_BINPACK, &f)) {
			snprintf(err, errlen, "node %s no longer has room for the gang's places: %s", p->node, f.reason);
			rc = -BIND_CONFLICT;
			break;
		}
		fit_apply(n, p->c, &f);
		char uid[64];
		ledger_place_uid(p->id, p->plan, p->first + k, uid, sizeof(uid));
		struct bind_request req = { .ns = p->pod->ns, .name = p->gang, .uid = uid, .node = p->node, .claim = p->c };
		struct ledger_entry *e = &p->made[k];
		memset(e, 0, sizeof(*e));
		if (bind_alloc(&e->a, &req, n, &f, err, errlen)) {
			rc = -BIND_ERROR;
			break;
		}
		ledger_entry_set_pod(e, req.ns, req.name);
		snprintf(e->claim, sizeof(e->claim), "%s", p->c->gpuclaim);
		snprintf(e->gang, sizeof(e->gang), "%s", p->gang);
		e->gang_timeout_s = p->timeout;
		if (ledger_find(l, uid) >= 0 || ledger_add(l, e)) {
			snprintf(err, errlen, "cannot add place %s to the ledger of %s", uid, p->node);
			rc = -BIND_ERROR;
			break;
		}
		added++;
	}
	if (rc != LEDGER_WRITE)
		l->n -= added;     /* added last: taken back off the end */
	gpu_node_free(n);
	return rc;
}

/* Takes back the places of slots 0..upto-1 (those written, and any whose write had no answer); true when all went. */
static bool unwrite(struct reserve *r, const struct gang_plan *p, const struct gpu_node *const *nodes,
		    const char *id, const char *plan, int upto)
{
	bool ok = true;
	for (int s = 0; s < upto;) {
		int e = s;
		while (e < upto && p->slots[e].node == p->slots[s].node)
			e++;
		const char *uids[GANG_SIZE_MAX];
		char names[GANG_SIZE_MAX][64];
		for (int k = s; k < e; k++) {
			ledger_place_uid(id, plan, k, names[k - s], sizeof(names[0]));
			uids[k - s] = names[k - s];
		}
		char err[256];
		if (reserve_take_back(r, nodes[p->slots[s].node]->name, uids, e - s, err, sizeof(err))) {
			log_warn("cannot take back a gang's places now; a reaper will", "node=%s error=\"%s\"",
				 nodes[p->slots[s].node]->name, LOG_Q(err));
			ok = false;
		}
		s = e;
	}
	return ok;
}

/* A new plan's id: 8 hex digits, unique enough among one gang's plans (replicas mix in their identity). */
static void new_plan_id(struct reserve *r, char out[9])
{
	static _Atomic uint64_t counter;
	uint64_t x = (uint64_t)strmap_hash(r->identity) ^ (uint64_t)clock_mono_ns() ^
		     (atomic_fetch_add(&counter, 1) + 1) * 0x9e3779b97f4a7c15ull;
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	snprintf(out, 9, "%08x", (unsigned)(x & 0xffffffffu));
}

/*
 * Test only: GPU_EXTENDER_TEST_GANG_PAUSE_S=N pauses N seconds after each
 * node's places were written but the last, so that an end-to-end test can
 * kill the extender part-way through a gang's reservation
 * (test/e2e/gang.sh). Unset (the default), nothing waits.
 */
static void test_pause_after_places(const char *gang, const char *node)
{
	const char *env = getenv("GPU_EXTENDER_TEST_GANG_PAUSE_S");
	int secs = env ? atoi(env) : 0;
	if (secs <= 0)
		return;
	log_warn("test only: pausing after writing a gang's places on one node", "gang=%s node=%s pause_s=%d", gang,
		 node, secs);
	struct timespec t = { secs, 0 };
	nanosleep(&t, NULL);
}

/*
 * Writes the plan's places node by node (one ledger write per node) within
 * half the write window: how many slots were written (all: p->nslots);
 * *tried: how many a write was tried for (one with no answer may have
 * gone through). err says why it stopped short.
 */
static int write_places(struct reserve *r, const struct api_pod_ref *pod, const struct claim *c, const char *gang,
			const char *id, const struct gang_intent *in, int timeout, const struct gang_plan *p,
			const struct gpu_node *const *nodes, struct ledger_entry *made, int *tried, char *err,
			size_t errlen)
{
	int64_t deadline = clock_mono_ms() + (int64_t)write_window_s(timeout) * 500;
	int done = 0;
	*tried = 0;
	while (done < p->nslots) {
		int end = done;
		while (end < p->nslots && p->slots[end].node == p->slots[done].node)
			end++;
		const char *node = nodes[p->slots[done].node]->name;
		reserve_confirm_hints(r, node);
		if (clock_mono_ms() > deadline) {
			snprintf(err, errlen, "writing its places took longer than %d s", write_window_s(timeout) / 2);
			break;
		}
		struct place_ctx pc = { .r = r, .pod = pod, .gang = gang, .id = id, .plan = in->plan, .node = node, .c = c,
					.devices = cache_clone_devices(r->o.cache, node), .first = done,
					.count = end - done, .timeout = timeout, .made = made + done };
		*tried = end;
		int rc = pc.devices ? reserve_ledger_update(r, node, edit_places, &pc, err, errlen) : -BIND_NO_FIT;
		if (!pc.devices)
			snprintf(err, errlen, "node %s has no GpuNodeStatus", node);
		gpu_node_free((struct gpu_node *)pc.devices);
		if (rc < 0)
			break;
		done = end;
		if (done < p->nslots)
			test_pause_after_places(gang, node);
	}
	return done;
}

/* The intent of a new plan p: its id, its places, its nodes; false when out of memory. */
static bool plan_intent(struct reserve *r, const struct gang_plan *p, const struct gpu_node *const *nodes,
			struct gang_intent *in)
{
	*in = (struct gang_intent){ .total = p->nslots, .state = PLAN_WRITING };
	new_plan_id(r, in->plan);
	in->nodes = calloc((size_t)p->nodes + 1, sizeof(*in->nodes));
	for (int s = 0; in->nodes && s < p->nslots; s++)
		if (!s || p->slots[s].node != p->slots[s - 1].node)
			snprintf(in->nodes[in->nnodes++], sizeof(*in->nodes), "%s", nodes[p->slots[s].node]->name);
	return in->nodes != NULL;
}

/*
 * Writes the plan's places under the gang's lock, then marks the plan
 * Written (members may take its places only then; a fenced lock refuses
 * it). 0, or -1 with err: what was written is taken back (or left to any
 * replica's reaper, the plan marked RolledBack).
 */
static int write_plan(struct reserve *r, const struct api_pod_ref *pod, const struct claim *c, const char *gang,
		      const char *id, const struct gang_intent *in, int members, int timeout, const struct gang_plan *p,
		      const struct gpu_node *const *nodes, struct store_lock *lock, char *err, size_t errlen)
{
	struct ledger_entry *made = calloc((size_t)members, sizeof(*made));
	int tried = 0, done = made ? write_places(r, pod, c, gang, id, in, timeout, p, nodes, made, &tried, err, errlen)
				   : 0;
	bool all = made && done == p->nslots;
	if (!made)
		snprintf(err, errlen, "out of memory");
	free(made);
	int marked = all ? store_lock_set_state(&r->store, lock, PLAN_WRITTEN, err, errlen) : STORE_ERROR;
	if (marked == STORE_OK)
		return 0;
	if (all && marked == STORE_CONFLICT)
		snprintf(err, errlen, "another replica took its unfinished places back");
	/* A write with no answer may have gone through: its node's places go too. */
	if (unwrite(r, p, nodes, id, in->plan, marked == STORE_ERROR && all ? p->nslots : tried))
		store_lock_delete(&r->store, id, lock->rv);
	else if (marked != STORE_ERROR)
		store_lock_set_state(&r->store, lock, PLAN_ROLLED_BACK, err, errlen);   /* any replica's reaper finishes it */
	return -1;
}

/* Plans and reserves every place of the gang; out says where the pod may go, or why nowhere. */
static void reserve_places(struct reserve *r, const struct api_pod_ref *pod, const struct claim *c, const char *gang,
			   int members, int timeout, const struct gpu_node *const *nodes, int n, struct gang_route *out)
{
	struct gang_plan p;
	if (gang_plan(nodes, n, c, members, r->o.gang_topology_key, &p)) {
		snprintf(out->reason, sizeof(out->reason), "gang %s/%s: out of memory planning it", pod->ns, gang);
		return;
	}
	if (!p.ok) {
		snprintf(out->reason, sizeof(out->reason), "gang %s/%s %s", pod->ns, gang, p.reason);
		metrics_inc(M_GANGS, GANG_NO_FIT);
		reserve_gang_status(r, pod->ns, gang, c->gpuclaim, "Waiting", 0, NULL, out->reason);
		events_pod(r->o.events, pod->ns, pod->name, pod->uid, EVENTS_WARNING, "GPUClaimUnsatisfiable", 60, "%s",
			   out->reason);
		return;
	}
	char id[17], holder[128], err[256] = "";
	ledger_gang_id(pod->ns, gang, id);
	/* The intent first, durably: the plan, its places, its nodes (docs/gang.md, "Crashes"). */
	struct gang_intent in;
	struct store_lock lock;
	memset(&lock, 0, sizeof(lock));
	int locked = plan_intent(r, &p, nodes, &in) ? lock_take(r, pod->ns, gang, id, timeout, &in, &lock, holder,
								 sizeof(holder), err, sizeof(err)) : -1;
	if (locked) {
		snprintf(out->reason, sizeof(out->reason), "gang %s/%s is being reserved by %s; retrying", pod->ns, gang,
			 locked > 0 ? holder : in.nodes ? err : "out of memory");
		out->retry = true;
		metrics_inc(M_GANGS, GANG_CONFLICT);
	} else if (write_plan(r, pod, c, gang, id, &in, members, timeout, &p, nodes, &lock, err, sizeof(err))) {
		snprintf(out->reason, sizeof(out->reason), "gang %s/%s could not be reserved whole (%s); retrying", pod->ns,
			 gang, err);
		out->retry = true;
		metrics_inc(M_GANGS, GANG_CONFLICT);
	} else {
		plan_is_written(r, id, in.plan);
		/* Where the places are: the pod may go to any of them. */
		out->ok = true;
		out->nodes = in.nodes;
		out->n = in.nnodes;
		in.nodes = NULL;
		metrics_inc(M_GANGS, GANG_RESERVED);
		log_info("reserved a gang", "gang=%s/%s members=%d gpus_each=%d nodes=%d domains=%d timeout_s=%d plan=%s",
			 pod->ns, gang, members, c->count, p.nodes, p.domains, timeout, in.plan);
		char msg[160];
		snprintf(msg, sizeof(msg), "%d place%s on %d node%s in %d topology domain%s", members,
			 members == 1 ? "" : "s", p.nodes, p.nodes == 1 ? "" : "s", p.domains, p.domains == 1 ? "" : "s");
		reserve_gang_status(r, pod->ns, gang, c->gpuclaim, "Reserved", 0, &p, msg);
	}
	store_lock_release(&lock);
	ledger_intent_release(&in);
	gang_plan_release(&p);
}

/*
 * The nodes where the member may take a place over (each place checked
 * against its whole claim on the node as the filter has it); false with
 * out->reason when none.
 */
static bool route_places(const struct api_pod_ref *pod, const struct claim *c, const struct gang_view *v,
			 const struct gpu_node *const *nodes, int n, struct gang_route *out)
{
	char why[256] = "";
	out->nodes = calloc((size_t)v->nfree + 1, sizeof(*out->nodes));
	for (int k = 0; out->nodes && k < v->nfree; k++) {
		const struct free_place *f = &v->free[k];
		bool listed = false;
		for (int i = 0; i < out->n && !listed; i++)
			listed = !strcmp(out->nodes[i], f->node);
		const struct gpu_node *node = NULL;
		for (int i = 0; i < n && !node; i++)
			if (!strcmp(nodes[i]->name, f->node))
				node = nodes[i];
		/* (a node the filter was not asked about is no choice for it anyway) */
		if (!listed && node && gang_place_fits(node, &f->pl, c, why, sizeof(why)))
			snprintf(out->nodes[out->n++], sizeof(*out->nodes), "%s", f->node);
	}
	if (!out->nodes)
		snprintf(out->reason, sizeof(out->reason), "out of memory");
	else if (!out->n && why[0])   /* every member asks the same (docs/gang.md) */
		snprintf(out->reason, sizeof(out->reason), "gang %s/%s has %s", pod->ns, c->gang, why);
	else if (!out->n)
		snprintf(out->reason, sizeof(out->reason), "the places of gang %s/%s are on other nodes", pod->ns, c->gang);
	out->ok = out->n > 0;
	out->retry = !out->n && !why[0];   /* kube-scheduler names other nodes at its next try */
	return out->ok;
}

/* The view, with a plan not seen Written yet looked up once at its lock. */
static int gang_view_confirmed(struct reserve *r, const struct api_pod_ref *pod, const char *gang, struct gang_view *v)
{
	int rc = gang_view(r, pod, gang, v);
	if (!rc && v->pending[0] && plan_confirm(r, pod->ns, gang, v->pending)) {
		free(v->free);
		rc = gang_view(r, pod, gang, v);
	}
	return rc;
}

void reserve_gang_route(void *ctx, const struct api_pod_ref *pod, const struct claim *c,
			const struct gpu_node *const *nodes, int n, struct gang_route *out)
{
	struct reserve *r = ctx;
	memset(out, 0, sizeof(*out));
	out->steered = true;
	struct gang_view v;
	/* Members of one gang in filter at once: the second sees the first one's places. */
	pthread_mutex_lock(&r->gang_lock);
	if (gang_view_confirmed(r, pod, c->gang, &v)) {
		pthread_mutex_unlock(&r->gang_lock);
		snprintf(out->reason, sizeof(out->reason), "out of memory");
		free(v.free);
		return;
	}
	if (v.own[0]) {
		/* It holds a reservation already (a retried bind): there, as any pod. */
		out->steered = false;
	} else if (v.places && !v.nfree) {
		/* Places of a plan not Written: being written, or to be taken back (the reaper). */
		snprintf(out->reason, sizeof(out->reason),
			 "gang %s/%s is being reserved (its places are not all written yet); retrying", pod->ns, c->gang);
		out->retry = true;
	} else if (v.places) {
		route_places(pod, c, &v, nodes, n, out);
	} else {
		int size = c->gang_size, timeout = c->gang_timeout_s, policy = 1;
		char err[256];
		if (!size && (policy = k8s_gang(r, pod->ns, c, &size, err, sizeof(err))) == 2)
			policy = pod_group(r, pod->ns, c->gang, &size, &timeout, err, sizeof(err)) ? -1 : 1;
		if (policy < 0) {
			snprintf(out->reason, sizeof(out->reason), "gang %s/%s: %s", pod->ns, c->gang, err);
		} else if (policy == 0 || v.bound >= size) {
			out->steered = false;     /* not a gang, or complete: more members are placed as any pod */
		} else {
			int exist = members_watched(r, pod, c->gang);
			int want = size - v.bound;
			if (exist < size) {
				int listed = members_listed(r, pod, c->gang);
				exist = listed > exist ? listed : exist;
			}
			if (exist < size) {
				snprintf(out->reason, sizeof(out->reason),
					 "gang %s/%s waits for its members: %d of %d exist; none is placed before all are",
					 pod->ns, c->gang, exist, size);
				metrics_inc(M_GANGS, GANG_WAITING);
				pthread_mutex_unlock(&r->gang_lock);
				tell_waiting(r, pod, c, exist, size);
				reserve_gang_status(r, pod->ns, c->gang, c->gpuclaim, "Waiting", size, NULL, out->reason);
				free(v.free);
				return;
			} else {
				reserve_places(r, pod, c, c->gang, want, timeout ? timeout : r->o.gang_timeout_s, nodes, n, out);
			}
		}
	}
	pthread_mutex_unlock(&r->gang_lock);
	free(v.free);
}

bool reserve_gang_has_places(struct reserve *r, const char *ns, const char *gang)
{
	struct api_pod_ref none = { .ns = ns, .name = "", .uid = "" };
	struct gang_view v;
	bool has = !gang_view_confirmed(r, &none, gang, &v) && v.places > 0;
	free(v.free);
	return has;
}

bool reserve_gang_incomplete(struct reserve *r, const struct api_pod_ref *pod, const struct claim *c)
{
	int size = c->gang_size, timeout = 0;
	char err[256];
	int policy = size ? 1 : k8s_gang(r, pod->ns, c, &size, err, sizeof(err));
	if (policy <= 0)
		return policy < 0;    /* not a gang: bound as any pod */
	if (policy == 2 && pod_group(r, pod->ns, c->gang, &size, &timeout, err, sizeof(err)))
		return true;
	struct gang_view v;
	if (gang_view(r, pod, c->gang, &v))
		return true;
	bool incomplete = v.bound < size && !v.own[0];
	free(v.free);
	return incomplete;
}

/* A place is not taken within this long of its gang's timeout (a quarter of it at most): replicas' clocks differ. */
#define PLACE_TAKE_MARGIN_S 5

int reserve_place_timeout(const struct reserve *r, int own_s)
{
	return own_s ? own_s : r->o.gang_timeout_s;
}

bool reserve_gang_can_take(struct reserve *r, const struct gpu_node *devices, const struct ledger_entry *e,
			   const char *ns, const struct claim *c)
{
	if (!ledger_entry_is_place(e) || strcmp(e->gang, c->gang) || strcmp(e->ns, ns))
		return false;
	/* A place past its gang's timeout is a reaper's to release: taken now, the gang's other
	 * places could go in the same pass and leave the gang with this member alone. */
	int timeout = reserve_place_timeout(r, e->gang_timeout_s);
	int margin = timeout / 4 < PLACE_TAKE_MARGIN_S ? timeout / 4 : PLACE_TAKE_MARGIN_S;
	if (clock_wall_s() - (int64_t)e->a.since > timeout - margin)
		return false;
	char id[17], why[256];
	ledger_gang_id(ns, c->gang, id);
	pthread_mutex_lock(&r->lock);
	bool written = plan_written_locked(r, id, e->a.uid, NULL);
	pthread_mutex_unlock(&r->lock);
	struct gang_place p;
	place_of_alloc(&e->a, &p);
	return written && gang_place_fits(devices, &p, c, why, sizeof(why));
}

void reserve_gang_place_taken(struct reserve *r, const char *ns, const struct claim *c)
{
	struct api_pod_ref none = { .ns = ns, .name = "", .uid = "" };
	struct gang_view v;
	if (!gang_view(r, &none, c->gang, &v)) {
		/*
		 * (The lock stays until it expires: another replica whose ledger
		 * watch has not yet shown every member bound would plan the gang
		 * again if it could take the lock.)
		 */
		reserve_gang_status(r, ns, c->gang, c->gpuclaim, v.places ? "Reserved" : "Bound", 0, NULL,
				    v.places ? "members being bound into the gang's places" : "every member bound");
	}
	free(v.free);
}

/* A Writing plan's lock as this replica first saw that version of it. */
struct lock_seen {
	char rv[64];
	int64_t since_ms;         /* clock_mono_ms() */
	uint32_t pass;            /* the last pass that listed it */
};

/* Whether the lock has stayed at version rv for the write window, on this replica's own clock. */
static bool writing_too_long(struct reserve *r, const char *name, const char *rv, int window_s, uint32_t pass)
{
	int64_t now = clock_mono_ms();
	pthread_mutex_lock(&r->lock);
	struct lock_seen *seen = strmap_get(&r->gang_writing, name);
	if (!seen && (seen = calloc(1, sizeof(*seen))) && strmap_put(&r->gang_writing, name, seen, NULL)) {
		free(seen);
		seen = NULL;
	}
	bool stale = false;
	if (seen && strcmp(seen->rv, rv)) {
		snprintf(seen->rv, sizeof(seen->rv), "%s", rv);
		seen->since_ms = now;
	} else if (seen) {
		stale = now - seen->since_ms > (int64_t)window_s * 1000;
	}
	if (seen)
		seen->pass = pass;
	pthread_mutex_unlock(&r->lock);
	return stale;
}

/* Forgets the locks the last list did not show. */
static void forget_locks(struct reserve *r, uint32_t pass)
{
	const char *key;
	void *val;
	pthread_mutex_lock(&r->lock);
	for (size_t pos = 0; strmap_next(&r->gang_writing, &pos, &key, &val);)
		if (((struct lock_seen *)val)->pass != pass)
			free(strmap_del(&r->gang_writing, key));
	pthread_mutex_unlock(&r->lock);
}

/*
 * One gang lock as listed (a quorum read): an unfinished plan whose writer
 * gave no sign for the write window, or one a replica began to take back,
 * is taken back whole; then the lock goes, and the gang may be planned again.
 */
static void recover_lock(struct reserve *r, struct store_lock *lock, time_t now, uint32_t pass)
{
	bool expired = lock->end < (int64_t)now;
	if (!lock->planned || lock->in.state == PLAN_WRITTEN) {
		if (expired)   /* (a lock from before plans, or a Written one) */
			store_lock_delete(&r->store, lock->id, lock->rv);
		return;
	}
	char name[80], err[256];
	snprintf(name, sizeof(name), "gpu-gang.%s", lock->id);
	if (lock->in.state == PLAN_WRITING && !expired &&
	    !writing_too_long(r, name, lock->rv, write_window_s(lock->duration_s), pass))
		return;
	/* Fenced first: the writer's Written now fails, and it stops. */
	int fenced = lock->in.state == PLAN_WRITING ? store_lock_set_state(&r->store, lock, PLAN_ROLLED_BACK, err,
									   sizeof(err)) : STORE_OK;
	if (fenced == STORE_OK && plan_rollback(r, lock->id, &lock->in)) {
		metrics_inc(M_GANGS, GANG_ROLLED_BACK);
		log_warn("rolled back a gang's unfinished reservation", "gang=%s plan=%s places=%d nodes=%d writer=%s",
			 lock->gang[0] ? lock->gang : "?", lock->in.plan, lock->in.total, lock->in.nnodes,
			 lock->holder[0] ? lock->holder : "?");
		store_lock_delete(&r->store, lock->id, lock->rv);
	}
}

void reserve_gang_reap(struct reserve *r, time_t now)
{
	struct store_lock *locks;
	int n;
	char err[256];
	if (store_lock_list(&r->store, &locks, &n, err, sizeof(err)))
		return;
	static _Atomic uint32_t passes;
	uint32_t pass = atomic_fetch_add(&passes, 1) + 1;
	for (int i = 0; i < n; i++)
		recover_lock(r, &locks[i], now, pass);
	forget_locks(r, pass);
	store_lock_free_all(locks, n);
}

void reserve_gang_free(struct reserve *r)
{
	const char *key;
	void *val;
	for (size_t pos = 0; strmap_next(&r->gang_writing, &pos, &key, &val);)
		free(val);
	strmap_release(&r->gang_writing);
	strmap_release(&r->gang_written);
}
