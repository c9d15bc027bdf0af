/* The reservation module's watches: ledgers, reservation Leases, GPU pods. */
#include "watch.h"
#include "api.h"
#include "clock.h"
#include "log.h"
#include "store.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- ledgers: the allocations every replica's cache shows ---- */

static void ledger_lock(void *ctx)
{
	struct reserve *r = ctx;
	pthread_mutex_lock(&r->lock);
	cache_lock(r->o.cache);
}

static void ledger_unlock(void *ctx)
{
	struct reserve *r = ctx;
	cache_unlock(r->o.cache);
	pthread_mutex_unlock(&r->lock);
}

static void ledger_begin(void *ctx)
{
	struct reserve *r = ctx;
	r->ledger_gen++;
	cache_relist_begin(r->o.cache, CACHE_ALLOCS);
}

/*
 * The cache's allocations of a node: its ledger, less the pods known to be
 * deleted (their entries wait for the reaper, but their GPUs are free now:
 * kube-scheduler retries waiting pods on the deletion, not on our release).
 * When none is, the cache shares p, the ledger as kept (NULL: none kept).
 */
static void cache_from_ledger(struct reserve *r, const char *node, const struct ledger *l,
			      const struct ledger_packed *p)
{
	bool any_gone = false;
	for (int i = 0; i < l->n && !any_gone; i++)
		any_gone = strmap_get(&r->gone, l->e[i].a.uid) != NULL;
	if (p && !any_gone) {
		cache_share_allocs(r->o.cache, node, p->block, p->n);
		return;
	}
	struct alloc *a = malloc(((size_t)l->n + 1) * sizeof(*a));
	if (!a) {
		log_error("out of memory storing a ledger", "node=%s", node);
		return;
	}
	int n = 0;
	for (int i = 0; i < l->n; i++)
		if (!strmap_get(&r->gone, l->e[i].a.uid))
			a[n++] = l->e[i].a;
	cache_set_allocs(r->o.cache, node, a, n);
	free(a);
}

/*
 * Whether resourceVersion a is older than b. The API server's are etcd
 * revisions, decimal numbers that grow with every write; other forms are
 * not compared (never older).
 */
static bool rv_older(const char *a, const char *b)
{
	size_t la = strspn(a, "0123456789"), lb = strspn(b, "0123456789");
	if (!la || !lb || a[la] || b[lb])
		return false;
	if (la != lb)
		return la < lb;
	return strcmp(a, b) < 0;
}

/*
 * Whether the node's ledger as kept is newer than a version of rv: a watch
 * event can come after this replica wrote a later version (the write's
 * answer is stored at once), and taking it would drop the allocations
 * written since from the cache until the watch caught up.
 */
static bool kept_is_newer(struct reserve *r, const char *node, const char *rv)
{
	struct ledger_box *box = keyset_get(&r->ledgers, node);
	if (!box || !rv_older(rv, box->rv))
		return false;
	box->gen = r->ledger_gen;   /* still there: a relist keeps it */
	return true;
}

/* A box for node's ledger at rv, its entries not packed yet; NULL when out of memory. */
static struct ledger_box *box_new(const char *node, const char *rv, uint64_t gen)
{
	size_t n = strlen(node) + 1, v = strlen(rv) + 1;
	struct ledger_box *box = malloc(sizeof(*box) + n + v);
	if (!box)
		return NULL;
	box->gen = gen;
	memset(&box->p, 0, sizeof(box->p));
	memcpy(box->node, node, n);
	box->rv = memcpy(box->node + n, rv, v);
	return box;
}

static void box_free(struct ledger_box *box)
{
	if (box)
		ledger_packed_release(&box->p);
	free(box);
}

static void ledger_store(struct reserve *r, const char *node, struct ledger *l)
{
	if (kept_is_newer(r, node, l->rv)) {
		ledger_release(l);
		return;
	}
	struct ledger_box *box = box_new(node, l->rv, r->ledger_gen);
	if (!box || ledger_pack(l, &box->p)) {
		free(box);
		cache_from_ledger(r, node, l, NULL);
		ledger_release(l);
		log_error("out of memory storing a ledger", "node=%s", node);
		return;
	}
	cache_from_ledger(r, node, l, &box->p);
	ledger_release(l);
	void *old = NULL;
	if (keyset_put(&r->ledgers, box, &old))
		box_free(box);
	box_free(old);
}

