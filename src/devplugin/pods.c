/*
 * The pods the extender bound to this node, and what their bindings gave
 * them: parsed from Pod objects (pure), and kept in a store that a watch
 * of spec.nodeName=<node> keeps current.
 *
 * The store also remembers the order in which pods arrived bound here,
 * because that is the order in which kubelet admits them (it sees the
 * same watch stream): among pods waiting for the same resource, the first
 * seen is the one kubelet is admitting. The pods of one list (the watch
 * listed again, a refresh, the agent's start) arrive together, but
 * kubelet's watch had them one by one: their resourceVersions say in
 * which order.
 */
#include "devplugin.h"

#include "api.h"
#include "clock.h"
#include "log.h"
#include "reflector.h"
#include "metrics.h"
#include "strnum.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- parsing (pure) ----------------------------------------------------------- */

static int fail(char *err, size_t errlen, const char *what, const char *value)
{
	snprintf(err, errlen, "bad %s annotation '%.80s'", what, value);
	return -1;
}

/* "0,1,7" -> ids; false on anything else. */
static bool parse_ids(const char *s, int *ids, int *n)
{
	*n = 0;
	while (*s) {
		char num[16];
		size_t len = strcspn(s, ",");
		if (!len || len >= sizeof(num) || *n >= GPU_MAX_DEVICES)
			return false;
		memcpy(num, s, len);
		num[len] = '\0';
		if (!strnum_int(num, 0, 1000000, &ids[(*n)++]))
			return false;
		s += len;
		if (*s == ',' && !*++s)
			return false;
	}
	return *n > 0;
}

/* "GPU-a,,GPU-c" -> one string per id (empty ones kept); false when the count differs. */
static bool parse_uuids(const char *s, char (*uuids)[96], int n)
{
	for (int k = 0; k < n; k++) {
		size_t len = strcspn(s, ",");
		snprintf(uuids[k], sizeof(uuids[k]), "%.*s", (int)len, s);
		s += len;
		if (k + 1 < n && *s++ != ',')
			return false;
	}
	return *s == '\0';
}

static int64_t parse_time(const char *s)
{
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
			 &tm.tm_min, &tm.tm_sec) != 6)
		return 0;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t)timegm(&tm);
}

/* A container's limit of resource name: whole units (kubelet rounds up the same way). */
static int limit_of(const cJSON *ctr, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(api_path(ctr, "resources.limits"), name);
	int64_t q = 0;
	if (cJSON_IsString(v) && strnum_quantity(v->valuestring, 1, &q) && q > 0 && q <= 100000)
		return (int)q;
	return 0;
}

static int add_containers(struct dp_pod *p, const cJSON *list, bool init, char *err, size_t errlen)
{
	const cJSON *ctr;
	cJSON_ArrayForEach(ctr, list) {
		if (p->ncontainers >= DP_MAX_CONTAINERS) {
			snprintf(err, errlen, "more than %d containers", DP_MAX_CONTAINERS);
			return -1;
		}
		struct dp_container *c = &p->c[p->ncontainers++];
		snprintf(c->name, sizeof(c->name), "%s", api_str(ctr, "name") ? api_str(ctr, "name") : "");
		c->init = init;
		const char *policy = api_str(ctr, "restartPolicy");
		c->restartable = init && policy && !strcmp(policy, "Always");
		for (int r = 0; r < DP_NRES; r++)
			c->want[r] = limit_of(ctr, dp_resource_name((enum dp_resource)r));
	}
	return 0;
}

/* Kubelet has admitted the pod once a container ran, or the pod ended (or was refused). */
static bool pod_admitted(const cJSON *pod)
{
	const char *phase = api_str(api_path(pod, "status"), "phase");
	if (phase && (!strcmp(phase, "Running") || !strcmp(phase, "Succeeded") || !strcmp(phase, "Failed")))
		return true;
	static const char *const lists[] = { "status.containerStatuses", "status.initContainerStatuses" };
	for (size_t i = 0; i < 2; i++) {
		const cJSON *st;
		cJSON_ArrayForEach(st, api_path(pod, lists[i])) {
			if (api_path(st, "state.running") || api_path(st, "state.terminated") ||
			    api_path(st, "lastState.terminated"))
				return true;
		}
	}
	return false;
}

