/*
 * Gangs in cluster mode (docs/gang.md): the places of a whole gang are
 * reserved at once, as entries of the nodes' ledgers, before any member is
 * bound; each member is then steered to a node that holds one and its bind
 * takes it over (edit_reserve in reserve.c). A gang that does not fit
 * reserves nothing, so two gangs after the same GPUs never end half-placed
 * each. A lock Lease per gang keeps two replicas from reserving one gang
 * twice; places no member took within the gang's timeout go with the reaper.
 */
#include "api.h"
#include "clock.h"
#include "gang.h"
#include "log.h"
#include "metrics.h"
#include "reserve_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GANG_LOCK_LABEL "gpu.scheduling/gang-lock"
#define GANG_ANN "gpu.scheduling/gang"

/* What the ledgers (as last watched or written) hold of one gang. */
struct gang_view {
	int places, bound;        /* places not taken yet; members bound into theirs */
	int n;
	char (*nodes)[254];       /* nodes with a place free */
	char own[254];            /* the node where the pod itself holds a reservation, or "" */
	struct alloc shape;       /* a place, as its devices were reserved */
};

static int view_add_node(struct gang_view *v, const char *node)
{
	for (int i = 0; i < v->n; i++)
		if (!strcmp(v->nodes[i], node))
			return 0;
	char (*grown)[254] = realloc(v->nodes, ((size_t)v->n + 1) * sizeof(*v->nodes));
	if (!grown)
		return -1;
	v->nodes = grown;
	snprintf(v->nodes[v->n++], sizeof(*v->nodes), "%s", node);
	return 0;
}