bool reserve_known_ledger(struct reserve *r, const char *node, struct ledger *out)
{
	pthread_mutex_lock(&r->lock);
	struct ledger_box *box = keyset_get(&r->ledgers, node);
	bool known = box ? !ledger_unpack(&box->p, node, box->rv, out) : r->ledgers_listed;
	if (!box && known)
		ledger_init(out, node);   /* none: a write creates it (409 if one came meanwhile) */
	pthread_mutex_unlock(&r->lock);
	return known;
}

void reserve_ledger_written(struct reserve *r, const char *node, struct ledger *l)
{
	ledger_lock(r);
	ledger_store(r, node, l);
	ledger_unlock(r);
}

static void ledger_put(void *ctx, const char *node, struct ledger *l)
{
	ledger_store(ctx, node, l);
}

static void ledger_deleted(void *ctx, const char *node, const char *rv)
{
	struct reserve *r = ctx;
	if (rv && kept_is_newer(r, node, rv))
		return;   /* deleted before this replica made it again */
	box_free(keyset_del(&r->ledgers, node));
	cache_set_allocs(r->o.cache, node, NULL, 0);
}

static void ledger_unreadable(void *ctx, const char *node, const char *err)
{
	struct reserve *r = ctx;
	/* Keep what we had: an unreadable ledger must not free its GPUs. */
	log_error("cannot read a ledger; keeping its last good state", "node=%s error=\"%s\"", node, LOG_Q(err));
	struct ledger_box *box = keyset_get(&r->ledgers, node);
	struct ledger kept;
	if (box) {
		box->gen = r->ledger_gen;
		if (!ledger_unpack(&box->p, node, box->rv, &kept)) {
			cache_from_ledger(r, node, &kept, &box->p);
			ledger_release(&kept);
		}
	}
}

static void ledger_end(void *ctx)
{
	struct reserve *r = ctx;
	r->ledgers_listed = true;
	cache_relist_sweep(r->o.cache, CACHE_ALLOCS);
	struct ledger_box *box;
	for (size_t pos = 0; (box = keyset_next(&r->ledgers, &pos));) {
		if (box->gen == r->ledger_gen)
			continue;
		keyset_del(&r->ledgers, box->node);
		box_free(box);
	}
}

void reserve_ledger_sink(struct reserve *r, struct reflector_sink *out)
{
	store_ledger_sink(&r->store.ledger_ev, out);
}

/* ---- common ---- */

static void lock(void *ctx)
{
	pthread_mutex_lock(&((struct reserve *)ctx)->lock);
}

static void unlock(void *ctx)
{
	pthread_mutex_unlock(&((struct reserve *)ctx)->lock);
}

/* The pod's GPUs shown free by the cache (what filters read); its ledger entries are untouched. */
static void free_in_cache(struct reserve *r, const char *uid)
{
	cache_lock(r->o.cache);
	while (cache_remove_alloc(r->o.cache, uid, NULL))
		;
	cache_unlock(r->o.cache);
}

void reserve_mark_gone(struct reserve *r, const char *uid)
{
	strmap_put(&r->gone, uid, (void *)(intptr_t)clock_wall_s(), NULL);
	free_in_cache(r, uid);
	reaper_kick(r);
}

void reserve_cache_hold_again(struct reserve *r, const char *node, const char *uid)
{
	pthread_mutex_lock(&r->lock);
	cache_lock(r->o.cache);
	struct alloc a;
	char on[256];
	struct ledger_box *box = keyset_get(&r->ledgers, node);
	struct ledger kept;
	if (box && !strmap_get(&r->gone, uid) && !cache_find_alloc(r->o.cache, uid, &a, on, sizeof(on)) &&
	    ledger_packed_holds(&box->p, uid) && !ledger_unpack(&box->p, node, box->rv, &kept)) {
		cache_from_ledger(r, node, &kept, &box->p);
		ledger_release(&kept);
	}
	cache_unlock(r->o.cache);
	pthread_mutex_unlock(&r->lock);
}

/*
 * The pod watch lost sight of a pod: deleted, or only no longer selected
 * (its label taken off sends DELETED too), or missing from a relist. A
 * hint, not proof: its ledger entries stay until the reaper's fresh read of
 * the pod says it is gone. Only the cache frees its GPUs at once, so that
 * kube-scheduler's retry at the pod's deletion, which comes before that
 * read, finds them: a bind decides on the ledger, where they are still
 * held (a bind that comes too early is refused and retried), and a pod the
 * read finds alive is shown holding them again (reserve_cache_hold_again).
 * Under r->lock.
 */