int dp_pod_parse(const cJSON *pod, const char *node, struct dp_pod *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	const char *alloc = api_annotation(pod, ANN_ALLOCATED);
	const char *bound = api_str(api_path(pod, "spec"), "nodeName");
	if (!alloc || !bound || strcmp(bound, node))
		return 0;
	const char *colon = strchr(alloc, ':');
	if (!colon)
		return fail(err, errlen, ANN_ALLOCATED, alloc);
	if ((size_t)(colon - alloc) != strlen(node) || strncmp(alloc, node, strlen(node)))
		return 0;                         /* an allocation on another node: not ours to give */
	/* a newer format may mean something else by these annotations: no devices rather than wrong ones */
	if (!api_pod_allocated(pod, err, errlen))
		return -1;
	if (!parse_ids(colon + 1, out->ids, &out->nids))
		return fail(err, errlen, ANN_ALLOCATED, alloc);
	const char *uuids = api_annotation(pod, ANN_UUIDS);
	if (uuids && !parse_uuids(uuids, out->uuids, out->nids))
		return fail(err, errlen, ANN_UUIDS, uuids);
	const char *mem = api_annotation(pod, ANN_SHARED_MEMORY), *core = api_annotation(pod, ANN_SHARED_CORE);
	if (mem || core) {
		out->shared = true;
		if (mem && !strnum_u32(mem, &out->mem_mib))
			return fail(err, errlen, ANN_SHARED_MEMORY, mem);
		if (core && (!strnum_u32(core, &out->core_pct) || out->core_pct > 100))
			return fail(err, errlen, ANN_SHARED_CORE, core);
	}
	struct api_pod_ref ref;
	api_pod_ref(pod, &ref);
	snprintf(out->uid, sizeof(out->uid), "%s", ref.uid ? ref.uid : "");
	snprintf(out->ns, sizeof(out->ns), "%s", ref.ns ? ref.ns : "");
	snprintf(out->name, sizeof(out->name), "%s", ref.name ? ref.name : "");
	if (!out->uid[0]) {
		snprintf(err, errlen, "pod %s/%s has no uid", out->ns, out->name);
		return -1;
	}
	out->created = parse_time(api_str(api_path(pod, "metadata"), "creationTimestamp"));
	/* etcd's revision; anything else leaves 0, and creation time orders */
	const char *rv = api_str(api_path(pod, "metadata"), "resourceVersion");
	if (!rv || !strnum_i64(rv, &out->rv) || out->rv < 0)
		out->rv = 0;
	out->admitted = pod_admitted(pod);
	const char *phase = api_str(api_path(pod, "status"), "phase");
	out->finished = phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"));
	out->deleting = api_str(api_path(pod, "metadata"), "deletionTimestamp") != NULL;
	/* kubelet allocates init containers first, then the others, each in spec order */
	if (add_containers(out, api_path(pod, "spec.initContainers"), true, err, errlen) ||
	    add_containers(out, api_path(pod, "spec.containers"), false, err, errlen))
		return -1;
	return 1;
}

int dp_pod_order(const struct dp_pod *a, const struct dp_pod *b)
{
	if (a->seen != b->seen)
		return a->seen < b->seen ? -1 : 1;
	/* one list: kubelet's watch had them one by one, in the order they were bound */
	if (!a->relisted && !b->relisted && a->rv && b->rv && a->rv != b->rv)
		return a->rv < b->rv ? -1 : 1;
	if (a->created != b->created)
		return a->created < b->created ? -1 : 1;
	int c = strcmp(a->ns, b->ns);
	return c ? c : strcmp(a->name, b->name);
}

/* ---- the store ------------------------------------------------------------------- */

struct entry {
	struct dp_pod pod;
	unsigned gen;                /* the list that last confirmed it */
};

struct dp_pods {
	pthread_mutex_t mu;
	struct kube_client *kube;
	char node[254];
	char selector[300];          /* spec.nodeName=<node>: the watch's and a refresh's */
	struct reflector *refl;
	struct entry *e;
	int n, alloc;
	uint64_t seq;                /* arrival counter: one per watch event, one per list */
	uint64_t list_seq;
	uint64_t join;               /* kubelet's restart batch that new pods join (0: none), until */
	int64_t join_until_ms;       /* a list is read, or kubelet is past its batch */
	unsigned gen;
	bool listing;
};

static int find(const struct dp_pods *p, const char *uid)
{
	for (int i = 0; i < p->n; i++)
		if (!strcmp(p->e[i].pod.uid, uid))
			return i;
	return -1;
}

static void remove_at(struct dp_pods *p, int i)
{
	p->e[i] = p->e[--p->n];
}

/*
 * Whether kubelet's restart batch is still open to pods new to the store:
 * kubelet lists its pods as it starts and admits that batch as soon as the
 * plugin has registered again, within a second or two of the restart.
 */
