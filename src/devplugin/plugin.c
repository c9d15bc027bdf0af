/*
 * The device plugin's server: one socket per resource in kubelet's
 * device-plugins directory, the gRPC methods of deviceplugin/v1beta1, and
 * registration with kubelet.
 *
 * Threads. The server thread owns the sockets, the connections and the
 * served inventory; it runs h2rpc_serve() and answers every call.
 * Registration runs on a second thread because kubelet, inside its
 * Register handler, dials back into our socket and calls
 * GetDevicePluginOptions before it answers: the server must keep serving
 * while Register waits. devplugin_update() (the agent's loop) hands over
 * a new inventory under the mutex and wakes the server.
 *
 * kubelet restarts wipe the directory (our sockets go) and make a new
 * kubelet.sock: the server checks both every CHECK_EVERY_MS and, when
 * either changed, listens again and asks the registrar to register again.
 */
#include "devplugin.h"
#include "events.h"

#include "clock.h"
#include "deviceplugin.pb-c.h"
#include "h2rpc.h"
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_WATCH 8                 /* ListAndWatch streams per resource (kubelet keeps one) */
/* kubelet.sock checked this often: a restarted kubelet admits the pods it finds
   at once, and fails those asking our resources until we have registered again */
#define CHECK_EVERY_MS 100
#define REGISTER_TIMEOUT_MS 10000
#define BACKOFF_MAX_MS 30000

struct res_state {
	int listener;                   /* -1: not listening */
	int nwatch;
	struct h2rpc_ref watch[MAX_WATCH];
};

/*
 * What an Allocate answered: for kubelet's ids (a hash of them, sorted) of
 * a resource, the pod whose devices or share it delivered. PreStart
 * compares it with the pod kubelet's record names (claim tickets, shares).
 */
#define MAX_DELIVERED 256
struct delivered {
	uint64_t key;
	char uid[64];
};

struct devplugin {
	struct dp_config cfg;
	struct dp_pods *pods;
	struct dp_auditor *auditor;
	struct events *events;          /* NULL: off (or no API server) */
	struct h2rpc_server *srv;
	pthread_t server_thread, registrar_thread;
	atomic_bool stop;

	pthread_mutex_t mu;             /* guards the two blocks below */
	pthread_cond_t cv;
	struct dp_inventory *next;      /* from devplugin_update, not yet served */
	bool want_register[DP_NRES];    /* the registrar's work */

	/* the server thread's own */
	struct dp_inventory *inv;
	struct res_state res[DP_NRES];
	dev_t kubelet_dev;
	ino_t kubelet_ino;
	char current[64];               /* uid of the pod kubelet is admitting, as far as we know */
	bool kubelet_synced;            /* kubelet's record read once the pods were listed */
	int sync_failures;
	int ndelivered;                 /* ring: the last MAX_DELIVERED Allocate answers */
	struct delivered delivered[MAX_DELIVERED];
};

/* ---- encoding the answers ------------------------------------------------------ */