static int gang_view(struct reserve *r, const struct api_pod_ref *pod, const char *gang, struct gang_view *v)
{
	memset(v, 0, sizeof(*v));
	int rc = 0;
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
			if (ledger_packed_next(p, &here, &e) && ledger_entry_is_place(&e)) {
				v->shape = e.a;
				v->places++;
				rc = view_add_node(v, node);
			} else {
				v->bound++;
			}
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
 * The gang policy of a Workload's pod group (scheduling.k8s.io/v1alpha1):
 * 1 with its minCount, 0 when the group is not a gang (basic policy), -1 with err.
 */
static int workload_group(struct reserve *r, const char *ns, const char *gang, int *size, char *err, size_t errlen)
{
	char workload[128], group[128], path[512], what[256];
	if (sscanf(gang, "%127[^/]/%127[^/]", workload, group) != 2) {
		snprintf(err, errlen, "workloadRef %s is not workload/podGroup", gang);
		return -1;
	}
	snprintf(path, sizeof(path), "/apis/scheduling.k8s.io/v1alpha1/namespaces/%s/workloads/%s", ns, workload);
	snprintf(what, sizeof(what), "Workload %s/%s", ns, workload);
	cJSON *wl = kube_get_object(r->o.client, path, what, err, errlen);
	if (!wl)
		return -1;
	int rc = -1;
	const cJSON *pg;
	snprintf(err, errlen, "%s has no pod group %s", what, group);
	cJSON_ArrayForEach(pg, api_path(wl, "spec.podGroups")) {
		const char *name = api_str(pg, "name");
		if (!name || strcmp(name, group))
			continue;
		const cJSON *g = api_path(pg, "policy.gang");
		double min;
		if (!g) {
			rc = 0;
		} else if (api_whole(cJSON_GetObjectItemCaseSensitive(g, "minCount"), 1, GANG_SIZE_MAX, &min)) {
			*size = (int)min;
			rc = 1;
		} else {
			snprintf(err, errlen, "%s: pod group %s: policy.gang.minCount must be 1..%d", what, group,
				 GANG_SIZE_MAX);
		}
		break;
	}
	cJSON_Delete(wl);
	return rc;
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
		free(v.nodes);
		return;
	}
	free(v.nodes);
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
	/* A Workload's pod group ("workload/group") has no status to write to. */
	if (same || strchr(gang, '/'))
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

static void lock_path(const struct reserve *r, const char *id, bool item, char *out, size_t size)
{
	snprintf(out, size, "/apis/coordination.k8s.io/v1/namespaces/%s/leases%s%s", r->o.ns, item ? "/gpu-gang." : "",
		 item ? id : "");
}

/* A lock Lease's end (renewTime + leaseDurationSeconds), unix seconds; 0 when unreadable. */
static int64_t lock_end(const cJSON *lease)
{
	const cJSON *spec = api_path(lease, "spec");
	const char *renew = api_str(spec, "renewTime");
	double secs;
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	if (!renew || !strptime(renew, "%Y-%m-%dT%H:%M:%S", &tm) ||
	    !api_whole(cJSON_GetObjectItemCaseSensitive(spec, "leaseDurationSeconds"), 1, 1e6, &secs))
		return 0;
	return (int64_t)timegm(&tm) + (int64_t)secs;
}

/* Deletes the lock when it is still the version seen (an expired one: its holder is gone). */
static void lock_delete(struct reserve *r, const char *id, const char *rv)
{
	char path[512], body[256], err[256];
	lock_path(r, id, true, path, sizeof(path));
	snprintf(body, sizeof(body), "{\"preconditions\":{\"resourceVersion\":\"%s\"}}", rv);
	struct kube_response resp;
	kube_response_init(&resp);
	if (kube_request(r->o.client, "DELETE", path, rv[0] ? body : NULL, NULL, 10, &resp, err, sizeof(err)) ||
	    (resp.status >= 300 && resp.status != 404 && resp.status != 409))
		log_warn("cannot delete a gang's lock Lease; it expires on its own", "lease=gpu-gang.%s status=%ld", id,
			 resp.status);
	kube_response_release(&resp);
}

/* 0: this replica holds the gang's lock now; 1: another does (holder says which); -1: err. */
static int lock_take(struct reserve *r, const char *ns, const char *gang, const char *id, int timeout,
		     char *holder, size_t hsize, char *err, size_t errlen)
{
	char path[512], now[40], msg[256];
	ledger_microtime(now, sizeof(now));
	struct buf body;
	buf_init(&body, 4096);
	buf_printf(&body, "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{\"name\":"
			  "\"gpu-gang.%s\",\"labels\":{\"" GANG_LOCK_LABEL "\":\"true\"},\"annotations\":{\"" GANG_ANN
			  "\":", id);
	char key[256];
	snprintf(key, sizeof(key), "%s/%s", ns, gang);
	buf_add_json_str(&body, key);
	buf_adds(&body, "}},\"spec\":{\"holderIdentity\":");
	buf_add_json_str(&body, r->identity);
	buf_printf(&body, ",\"leaseDurationSeconds\":%d,\"acquireTime\":\"%s\",\"renewTime\":\"%s\"}}", timeout, now, now);
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = -1;
	for (int attempt = 0; attempt < 2; attempt++) {
		lock_path(r, id, false, path, sizeof(path));
		kube_response_release(&resp);
		kube_response_init(&resp);
		if (kube_request(r->o.client, "POST", path, buf_cstr(&body), NULL, 10, &resp, err, errlen))
			break;
		if (resp.status == 201 || resp.status == 200) {
			rc = 0;
			break;
		}
		if (resp.status != 409) {
			snprintf(err, errlen, "creating the gang's lock Lease: HTTP %ld: %s", resp.status,
				 kube_status_message(&resp, msg, sizeof(msg)));
			break;
		}
		/* Held: by a live replica, or left by one that died while reserving. */
		lock_path(r, id, true, path, sizeof(path));
		kube_response_release(&resp);
		kube_response_init(&resp);
		if (kube_request(r->o.client, "GET", path, NULL, NULL, 10, &resp, err, errlen))
			break;
		cJSON *lease = resp.status == 200 ? cJSON_ParseWithLength(resp.body.data, resp.body.len) : NULL;
		const char *h = api_str(api_path(lease, "spec"), "holderIdentity");
		const char *rv = api_str(api_path(lease, "metadata"), "resourceVersion");
		snprintf(holder, hsize, "%s", h ? h : "another replica");
		if (h && !strcmp(h, r->identity)) {
			/* Ours, from a reservation of this gang that lost a place since (a failed bind). */
			cJSON_Delete(lease);
			rc = 0;
			break;
		}
		bool expired = lease && lock_end(lease) < clock_wall_s();
		if (expired)
			lock_delete(r, id, rv ? rv : "");
		cJSON_Delete(lease);
		rc = 1;
		if (!expired)
			break;
	}
	kube_response_release(&resp);
	buf_release(&body);
	return rc;
}

/* ---- writing the places ---- */

struct place_ctx {
	struct reserve *r;
	const struct api_pod_ref *pod;
	const char *gang, *id, *node;
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
		snprintf(uid, sizeof(uid), LEDGER_PLACE_PREFIX "%s-%d", p->id, p->first + k);
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

/* Takes back the places written on the first ndone nodes of the plan. */
static void unwrite(struct reserve *r, const struct gang_plan *p, const struct gpu_node *const *nodes,
		    const char *id, int upto)
{
	for (int s = 0; s < upto;) {
		int e = s;
		while (e < upto && p->slots[e].node == p->slots[s].node)
			e++;
		const char *uids[GANG_SIZE_MAX];
		char names[GANG_SIZE_MAX][64];
		for (int k = s; k < e; k++) {
			snprintf(names[k - s], sizeof(names[0]), LEDGER_PLACE_PREFIX "%s-%d", id, k);
			uids[k - s] = names[k - s];
		}
		char err[256];
		if (reserve_release(r, nodes[p->slots[s].node]->name, uids, NULL, e - s, err, sizeof(err)))
			log_warn("cannot take back a gang's places now; the reaper will", "node=%s error=\"%s\"",
				 nodes[p->slots[s].node]->name, LOG_Q(err));
		s = e;
	}
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
		return;
	}
	char id[17], holder[128], err[256];
	ledger_gang_id(pod->ns, gang, id);
	int locked = lock_take(r, pod->ns, gang, id, timeout, holder, sizeof(holder), err, sizeof(err));
	if (locked) {
		snprintf(out->reason, sizeof(out->reason), "gang %s/%s is being reserved by %s; retrying", pod->ns, gang,
			 locked > 0 ? holder : err);
		metrics_inc(M_GANGS, GANG_CONFLICT);
		gang_plan_release(&p);
		return;
	}
	/* The slots come grouped by node: one ledger write per node. */
	struct ledger_entry *made = calloc((size_t)members, sizeof(*made));
	int done = 0;
	while (made && done < p.nslots) {
		int end = done;
		while (end < p.nslots && p.slots[end].node == p.slots[done].node)
			end++;
		const char *node = nodes[p.slots[done].node]->name;
		struct place_ctx pc = { .r = r, .pod = pod, .gang = gang, .id = id, .node = node, .c = c,
					.devices = cache_clone_devices(r->o.cache, node), .first = done,
					.count = end - done, .timeout = timeout, .made = made + done };
		int rc = pc.devices ? reserve_ledger_update(r, node, edit_places, &pc, err, sizeof(err)) : -BIND_NO_FIT;
		if (!pc.devices)
			snprintf(err, sizeof(err), "node %s has no GpuNodeStatus", node);
		gpu_node_free((struct gpu_node *)pc.devices);
		if (rc < 0)
			break;
		done = end;
		if (done < p.nslots)
			test_pause_after_places(gang, node);
	}
	if (!made || done < p.nslots) {
		unwrite(r, &p, nodes, id, done);
		lock_delete(r, id, "");
		snprintf(out->reason, sizeof(out->reason), "gang %s/%s could not be reserved whole (%s); retrying", pod->ns,
			 gang, made ? err : "out of memory");
		metrics_inc(M_GANGS, GANG_CONFLICT);
		free(made);
		gang_plan_release(&p);
		return;
	}
	/* Where the places are: the pod may go to any of them. */
	out->ok = true;
	out->nodes = calloc((size_t)p.nodes + 1, sizeof(*out->nodes));
	for (int s = 0; out->nodes && s < p.nslots; s++)
		if (!s || p.slots[s].node != p.slots[s - 1].node)
			snprintf(out->nodes[out->n++], sizeof(*out->nodes), "%s", nodes[p.slots[s].node]->name);
	metrics_inc(M_GANGS, GANG_RESERVED);
	log_info("reserved a gang", "gang=%s/%s members=%d gpus_each=%d nodes=%d domains=%d timeout_s=%d", pod->ns,
		 gang, members, c->count, p.nodes, p.domains, timeout);
	char msg[160];
	snprintf(msg, sizeof(msg), "%d place%s on %d node%s in %d topology domain%s", members, members == 1 ? "" : "s",
		 p.nodes, p.nodes == 1 ? "" : "s", p.domains, p.domains == 1 ? "" : "s");
	reserve_gang_status(r, pod->ns, gang, c->gpuclaim, "Reserved", 0, &p, msg);
	free(made);
	gang_plan_release(&p);
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
	if (gang_view(r, pod, c->gang, &v)) {
		pthread_mutex_unlock(&r->gang_lock);
		snprintf(out->reason, sizeof(out->reason), "out of memory");
		free(v.nodes);
		return;
	}
	if (v.own[0]) {
		/* It holds a reservation already (a retried bind): there, as any pod. */
		out->steered = false;
	} else if (v.places && (v.shape.mode != c->mode || (c->mode == CLAIM_EXCLUSIVE && v.shape.ndev != c->count))) {
		/* Its bind could not take a place over: every member asks the same (docs/gang.md). */
		snprintf(out->reason, sizeof(out->reason),
			 "gang %s/%s has places of %d %s GPU%s each; this member asks %d %s", pod->ns, c->gang, v.shape.ndev,
			 claim_mode_name(v.shape.mode), v.shape.ndev == 1 ? "" : "s", c->count, claim_mode_name(c->mode));
	} else if (v.places) {
		out->ok = true;
		out->n = v.n;
		out->nodes = v.nodes;
		v.nodes = NULL;
	} else {
		int size = c->gang_size, timeout = c->gang_timeout_s, policy = 1;
		char err[256];
		if (!size && c->gang_kind == GANG_WORKLOAD)
			policy = workload_group(r, pod->ns, c->gang, &size, err, sizeof(err));
		else if (!size && pod_group(r, pod->ns, c->gang, &size, &timeout, err, sizeof(err)))
			policy = -1;
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
				reserve_gang_status(r, pod->ns, c->gang, c->gpuclaim, "Waiting", size, NULL, out->reason);
				free(v.nodes);
				return;
			} else {
				reserve_places(r, pod, c, c->gang, want, timeout ? timeout : r->o.gang_timeout_s, nodes, n, out);
			}
		}
	}
	pthread_mutex_unlock(&r->gang_lock);
	free(v.nodes);
}