#define RESTART_BATCH_MS 5000
static bool joining(const struct dp_pods *p)
{
	return p->join && clock_mono_ms() < p->join_until_ms;
}

/* Inserts or replaces a pod, keeping its arrival and what kubelet already took. */
static void put_locked(struct dp_pods *p, const struct dp_pod *pod, uint64_t seen)
{
	int i = find(p, pod->uid);
	if (i >= 0) {
		struct entry *e = &p->e[i];
		struct dp_pod old = e->pod;
		e->pod = *pod;
		e->pod.seen = old.seen;
		e->pod.relisted = old.relisted;
		for (int k = 0; k < e->pod.ncontainers && k < old.ncontainers; k++)
			if (!strcmp(e->pod.c[k].name, old.c[k].name))
				memcpy(e->pod.c[k].done, old.c[k].done, sizeof(old.c[k].done));
		e->gen = p->gen;
		return;
	}
	if (p->n == p->alloc) {
		int na = p->alloc ? p->alloc * 2 : 16;
		struct entry *ne = realloc(p->e, (size_t)na * sizeof(*ne));
		if (!ne) {
			log_error("out of memory keeping the node's pods", "pod=%s/%s", pod->ns, pod->name);
			return;
		}
		p->e = ne;
		p->alloc = na;
	}
	struct entry *e = &p->e[p->n++];
	e->pod = *pod;
	e->pod.seen = seen;
	e->gen = p->gen;
	if (joining(p) && !pod->admitted) {
		/* bound before kubelet's restart list most likely: in its creation-ordered batch */
		e->pod.seen = p->join;
		e->pod.relisted = true;
	}
}

/* One Pod object, from the watch, a list or a refresh; under p->mu. */
static void apply_locked(struct dp_pods *p, bool deleted, const cJSON *obj, uint64_t seen)
{
	struct dp_pod *pod = malloc(sizeof(*pod));
	if (!pod)
		return;
	char err[200];
	int rc = deleted ? 0 : dp_pod_parse(obj, p->node, pod, err, sizeof(err));
	if (rc < 0) {
		struct api_pod_ref ref;
		api_pod_ref(obj, &ref);
		log_warn("cannot read a pod's allocation; it gets no devices", "pod=%s/%s error=\"%s\"",
			 ref.ns ? ref.ns : "", ref.name ? ref.name : "", LOG_Q(err));
	}
	if (rc == 1) {
		put_locked(p, pod, seen);
	} else {
		struct api_pod_ref ref;
		api_pod_ref(obj, &ref);
		int i = ref.uid ? find(p, ref.uid) : -1;
		if (i >= 0)
			remove_at(p, i);
	}
	free(pod);
}

static void sink_lock(void *ctx)
{
	pthread_mutex_lock(&((struct dp_pods *)ctx)->mu);
}

static void sink_unlock(void *ctx)
{
	pthread_mutex_unlock(&((struct dp_pods *)ctx)->mu);
}

static void sink_list_begin(void *ctx)
{
	struct dp_pods *p = ctx;
	p->listing = true;
	p->gen++;
	p->list_seq = ++p->seq;    /* a list is one arrival: resourceVersion orders within it */
}

static void sink_apply(void *ctx, bool deleted, const cJSON *obj)
{
	struct dp_pods *p = ctx;
	apply_locked(p, deleted, obj, p->listing ? p->list_seq : ++p->seq);
}

static void sink_list_end(void *ctx)
{
	struct dp_pods *p = ctx;
	p->listing = false;
	p->join = 0;
	for (int i = p->n - 1; i >= 0; i--)
		if (p->e[i].gen != p->gen)
			remove_at(p, i);
}

struct dp_pods *dp_pods_start(struct kube_client *kube, const char *node, char *err, size_t errlen)
{
	struct dp_pods *p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&p->mu, NULL);
	p->kube = kube;
	snprintf(p->node, sizeof(p->node), "%s", node);
	snprintf(p->selector, sizeof(p->selector), "spec.nodeName=%s", node);
	if (!kube)
		return p;                 /* tests: filled with dp_pods_put */
	struct reflector_opts o = {
		.name = "pods",
		.resource = RES_PODS,
		.path = "/api/v1/pods",
		.field_selector = p->selector,
		.sink = { sink_lock, sink_unlock, sink_list_begin, sink_apply, sink_list_end, p },
	};
	p->refl = reflector_start(kube, &o, err, errlen);
	if (!p->refl) {
		pthread_mutex_destroy(&p->mu);
		free(p);
		return NULL;
	}
	return p;
}