static void lost_sight(struct reserve *r, const struct pod_state *p)
{
	const char *uid = pod_str(p, POD_UID);
	strmap_put(&r->check, uid, (void *)(intptr_t)clock_wall_s(), NULL);
	free_in_cache(r, uid);
	/* Asking for GPUs (bound, or maybe bound since, unseen by a silent watch): should it live on
	 * unwatched, its entry has no other record (should the ledger lose it). */
	if (p->wants_gpu && !p->finished && !strmap_get(&r->unwatched, uid)) {
		struct unwatched_pod *u = calloc(1, sizeof(*u));
		if (u && !strmap_put(&r->unwatched, uid, u, NULL)) {
			snprintf(u->ns, sizeof(u->ns), "%s", pod_str(p, POD_NS));
			snprintf(u->pod, sizeof(u->pod), "%s", pod_str(p, POD_NAME));
		} else {
			free(u);
		}
	}
	reaper_kick(r);
}

/* ---- reservation Leases: the garbage collector deletes them with their pod ---- */

static void resv_begin(void *ctx)
{
	((struct reserve *)ctx)->resv_gen++;
}

/*
 * A deletion: usually the garbage collector, with the pod; but an extender
 * releasing a reservation deletes its Lease too. Either way the reaper looks
 * the pod up (the pod watch, or a GET) rather than taking it for gone.
 */
static void resv_deleted(void *ctx, const char *ns, const char *name, const char *uid)
{
	struct reserve *r = ctx;
	char key[256];
	snprintf(key, sizeof(key), "%s/%s", ns, name);
	free(strmap_del(&r->resv, key));
	if (uid) {
		strmap_put(&r->check, uid, (void *)(intptr_t)clock_wall_s(), NULL);
		reaper_kick(r);
	}
}

/*
 * The Leases that exist are kept too: the reaper deletes those whose ledger
 * entry is gone (a release whose answer was lost, a deletion that failed).
 */
static void resv_put(void *ctx, const char *ns, const char *name, const char *uid, const char *pod, const char *node)
{
	struct reserve *r = ctx;
	char key[256];
	snprintf(key, sizeof(key), "%s/%s", ns, name);
	struct resv_lease *l = strmap_get(&r->resv, key);
	if (!l) {
		if (!(l = calloc(1, sizeof(*l))) || strmap_put(&r->resv, key, l, NULL)) {
			free(l);
			return;
		}
		l->seen = (time_t)clock_wall_s();
	}
	snprintf(l->ns, sizeof(l->ns), "%s", ns);
	snprintf(l->uid, sizeof(l->uid), "%s", uid);
	snprintf(l->node, sizeof(l->node), "%s", node);
	snprintf(l->pod, sizeof(l->pod), "%s", pod);
	l->gen = r->resv_gen;
}

/* Leases gone while we were not watching: forgotten. */
static void resv_end(void *ctx)
{
	struct reserve *r = ctx;
	const char *key;
	void *val;
	for (size_t pos = 0; strmap_next(&r->resv, &pos, &key, &val);)
		if (((struct resv_lease *)val)->gen != r->resv_gen)
			free(strmap_del(&r->resv, key));
}

void reserve_reservation_sink(struct reserve *r, struct reflector_sink *out)
{
	store_resv_sink(&r->store.resv_ev, out);
}

void reserve_watch_events(struct reserve *r)
{
	r->store.ledger_ev = (struct store_ledger_events){ { r, ledger_lock, ledger_unlock, ledger_begin, ledger_end },
							    ledger_put, ledger_unreadable, ledger_deleted };
	r->store.resv_ev = (struct store_resv_events){ { r, lock, unlock, resv_begin, resv_end }, resv_put, resv_deleted };
}

/* ---- pods that hold GPUs ---- */

static void pods_begin(void *ctx)
{
	((struct reserve *)ctx)->pods_gen++;
}

/*
 * A pod_state with copies of the strings, in one allocation (the
 * annotation's "<node>:" left out when node is the pod's); NULL when out
 * of memory or too long.
 */