bool reserve_gang_has_places(struct reserve *r, const char *ns, const char *gang)
{
	struct api_pod_ref none = { .ns = ns, .name = "", .uid = "" };
	struct gang_view v;
	bool has = !gang_view(r, &none, gang, &v) && v.places > 0;
	free(v.nodes);
	return has;
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
	free(v.nodes);
}

void reserve_gang_reap(struct reserve *r, time_t now)
{
	char path[512], err[256];
	snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases?labelSelector=" GANG_LOCK_LABEL
		 "%%3Dtrue", r->o.ns);
	struct kube_response resp;
	kube_response_init(&resp);
	if (kube_request(r->o.client, "GET", path, NULL, NULL, 10, &resp, err, sizeof(err)) || resp.status != 200) {
		kube_response_release(&resp);
		return;
	}
	cJSON *list = cJSON_ParseWithLength(resp.body.data, resp.body.len);
	const cJSON *it;
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(list, "items")) {
		const char *name = api_str(api_path(it, "metadata"), "name");
		const char *rv = api_str(api_path(it, "metadata"), "resourceVersion");
		if (name && !strncmp(name, "gpu-gang.", 9) && lock_end(it) < (int64_t)now)
			lock_delete(r, name + 9, rv ? rv : "");
	}
	cJSON_Delete(list);
	kube_response_release(&resp);
}