void dp_pods_stop(struct dp_pods *p)
{
	if (!p)
		return;
	if (p->refl)
		reflector_stop(p->refl);
	pthread_mutex_destroy(&p->mu);
	free(p->e);
	free(p);
}

bool dp_pods_ready(const struct dp_pods *p)
{
	return !p->refl || reflector_ready(p->refl);
}

struct dp_pod *dp_pods_copy(struct dp_pods *p, int *n)
{
	pthread_mutex_lock(&p->mu);
	struct dp_pod *out = p->n ? malloc((size_t)p->n * sizeof(*out)) : NULL;
	*n = out ? p->n : 0;
	for (int i = 0; i < *n; i++)
		out[i] = p->e[i].pod;
	pthread_mutex_unlock(&p->mu);
	return out;
}

int dp_pods_refresh(struct dp_pods *p, char *err, size_t errlen)
{
	if (!p->kube) {
		snprintf(err, errlen, "no API server");
		return -1;
	}
	struct buf path;
	buf_init(&path, 1024);
	buf_adds(&path, "/api/v1/pods?fieldSelector=");
	kube_escape(&path, p->selector);
	struct kube_response r;
	kube_response_init(&r);
	int rc = -1;
	if (kube_request(p->kube, "GET", buf_cstr(&path), NULL, NULL, 10, &r, err, errlen)) {
		/* err says why */
	} else if (r.status != 200) {
		char msg[200];
		snprintf(err, errlen, "listing the node's pods: HTTP %ld: %s", r.status,
			 kube_status_message(&r, msg, sizeof(msg)));
	} else {
		cJSON *list = cJSON_ParseWithLength(r.body.data, r.body.len);
		dp_pods_apply_list(p, cJSON_GetObjectItemCaseSensitive(list, "items"));
		if (list)
			rc = 0;
		else
			snprintf(err, errlen, "listing the node's pods: the answer is not JSON");
		cJSON_Delete(list);
	}
	kube_response_release(&r);
	buf_release(&path);
	return rc;
}

void dp_pods_apply_list(struct dp_pods *p, const cJSON *items)
{
	const cJSON *item;
	pthread_mutex_lock(&p->mu);
	uint64_t seen = ++p->seq;      /* one arrival: resourceVersion orders them */
	cJSON_ArrayForEach(item, items)
		apply_locked(p, false, item, seen);
	p->join = 0;
	pthread_mutex_unlock(&p->mu);
}

void dp_pods_sink(struct dp_pods *p, struct reflector_sink *out)
{
	*out = (struct reflector_sink){ sink_lock, sink_unlock, sink_list_begin, sink_apply, sink_list_end, p };
}

void dp_pods_mark_done(struct dp_pods *p, const char *uid, int container, enum dp_resource r)
{
	pthread_mutex_lock(&p->mu);
	int i = find(p, uid);
	if (i >= 0 && container >= 0 && container < p->e[i].pod.ncontainers && r < DP_NRES)
		p->e[i].pod.c[container].done[r] = true;
	pthread_mutex_unlock(&p->mu);
}

bool dp_pods_mark_named(struct dp_pods *p, const char *ns, const char *name, const char *container,
			enum dp_resource r)
{
	bool found = false;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->n && !found; i++) {
		struct dp_pod *pod = &p->e[i].pod;
		if (strcmp(pod->ns, ns) || strcmp(pod->name, name))
			continue;
		for (int k = 0; k < pod->ncontainers && !found; k++)
			if (!strcmp(pod->c[k].name, container) && r < DP_NRES)
				found = pod->c[k].done[r] = true;
	}
	pthread_mutex_unlock(&p->mu);
	return found;
}

void dp_pods_kubelet_restarted(struct dp_pods *p)
{
	pthread_mutex_lock(&p->mu);
	uint64_t batch = ++p->seq;
	for (int i = 0; i < p->n; i++)
		if (!p->e[i].pod.admitted) {
			p->e[i].pod.seen = batch;
			p->e[i].pod.relisted = true;
		}
	p->join = batch;
	p->join_until_ms = clock_mono_ms() + RESTART_BATCH_MS;
	pthread_mutex_unlock(&p->mu);
}

bool dp_pods_restart_unread(struct dp_pods *p)
{
	pthread_mutex_lock(&p->mu);
	bool open = joining(p);
	pthread_mutex_unlock(&p->mu);
	return open;
}

void dp_pods_put(struct dp_pods *p, const struct dp_pod *pod)
{
	pthread_mutex_lock(&p->mu);
	put_locked(p, pod, pod->seen ? pod->seen : ++p->seq);
	pthread_mutex_unlock(&p->mu);
}