/* Packs m and answers the stream with it (unary when finish). */
static void answer(struct devplugin *dp, struct h2rpc_ref ref, const ProtobufCMessage *m, bool finish)
{
	size_t len = protobuf_c_message_get_packed_size(m);
	uint8_t *out = malloc(len ? len : 1);
	if (!out) {
		h2rpc_finish(dp->srv, ref, H2RPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	protobuf_c_message_pack(m, out);
	if (finish)
		h2rpc_reply(dp->srv, ref, out, len);
	else if (h2rpc_send(dp->srv, ref, out, len) == -1)
		h2rpc_finish(dp->srv, ref, H2RPC_RESOURCE_EXHAUSTED, "device list too large");
	free(out);
}

/* Sends the current device list of r on one ListAndWatch stream. */
static void send_list(struct devplugin *dp, enum dp_resource r, struct h2rpc_ref ref)
{
	int n = 0;
	struct dp_kdev *kd = dp->inv ? dp_resource_devices(dp->inv, &dp->cfg, r, &n) : NULL;
	V1beta1__Device *devs = n ? calloc((size_t)n, sizeof(*devs)) : NULL;
	V1beta1__Device **ptrs = n ? calloc((size_t)n, sizeof(*ptrs)) : NULL;
	if (n && (!devs || !ptrs))
		n = 0;                    /* out of memory: an empty list now, the next change retries */
	for (int i = 0; i < n; i++) {
		v1beta1__device__init(&devs[i]);
		devs[i].id = kd[i].id;
		devs[i].health = kd[i].healthy ? "Healthy" : "Unhealthy";
		ptrs[i] = &devs[i];
	}
	V1beta1__ListAndWatchResponse resp = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
	resp.n_devices = (size_t)n;
	resp.devices = ptrs;
	answer(dp, ref, &resp.base, false);
	free(ptrs);
	free(devs);
	free(kd);
}

static void broadcast(struct devplugin *dp)
{
	for (int r = 0; r < DP_NRES; r++)
		for (int w = 0; w < dp->res[r].nwatch; w++)
			send_list(dp, (enum dp_resource)r, dp->res[r].watch[w]);
}

/* ---- the calls --------------------------------------------------------------------- */

/*
 * The node's pods for the attempt-th look (0 or 1): the watch's copy, then,
 * when that did not hold the pod kubelet asks for, a fresh list (the watch
 * may not have shown a just-bound pod yet). After kubelet restarted, a list
 * first: its batch holds the pods it listed, shown by the watch or not.
 */
static struct dp_pod *pods_for(struct devplugin *dp, int attempt, int *n)
{
	char err[256];
	if ((attempt || dp_pods_restart_unread(dp->pods)) && dp_pods_refresh(dp->pods, err, sizeof(err)))
		log_warn("cannot list the node's pods", "error=\"%s\"", LOG_Q(err));
	return dp_pods_copy(dp->pods, n);
}

static void on_preferred(struct devplugin *dp, enum dp_resource r, const struct h2rpc_request *req)
{
	V1beta1__PreferredAllocationRequest *in =
		v1beta1__preferred_allocation_request__unpack(NULL, req->len, req->msg);
	if (!in) {
		h2rpc_finish(dp->srv, req->ref, H2RPC_INVALID_ARGUMENT, "cannot decode PreferredAllocationRequest");
		return;
	}
	size_t nc = in->n_container_requests;
	V1beta1__ContainerPreferredAllocationResponse *cr = calloc(nc ? nc : 1, sizeof(*cr));
	V1beta1__ContainerPreferredAllocationResponse **crp = calloc(nc ? nc : 1, sizeof(*crp));
	struct dp_choice *ch = calloc(nc ? nc : 1, sizeof(*ch));
	if (!cr || !crp || !ch) {
		h2rpc_finish(dp->srv, req->ref, H2RPC_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < nc; i++) {
		const V1beta1__ContainerPreferredAllocationRequest *c = in->container_requests[i];
		v1beta1__container_preferred_allocation_response__init(&cr[i]);
		crp[i] = &cr[i];
		char why[256];
		int n, rc = -1;
		struct dp_pod *pods = NULL;
		for (int attempt = 0; rc && attempt < 2; attempt++) {
			free(pods);
			pods = pods_for(dp, attempt, &n);
			rc = dp_prefer(dp->inv, r, pods, n, dp->current, (const char *const *)c->available_deviceids,
				       c->n_available_deviceids, (const char *const *)c->must_include_deviceids,
				       c->n_must_include_deviceids, c->allocation_size, &ch[i], why, sizeof(why));
		}
		if (rc) {
			log_warn("no preferred allocation: kubelet chooses, and Allocate checks its choice",
				 "resource=%s size=%d reason=\"%s\"", dp_resource_name(r), c->allocation_size, LOG_Q(why));
		} else {
			const struct dp_pod *p = &pods[ch[i].pod];
			snprintf(dp->current, sizeof(dp->current), "%s", p->uid);
			cr[i].n_deviceids = (size_t)ch[i].nid;
			cr[i].deviceids = calloc((size_t)ch[i].nid, sizeof(char *));
			for (int k = 0; cr[i].deviceids && k < ch[i].nid; k++)
				cr[i].deviceids[k] = ch[i].id[k];
			if (!cr[i].deviceids)
				cr[i].n_deviceids = 0;
			log_info("preferred allocation", "resource=%s pod=%s/%s container=%s devices=%d", dp_resource_name(r),
				 p->ns, p->name, p->c[ch[i].container].name, ch[i].nid);
		}
		free(pods);
	}
	V1beta1__PreferredAllocationResponse resp = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
	resp.n_container_responses = nc;
	resp.container_responses = crp;
	answer(dp, req->ref, &resp.base, true);
out:
	for (size_t i = 0; ch && cr && i < nc; i++) {
		free(cr[i].deviceids);
		dp_choice_release(&ch[i]);
	}
	free(ch);
	free(crp);
	free(cr);
	v1beta1__preferred_allocation_request__free_unpacked(in, NULL);
}

/* The protobuf form of one container's response; its strings point into r. */
struct pb_container {
	V1beta1__ContainerAllocateResponse msg;
	V1beta1__ContainerAllocateResponse__EnvsEntry env[DP_MAX_ENV], *envp[DP_MAX_ENV];
	V1beta1__Mount mount[GPU_MAX_DEVICES + 1], *mountp[GPU_MAX_DEVICES + 1];
	V1beta1__DeviceSpec spec[DP_MAX_SPECS], *specp[DP_MAX_SPECS];
	V1beta1__CDIDevice cdi[GPU_MAX_DEVICES], *cdip[GPU_MAX_DEVICES];
};

static void pb_container_fill(struct pb_container *pc, struct dp_response *r)
{
	v1beta1__container_allocate_response__init(&pc->msg);
	for (int i = 0; i < r->nenv; i++) {
		v1beta1__container_allocate_response__envs_entry__init(&pc->env[i]);
		pc->env[i].key = r->env[i].name;
		pc->env[i].value = r->env[i].value;
		pc->envp[i] = &pc->env[i];
	}
	for (int i = 0; i < r->nmount; i++) {
		v1beta1__mount__init(&pc->mount[i]);
		pc->mount[i].container_path = r->mount[i].container_path;
		pc->mount[i].host_path = r->mount[i].host_path;
		pc->mount[i].read_only = r->mount[i].read_only;
		pc->mountp[i] = &pc->mount[i];
	}
	for (int i = 0; i < r->nspec; i++) {
		v1beta1__device_spec__init(&pc->spec[i]);
		pc->spec[i].container_path = r->spec[i].path;
		pc->spec[i].host_path = r->spec[i].host_path;
		pc->spec[i].permissions = "rw";
		pc->specp[i] = &pc->spec[i];
	}
	for (int i = 0; i < r->ncdi; i++) {
		v1beta1__cdidevice__init(&pc->cdi[i]);
		pc->cdi[i].name = r->cdi[i];
		pc->cdip[i] = &pc->cdi[i];
	}
	pc->msg.n_envs = (size_t)r->nenv;
	pc->msg.envs = pc->envp;
	pc->msg.n_mounts = (size_t)r->nmount;
	pc->msg.mounts = pc->mountp;
	pc->msg.n_devices = (size_t)r->nspec;
	pc->msg.devices = pc->specp;
	pc->msg.n_cdi_devices = (size_t)r->ncdi;
	pc->msg.cdi_devices = pc->cdip;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* FNV-1a of the resource and the ids in sorted order (kubelet's order of them varies). */
static uint64_t ids_key(enum dp_resource r, const char *const *ids, size_t n)
{
	const char **sorted = malloc((n ? n : 1) * sizeof(*sorted));
	uint64_t h = 1469598103934665603ULL ^ (uint64_t)r;
	if (!sorted)
		return 0;
	memcpy(sorted, ids, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), cmp_str);
	for (size_t i = 0; i < n; i++)
		for (const char *c = sorted[i]; ; c++) {
			h = (h ^ (unsigned char)*c) * 1099511628211ULL;
			if (!*c)
				break;
		}
	free(sorted);
	return h;
}

static void remember_delivery(struct devplugin *dp, enum dp_resource r, const char *const *ids, size_t n,
			      const char *uid)
{
	struct delivered *d = &dp->delivered[dp->ndelivered++ % MAX_DELIVERED];
	d->key = ids_key(r, ids, n);
	snprintf(d->uid, sizeof(d->uid), "%s", uid);
}

/* The uid of the pod the newest Allocate of these ids delivered for; "" when not remembered. */
static const char *delivered_to(const struct devplugin *dp, enum dp_resource r, const char *const *ids, size_t n)
{
	uint64_t key = ids_key(r, ids, n);
	int have = dp->ndelivered < MAX_DELIVERED ? dp->ndelivered : MAX_DELIVERED;
	for (int i = 1; i <= have; i++) {
		const struct delivered *d = &dp->delivered[(dp->ndelivered - i) % MAX_DELIVERED];
		if (d->key == key)
			return d->uid;
	}
	return "";
}

/* One container of an Allocate: find its pod, build its response. 0 or -1 with err. */
static int allocate_one(struct devplugin *dp, enum dp_resource r, const V1beta1__ContainerAllocateRequest *c,
			struct dp_response *out, char *err, size_t errlen)
{
	int n, rc = -1;
	struct dp_pod *pods = NULL;
	struct dp_choice ch;
	const char *const *ids = (const char *const *)c->devices_ids;
	for (int attempt = 0; rc && attempt < 2; attempt++) {
		free(pods);
		pods = pods_for(dp, attempt, &n);
		rc = dp_match(dp->inv, r, pods, n, dp->current, ids, c->n_devices_ids, &ch, err, errlen);
	}
	if (!rc) {
		const struct dp_pod *p = &pods[ch.pod];
		rc = dp_response_build(dp->inv, &dp->cfg, ch.dev, ch.ndev, p->shared ? p : NULL, out, err, errlen);
		if (!rc) {
			dp_pods_mark_done(dp->pods, p->uid, ch.container, r);
			remember_delivery(dp, r, ids, c->n_devices_ids, p->uid);
			snprintf(dp->current, sizeof(dp->current), "%s", p->uid);
			char list[512] = "";
			for (int k = 0; k < ch.ndev && strlen(list) < sizeof(list) - 100; k++)
				snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", k ? "," : "",
					 dp->inv->dev[ch.dev[k]].kubelet_id);
			log_info("allocated", "resource=%s pod=%s/%s container=%s devices=%s delivery=%s",
				 dp_resource_name(r), p->ns, p->name, p->c[ch.container].name, list,
				 dp_delivery_name(dp->cfg.delivery));
		}
	}
	dp_choice_release(&ch);
	free(pods);
	return rc;
}

static void on_allocate(struct devplugin *dp, enum dp_resource r, const struct h2rpc_request *req)
{
	V1beta1__AllocateRequest *in = v1beta1__allocate_request__unpack(NULL, req->len, req->msg);
	if (!in) {
		h2rpc_finish(dp->srv, req->ref, H2RPC_INVALID_ARGUMENT, "cannot decode AllocateRequest");
		return;
	}
	size_t nc = in->n_container_requests;
	struct dp_response *resp = calloc(nc ? nc : 1, sizeof(*resp));
	struct pb_container *pc = calloc(nc ? nc : 1, sizeof(*pc));
	V1beta1__ContainerAllocateResponse **cp = calloc(nc ? nc : 1, sizeof(*cp));
	char err[512] = "";
	int rc = resp && pc && cp ? 0 : (snprintf(err, sizeof(err), "out of memory"), -1);
	for (size_t i = 0; !rc && i < nc; i++) {
		rc = allocate_one(dp, r, in->container_requests[i], &resp[i], err, sizeof(err));
		if (!rc) {
			pb_container_fill(&pc[i], &resp[i]);
			cp[i] = &pc[i].msg;
		}
	}
	if (rc) {
		/* kubelet fails the pod's admission with this message: no device the extender did not bind */
		log_error("refusing an allocation", "resource=%s error=\"%s\"", dp_resource_name(r), LOG_Q(err));
		h2rpc_finish(dp->srv, req->ref, H2RPC_FAILED_PRECONDITION, err);
	} else {
		V1beta1__AllocateResponse out = V1BETA1__ALLOCATE_RESPONSE__INIT;
		out.n_container_responses = nc;
		out.container_responses = cp;
		answer(dp, req->ref, &out.base, true);
	}
	dp_auditor_kick(dp->auditor);
	free(cp);
	free(pc);
	free(resp);
	v1beta1__allocate_request__free_unpacked(in, NULL);
}

/*
 * kubelet is about to start a container it gave these devices: its own
 * record (PodResources) says which pod's container that is. The container
 * starts only when the devices are in that pod's binding; otherwise kubelet
 * gets the error (the container does not start; kubelet retries it) and
 * the refusal is reported (docs/node.md, "Which pod is kubelet admitting?").
 */
static void on_prestart(struct devplugin *dp, enum dp_resource r, const struct h2rpc_request *req)
{
	V1beta1__PreStartContainerRequest *in = v1beta1__pre_start_container_request__unpack(NULL, req->len, req->msg);
	if (!in) {
		h2rpc_finish(dp->srv, req->ref, H2RPC_INVALID_ARGUMENT, "cannot decode PreStartContainerRequest");
		return;
	}
	const char *const *ids = (const char *const *)in->devices_ids;
	size_t nids = in->n_devices_ids;
	struct dp_record rec;
	dp_record_init(&rec);
	char msg[512] = "";
	enum dp_verdict v = DP_UNVERIFIED;
	int holder = -1, owner = -1, n = 0;
	struct dp_pod *pods = NULL;
	if (dp_record_read(dp->cfg.podresources_socket, &rec, msg, sizeof(msg))) {
		/* msg says why: the container starts (the audit keeps looking) */
	} else {
		const char *deliv = delivered_to(dp, r, ids, nids);
		for (int attempt = 0; attempt < 2 && (attempt == 0 || v == DP_REFUSED); attempt++) {
			free(pods);
			pods = pods_for(dp, attempt, &n);
			v = dp_prestart_check(dp->inv, r, ids, nids, &rec, pods, n, deliv, &holder, &owner, msg,
					      sizeof(msg));
		}
	}
	const struct dp_pod *k = holder >= 0 ? &pods[holder] : NULL, *o = owner >= 0 ? &pods[owner] : NULL;
	if (v == DP_REFUSED) {
		log_error("refusing to start a container with devices not bound to its pod", "resource=%s error=\"%s\"",
			  dp_resource_name(r), LOG_Q(msg));
		h2rpc_finish(dp->srv, req->ref, H2RPC_FAILED_PRECONDITION, msg);
	} else {
		if (v == DP_UNVERIFIED)
			log_warn("cannot check a container's devices before it starts; starting it", "resource=%s reason=\"%s\"",
				 dp_resource_name(r), LOG_Q(msg));
		else
			log_debug("container devices match the binding", "resource=%s pod=%s/%s", dp_resource_name(r),
				  k->ns, k->name);
		V1beta1__PreStartContainerResponse o2 = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;
		answer(dp, req->ref, &o2.base, true);
	}
	/* the pod kubelet chose is named in the record even when the extender did not bind it */
	const char *kns = k ? k->ns : "", *kname = k ? k->name : "";
	for (int i = 0; !k && v == DP_REFUSED && i < rec.n; i++)
		for (size_t j = 0; j < nids && !kname[0]; j++)
			for (int m = 0; m < rec.h[i].nids; m++)
				if (rec.h[i].r == r && !strcmp(rec.h[i].ids[m], ids[j])) {
					kns = rec.h[i].ns;
					kname = rec.h[i].pod;
				}
	dp_auditor_prestart(dp->auditor, v, kns, kname, o ? o->ns : "", o ? o->name : "", msg);
	free(pods);
	dp_record_release(&rec);
	v1beta1__pre_start_container_request__free_unpacked(in, NULL);
}

static void on_request(void *ctx, const struct h2rpc_request *req)
{
	struct devplugin *dp = ctx;
	enum dp_resource r = DP_NRES;
	for (int i = 0; i < DP_NRES; i++)
		if (dp->res[i].listener == req->listener)
			r = (enum dp_resource)i;
	if (r == DP_NRES) {
		h2rpc_finish(dp->srv, req->ref, H2RPC_UNAVAILABLE, "socket closing");
		return;
	}
	if (!dp->inv) {             /* not listening before the first inventory; kept as a guard */
		h2rpc_finish(dp->srv, req->ref, H2RPC_UNAVAILABLE, "the agent has not detected the devices yet");
		return;
	}
	if (!strcmp(req->path, DP_RPC_OPTIONS)) {
		V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
		o.get_preferred_allocation_available = 1;
		o.pre_start_required = 1;     /* the check of kubelet's choice, before each container start */
		answer(dp, req->ref, &o.base, true);
	} else if (!strcmp(req->path, DP_RPC_LIST_AND_WATCH)) {
		struct res_state *rs = &dp->res[r];
		if (rs->nwatch == MAX_WATCH) {
			h2rpc_finish(dp->srv, req->ref, H2RPC_RESOURCE_EXHAUSTED, "too many ListAndWatch streams");
			return;
		}
		rs->watch[rs->nwatch++] = req->ref;
		send_list(dp, r, req->ref);
		log_info("kubelet watches the devices", "resource=%s", dp_resource_name(r));
	} else if (!strcmp(req->path, DP_RPC_PREFERRED)) {
		on_preferred(dp, r, req);
	} else if (!strcmp(req->path, DP_RPC_ALLOCATE)) {
		on_allocate(dp, r, req);
	} else if (!strcmp(req->path, DP_RPC_PRESTART)) {
		on_prestart(dp, r, req);
	} else {
		h2rpc_finish(dp->srv, req->ref, H2RPC_UNIMPLEMENTED, "unknown method");
	}
}

static void on_closed(void *ctx, struct h2rpc_ref ref)
{
	struct devplugin *dp = ctx;
	for (int r = 0; r < DP_NRES; r++) {
		struct res_state *rs = &dp->res[r];
		for (int w = 0; w < rs->nwatch; w++)
			if (rs->watch[w].conn == ref.conn && rs->watch[w].stream == ref.stream)
				rs->watch[w--] = rs->watch[--rs->nwatch];
	}
}

/* ---- sockets and registration -------------------------------------------------- */

static void listen_all(struct devplugin *dp)
{
	for (int r = 0; r < DP_NRES; r++) {
		struct res_state *rs = &dp->res[r];
		if (rs->listener >= 0)
			h2rpc_unlisten(dp->srv, rs->listener);
		rs->nwatch = 0;
		char path[DP_PATH_MAX + 64], err[256];
		snprintf(path, sizeof(path), "%s/%s", dp->cfg.plugin_dir, dp_resource_socket((enum dp_resource)r));
		rs->listener = h2rpc_listen(dp->srv, path, err, sizeof(err));
		if (rs->listener < 0)
			log_error("cannot listen for kubelet", "resource=%s error=\"%s\"",
				  dp_resource_name((enum dp_resource)r), LOG_Q(err));
	}
	pthread_mutex_lock(&dp->mu);
	for (int r = 0; r < DP_NRES; r++) {
		dp->want_register[r] = dp->res[r].listener >= 0;
	}
	pthread_cond_signal(&dp->cv);
	pthread_mutex_unlock(&dp->mu);
}

/* Whether kubelet restarted (a new kubelet.sock) or wiped our sockets. */
static bool kubelet_changed(struct devplugin *dp)
{
	char path[DP_PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/%s", dp->cfg.plugin_dir, DP_KUBELET_SOCKET);
	struct stat st;
	bool changed = false;
	if (!stat(path, &st) && (st.st_dev != dp->kubelet_dev || st.st_ino != dp->kubelet_ino)) {
		changed = dp->kubelet_ino != 0;
		dp->kubelet_dev = st.st_dev;
		dp->kubelet_ino = st.st_ino;
	}
	for (int r = 0; r < DP_NRES; r++)
		if (dp->res[r].listener < 0 || !h2rpc_listener_intact(dp->srv, dp->res[r].listener))
			changed = true;
	return changed;
}

static int register_one(const struct dp_config *cfg, enum dp_resource r, char *err, size_t errlen)
{
	V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
	o.get_preferred_allocation_available = 1;
	o.pre_start_required = 1;
	V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
	req.version = DP_API_VERSION;
	req.endpoint = (char *)dp_resource_socket(r);
	req.resource_name = (char *)dp_resource_name(r);
	req.options = &o;
	uint8_t msg[512];
	size_t len = v1beta1__register_request__get_packed_size(&req);
	if (len > sizeof(msg)) {
		snprintf(err, errlen, "register request too large");
		return -1;
	}
	v1beta1__register_request__pack(&req, msg);
	char sock[DP_PATH_MAX + 32];
	snprintf(sock, sizeof(sock), "%s/%s", cfg->plugin_dir, DP_KUBELET_SOCKET);
	struct buf resp;
	buf_init(&resp, H2RPC_MAX_MESSAGE);
	int rc = h2rpc_call(sock, DP_RPC_REGISTER, msg, len, &resp, REGISTER_TIMEOUT_MS, err, errlen);
	buf_release(&resp);
	return rc ? -1 : 0;
}

static void *registrar_main(void *arg)
{
	struct devplugin *dp = arg;
	int failures = 0;
	int64_t next_try = 0;
	pthread_mutex_lock(&dp->mu);
	while (!atomic_load(&dp->stop)) {
		int r = -1;
		for (int i = 0; i < DP_NRES && r < 0; i++)
			if (dp->want_register[i])
				r = i;
		int64_t now = clock_mono_ms();
		if (r < 0 || now < next_try) {
			struct timespec until = clock_deadline_ms(r < 0 ? 1000 : next_try - now);
			pthread_cond_timedwait(&dp->cv, &dp->mu, &until);
			continue;
		}
		dp->want_register[r] = false;
		pthread_mutex_unlock(&dp->mu);
		char err[512];
		int rc = register_one(&dp->cfg, (enum dp_resource)r, err, sizeof(err));
		pthread_mutex_lock(&dp->mu);
		if (!rc) {
			log_info("registered with kubelet", "resource=%s socket=%s/%s%s", dp_resource_name(r),
				 dp->cfg.plugin_dir, dp_resource_socket(r), failures ? " (after retries)" : "");
			failures = 0;
			next_try = 0;
		} else {
			dp->want_register[r] = true;
			int64_t delay = failures < 5 ? 1000LL << failures : BACKOFF_MAX_MS;
			if (delay > BACKOFF_MAX_MS)
				delay = BACKOFF_MAX_MS;
			if (failures++ == 0)
				log_warn("cannot register with kubelet; retrying", "resource=%s error=\"%s\" hint=\"%s\"",
					 dp_resource_name(r), LOG_Q(err),
					 "is kubelet running, and is its device-plugins directory mounted here?");
			else
				log_debug("still cannot register with kubelet", "resource=%s failures=%d error=\"%s\"",
					  dp_resource_name(r), failures, LOG_Q(err));
			next_try = clock_mono_ms() + delay;
		}
	}
	pthread_mutex_unlock(&dp->mu);
	return NULL;
}

/* ---- kubelet's record at start ------------------------------------------------------ */

static void podres_mark(void *ctx, const char *ns, const char *pod, const char *container, const char *resource,
			const char *const *ids, size_t nids)
{
	struct devplugin *dp = ctx;
	(void)ids;
	(void)nids;
	for (int r = 0; r < DP_NRES; r++)
		if (!strcmp(resource, dp_resource_name((enum dp_resource)r)))
			dp_pods_mark_named(dp->pods, ns, pod, container, (enum dp_resource)r);
}

/*
 * Containers kubelet gave devices before this process started (an agent
 * restart) are done: they must never be matched again, even when their
 * pod still looks pending.
 */
static void sync_kubelet(struct devplugin *dp)
{
	if (dp->kubelet_synced || !dp_pods_ready(dp->pods))
		return;
	char err[256];
	if (!dp_podresources_each(dp->cfg.podresources_socket, podres_mark, dp, err, sizeof(err))) {
		dp->kubelet_synced = true;
		log_info("read kubelet's record of allocated devices", "socket=%s", dp->cfg.podresources_socket);
	} else if (++dp->sync_failures == 30) {
		log_warn("cannot read kubelet's PodResources; pods admitted before this start may be matched again",
			 "socket=%s error=\"%s\"", dp->cfg.podresources_socket, LOG_Q(err));
		dp->kubelet_synced = true;
	}
}

/* ---- the server thread --------------------------------------------------------- */

/* GPUUnhealthy (Warning) or GPUHealthy on the node, as kubelet's own node Events: uid is the node's name. */
static void tell_health(struct devplugin *dp, const struct dp_device *d)
{
	struct events_object node = { .api_version = "v1", .kind = "Node", .ns = "", .name = dp->cfg.node,
				      .uid = dp->cfg.node };
	if (d->healthy)
		events_post(dp->events, &node, EVENTS_NORMAL, "GPUHealthy", 0, "GPU %d (%s) is healthy again", d->id,
			    d->uuid[0] ? d->uuid : d->kubelet_id);
	else
		events_post(dp->events, &node, EVENTS_WARNING, "GPUUnhealthy", 0,
			    "GPU %d (%s) is unhealthy, kubelet gives it to no new pod: %s", d->id,
			    d->uuid[0] ? d->uuid : d->kubelet_id, d->why);
}

/* Serves a new inventory when devplugin_update handed one over. */
static void take_update(struct devplugin *dp)
{
	pthread_mutex_lock(&dp->mu);
	struct dp_inventory *next = dp->next;
	dp->next = NULL;
	pthread_mutex_unlock(&dp->mu);
	if (!next)
		return;
	bool changed = !dp->inv || !dp_inventory_same(dp->inv, next);
	if (changed) {
		for (int i = 0; i < next->ndev; i++) {
			const struct dp_device *d = &next->dev[i];
			int o = dp->inv ? dp_inventory_find(dp->inv, d->id) : -1;
			bool was = o >= 0 && dp->inv->dev[o].healthy;
			if (!d->healthy && (o < 0 || was)) {
				log_warn("device unhealthy: kubelet gives it to no new pod", "id=%d device=%s reason=\"%s\"",
					 d->id, d->kubelet_id, LOG_Q(d->why));
				tell_health(dp, d);
			} else if (d->healthy && o >= 0 && !was) {
				log_info("device healthy again", "id=%d device=%s", d->id, d->kubelet_id);
				tell_health(dp, d);
			}
		}
		if (dp->cfg.delivery == DP_DELIVERY_CDI) {
			char *json = dp_cdi_spec(next);
			char err[512];
			if (!json || dp_cdi_write(dp->cfg.cdi_dir, json, err, sizeof(err)))
				log_error("cannot write the CDI spec", "dir=%s error=\"%s\"", dp->cfg.cdi_dir,
					  json ? LOG_Q(err) : "out of memory");
			free(json);
		}
	}
	free(dp->inv);
	dp->inv = next;
	if (changed) {
		dp_auditor_inventory(dp->auditor, next);
		broadcast(dp);
	}
}

static void *server_main(void *arg)
{
	struct devplugin *dp = arg;
	int64_t next_check = 0;
	while (!atomic_load(&dp->stop)) {
		if (h2rpc_serve(dp->srv, CHECK_EVERY_MS))
			log_error("the device plugin's poll failed", "error=\"%s\"", strerror(errno));
		take_update(dp);
		int64_t now = clock_mono_ms();
		/* no socket before the first inventory: kubelet would get an empty list and
		   drop the devices it still knows from the previous run of the agent */
		if (dp->inv && now >= next_check) {
			next_check = now + CHECK_EVERY_MS;
			if (kubelet_changed(dp)) {
				log_info("kubelet restarted or its plugin directory was cleaned; registering again",
					 "dir=%s", dp->cfg.plugin_dir);
				/* kubelet admits the pods it finds in creation order, not in the
				   order they were bound: so must the guess */
				dp_pods_kubelet_restarted(dp->pods);
				dp->current[0] = '\0';
				listen_all(dp);
				/* the pods kubelet just listed, shown by the watch yet or not, are
				   that batch (registration goes on meanwhile on its own thread) */
				char err[256];
				if (dp_pods_refresh(dp->pods, err, sizeof(err)))
					log_warn("cannot list the node's pods", "error=\"%s\"", LOG_Q(err));
			}
			sync_kubelet(dp);
		}
	}
	return NULL;
}

struct devplugin *devplugin_start(const struct dp_config *cfg, struct kube_client *kube, char *err,
				  size_t errlen)
{
	struct devplugin *dp = calloc(1, sizeof(*dp));
	if (!dp) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	dp->cfg = *cfg;
	for (int r = 0; r < DP_NRES; r++)
		dp->res[r].listener = -1;
	pthread_mutex_init(&dp->mu, NULL);
	pthread_cond_init(&dp->cv, NULL);
	struct h2rpc_server_ops ops = { on_request, on_closed, dp };
	struct stat st;
	errno = 0;
	if (stat(cfg->plugin_dir, &st) || !S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "%s: %s (kubelet's device-plugins directory)", cfg->plugin_dir,
			 errno ? strerror(errno) : "not a directory");
		goto fail;
	}
	if (!(dp->pods = dp_pods_start(kube, cfg->node, err, errlen)))
		goto fail;
	if (kube && cfg->events) {
		struct events_opts eo = { .component = "gpu-agent", .instance = cfg->node };
		dp->events = events_new(kube, &eo);
	}
	if (!(dp->auditor = dp_auditor_start(cfg, kube, dp->events, dp->pods, err, errlen)))
		goto fail;
	if (!(dp->srv = h2rpc_server_new(&ops))) {
		snprintf(err, errlen, "cannot create the gRPC server");
		goto fail;
	}
	kubelet_changed(dp);          /* note the current kubelet.sock; the server listens once it has devices */
	if (pthread_create(&dp->registrar_thread, NULL, registrar_main, dp)) {
		snprintf(err, errlen, "cannot start a thread");
		goto fail;
	}
	if (pthread_create(&dp->server_thread, NULL, server_main, dp)) {
		atomic_store(&dp->stop, true);
		pthread_cond_signal(&dp->cv);
		pthread_join(dp->registrar_thread, NULL);
		snprintf(err, errlen, "cannot start a thread");
		goto fail;
	}
	log_info("device plugin serving", "dir=%s delivery=%s share_slots=%d claim_tickets=%d device_root=%s host_root=%s",
		 cfg->plugin_dir, dp_delivery_name(cfg->delivery), cfg->share_slots, cfg->claim_tickets,
		 cfg->device_root[0] ? cfg->device_root : "/", cfg->host_root[0] ? cfg->host_root : "/");
	return dp;
fail:
	h2rpc_server_free(dp->srv);
	dp_auditor_stop(dp->auditor);
	events_free(dp->events);
	dp_pods_stop(dp->pods);
	pthread_cond_destroy(&dp->cv);
	pthread_mutex_destroy(&dp->mu);
	free(dp);
	return NULL;
}

void devplugin_update(struct devplugin *dp, struct agent_node *node)
{
	struct dp_inventory *inv = malloc(sizeof(*inv));
	if (!inv) {
		log_error("out of memory building the device plugin's inventory", "node=%s", node->name);
		return;
	}
	dp_inventory_build(inv, node, &dp->cfg);
	/* the extender must not bind what kubelet will not hand out */
	node->share_slots = dp->cfg.share_slots;
	for (int i = 0; i < node->ndev; i++) {
		struct agent_gpu *g = &node->dev[i].g;
		int k = dp_inventory_find(inv, node->dev[i].id);
		if (k >= 0 && !inv->dev[k].healthy && g->health == GPU_HEALTHY) {
			g->health = GPU_UNHEALTHY;
			snprintf(g->health_reason, sizeof(g->health_reason), "%s", inv->dev[k].why);
		}
	}
	pthread_mutex_lock(&dp->mu);
	free(dp->next);
	dp->next = inv;
	pthread_mutex_unlock(&dp->mu);
	h2rpc_wake(dp->srv);
}

void devplugin_stop(struct devplugin *dp)
{
	if (!dp)
		return;
	atomic_store(&dp->stop, true);
	pthread_mutex_lock(&dp->mu);
	pthread_cond_signal(&dp->cv);
	pthread_mutex_unlock(&dp->mu);
	h2rpc_wake(dp->srv);
	pthread_join(dp->server_thread, NULL);
	pthread_join(dp->registrar_thread, NULL);
	h2rpc_server_free(dp->srv);     /* removes our sockets: kubelet sees the plugin go */
	dp_auditor_stop(dp->auditor);
	events_free(dp->events);
	dp_pods_stop(dp->pods);
	free(dp->inv);
	free(dp->next);
	pthread_cond_destroy(&dp->cv);
	pthread_mutex_destroy(&dp->mu);
	free(dp);
}