static struct pod_state *pod_state_new(const char *const given[POD_STRINGS])
{
	const char *str[POD_STRINGS];
	memcpy(str, given, sizeof(str));
	const char *ids = alloc_ids_on(str[POD_ALLOCATED], str[POD_NODE]);
	bool ids_only = ids != NULL;
	if (ids_only)
		str[POD_ALLOCATED] = ids;
	size_t len[POD_STRINGS], total = 0;
	for (int i = 0; i < POD_STRINGS; i++)
		total += (len[i] = strlen(str[i])) + 1;
	if (total > UINT16_MAX)
		return NULL;
	struct pod_state *p = calloc(1, offsetof(struct pod_state, strings) + total);
	if (!p)
		return NULL;
	p->ids_only = ids_only;
	for (size_t i = 0, at = 0; i < POD_STRINGS; at += len[i++] + 1) {
		if (i)
			p->at[i - 1] = (uint16_t)at;
		memcpy(p->strings + at, str[i], len[i] + 1);
	}
	return p;
}

bool reserve_pod_wants(struct reserve *r, const cJSON *pod, struct claim *c)
{
	char err[256];
	cache_claims_rdlock(r->o.cache);
	bool wants = !api_pod_claim(pod, r->o.res, cache_gpuclaim_lookup, r->o.cache, c, err, sizeof(err)) &&
		     claim_wants_gpu(c);
	cache_claims_unlock(r->o.cache);
	return wants;
}

static void pod_apply(void *ctx, bool deleted, const cJSON *obj)
{
	struct reserve *r = ctx;
	struct api_pod_ref ref;
	api_pod_ref(obj, &ref);
	if (!ref.uid[0])
		return;
	if (deleted) {
		struct pod_state *was = keyset_del(&r->pods, ref.uid);
		if (was)
			lost_sight(r, was);
		else
			strmap_put(&r->check, ref.uid, (void *)(intptr_t)clock_wall_s(), NULL);
		free(was);
		reaper_kick(r);
		return;
	}
	free(strmap_del(&r->unwatched, ref.uid));   /* (in sight again) */
	struct claim c;
	bool wants = reserve_pod_wants(r, obj, &c);
	const char *node = api_str(api_path(obj, "spec"), "nodeName"), *ann = api_pod_allocated(obj, NULL, 0);
	const char *str[POD_STRINGS] = { ref.uid, ref.ns, ref.name, node ? node : "", ann ? ann : "",
					 wants ? c.gang : "", wants ? c.gpuclaim : "" };
	struct pod_state *p = pod_state_new(str), *old = NULL;
	if (p) {
		p->wants_gpu = wants;
		p->mode = (uint8_t)(wants ? c.mode : CLAIM_NONE);
		p->mem_mib = wants ? c.mem_mib : 0;
		p->core = wants ? c.core : 0;
		p->finished = api_pod_finished(obj);
		p->gen = (uint32_t)r->pods_gen;
	}
	claim_release(&c);
	if (!p || keyset_put(&r->pods, p, (void **)&old)) {
		free(p);
		return;
	}
	free(old);
	if (p->finished)
		reaper_kick(r);
}

static void pods_end(void *ctx)
{
	struct reserve *r = ctx;
	/* Pods that vanished while we were not watching: gone, or only out of the selection. */
	struct pod_state *p;
	for (size_t pos = 0; (p = keyset_next(&r->pods, &pos));) {
		if (p->gen == (uint32_t)r->pods_gen)
			continue;
		lost_sight(r, p);
		keyset_del(&r->pods, pod_str(p, POD_UID));
		free(p);
	}
}

void reserve_pod_sink(struct reserve *r, struct reflector_sink *out)
{
	*out = (struct reflector_sink){ lock, unlock, pods_begin, pod_apply, pods_end, r };
}

struct gpu_node *reserve_node_in_ledger(struct reserve *r, const struct gpu_node *devices, const struct ledger *l)
{
	struct gpu_node *n = gpu_node_clone(devices);
	if (!n)
		return NULL;
	/* a deleted pod's entry waits for the reaper, but its GPUs are free */
	pthread_mutex_lock(&r->lock);
	for (int k = 0; k < l->n; k++)
		if (!strmap_get(&r->gone, l->e[k].a.uid))
			alloc_apply(n, &l->e[k].a);
	pthread_mutex_unlock(&r->lock);
	return n;
}
