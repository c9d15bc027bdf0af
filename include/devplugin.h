/*
 * devplugin: gpu-agent as a kubelet device plugin (deviceplugin/v1beta1).
 *
 * The extender decides which devices a pod gets and writes it into the
 * pod's binding annotations; this module makes kubelet hand exactly those
 * devices to the containers (docs/node.md):
 *
 *   agent_node (detection, each round) --dp_inventory_build()--> devices
 *       with their device files, kubelet ids and health
 *   ListAndWatch: one device list per resource (gpu, gpu-share slots,
 *       claim tickets), sent again whenever a device's health changes
 *   pods bound to this node (a watch through the API server) --
 *       dp_pod_parse()--> what the binding gave each pod
 *   GetPreferredAllocation: dp_prefer() finds the pod kubelet is admitting
 *       and returns its bound devices, so kubelet records the same ones
 *   Allocate: dp_match() finds the pod whose binding holds the devices
 *       kubelet chose, dp_response_build() says how the container gets
 *       them (device files, env, runtime volume mounts or CDI names: the
 *       vendor table, vendor.h)
 *
 * The parsing, matching and response building are pure and unit tested;
 * the inventory reads device files (stat, /proc, sysfs) and the plugin
 * runs the gRPC server (h2rpc.h) on its own thread. The plugin never
 * re-detects: it serves the devices the agent's last round found.
 */
#ifndef GPU_DEVPLUGIN_H
#define GPU_DEVPLUGIN_H

#include "agent.h"
#include "gpu.h"
#include "kube.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define DP_PATH_MAX 256
#define DP_ID_MAX 64                 /* kubelet's limit on a device id is 63 characters */
#define DP_API_VERSION "v1beta1"
#define DP_KUBELET_SOCKET "kubelet.sock"
#define DP_PLUGIN_DIR "/var/lib/kubelet/device-plugins"
#define DP_PODRESOURCES_SOCKET "/var/lib/kubelet/pod-resources/kubelet.sock"
#define DP_CDI_DIR "/var/run/cdi"
#define DP_CDI_KIND "gpu.scheduling/gpu"   /* the one spec's kind: every vendor's cdi_kind (vendor.h) */
#define DP_DEFAULT_SHARE_SLOTS 48   /* MPS serves at most 48 clients per GPU */
#define DP_DEFAULT_CLAIM_TICKETS 110 /* kubelet's default pod limit */

/* gRPC methods (package.Service/Method of deviceplugin/v1beta1 and podresources/v1). */
#define DP_RPC_REGISTER "/v1beta1.Registration/Register"
#define DP_RPC_OPTIONS "/v1beta1.DevicePlugin/GetDevicePluginOptions"
#define DP_RPC_LIST_AND_WATCH "/v1beta1.DevicePlugin/ListAndWatch"
#define DP_RPC_PREFERRED "/v1beta1.DevicePlugin/GetPreferredAllocation"
#define DP_RPC_ALLOCATE "/v1beta1.DevicePlugin/Allocate"
#define DP_RPC_PRESTART "/v1beta1.DevicePlugin/PreStartContainer"
#define DP_RPC_POD_RESOURCES_LIST "/v1.PodResourcesLister/List"

/* ---- configuration ---- */

/* The resources kubelet counts (docs/node.md, "What kubelet counts"). */
enum dp_resource {
	DP_GPU = 0,          /* gpu.scheduling/gpu: whole GPUs and MIG instances, id = UUID */
	DP_SHARE,            /* gpu.scheduling/gpu-share: share slots, id = UUID::k */
	DP_CLAIM,            /* gpu.scheduling/claim: tickets for claim-only pods */
	DP_NRES,
};
/* "gpu.scheduling/gpu", ...; and the socket file of each ("gpu-scheduling-gpu.sock"). */
const char *dp_resource_name(enum dp_resource r);
const char *dp_resource_socket(enum dp_resource r);

/* How the container gets its devices. */
enum dp_delivery {
	DP_DELIVERY_DEVICES = 0,     /* device files (DeviceSpec) + env: any runtime, any vendor */
	DP_DELIVERY_VOLUME_MOUNTS,   /* <vendor runtime_dir>/<uuid> mounts, where the vendor has one */
	DP_DELIVERY_CDI,             /* CDI device names + the spec written under cdi_dir */
};
bool dp_delivery_parse(const char *s, enum dp_delivery *out);
const char *dp_delivery_name(enum dp_delivery d);

struct dp_config {
	char node[254];
	char plugin_dir[DP_PATH_MAX];           /* kubelet's device-plugins directory */
	char podresources_socket[DP_PATH_MAX];
	char device_root[DP_PATH_MAX];          /* "": the host's /; tests: a fake device root */
	char host_root[DP_PATH_MAX];            /* where this container sees the host's / ("": at /) */
	char cdi_dir[DP_PATH_MAX];
	char mps_pipe_dir[DP_PATH_MAX];         /* "": no MPS control daemon to reach */
	enum dp_delivery delivery;
	int share_slots;                        /* per whole GPU */
	int claim_tickets;
	char ledger_ns[64];                     /* where the extender keeps the ledger Leases */
	char metrics_listen[128];               /* "host:port" of /metrics; "" = not served */
	int audit_every_s;                      /* the audit's period */
	bool events;                            /* post Events (the audit's on pods, devices' health on the node) */
};
void dp_config_default(struct dp_config *c);

/* ---- the devices (devices.c) ---- */

struct dp_devnode {
	char path[64];                          /* in the container: "/dev/dri/renderD128" */
	char host_path[DP_PATH_MAX];            /* on the host (under device_root) */
};

#define DP_MAX_NODES 4
#define DP_MAX_COMMON 8

struct dp_device {
	int id;                                 /* the GpuNodeStatus id */
	enum gpu_vendor vendor;
	int index;                              /* the vendor's index (MIG: its GPU's) */
	bool mig;
	bool healthy;                           /* detected Healthy and its device files exist */
	char uuid[96];
	char kubelet_id[DP_ID_MAX];             /* the UUID, or "gpu-<id>" without a usable one */
	char why[128];                          /* when not healthy */
	int nnode;
	struct dp_devnode node[DP_MAX_NODES];   /* its own device files */
};

struct dp_inventory {
	int ndev;
	struct dp_device dev[GPU_MAX_DEVICES];
	int ncommon;                            /* files every container of a vendor needs */
	struct dp_devnode common[DP_MAX_COMMON];
	enum gpu_vendor common_vendor[DP_MAX_COMMON];
};

/*
 * The node's devices as the plugin serves them: for each, its device files
 * on the host under cfg->device_root ("" = /), as its vendor's entry says
 * (vendor.h): its own file (VENDOR_DEV_MINOR: dev_prefix<minor>, the minor
 * from the driver's proc file, else the index, as NVIDIA's /dev/nvidia3;
 * VENDOR_DEV_DRI: /dev/dri/renderD* and card* of its PCI device, as AMD's
 * and Intel's) and the vendor's common_files (/dev/nvidiactl, /dev/kfd);
 * without its vendor's required_file a device is unhealthy. host_path is
 * the host's path (kubelet hands it to the runtime); the agent looks for it, and reads
 * /proc and /sys, under cfg->host_root (the host's / as mounted in the
 * agent's container). A device whose own files are missing is unhealthy
 * (why says so): it cannot be handed out.
 */
void dp_inventory_build(struct dp_inventory *inv, const struct agent_node *node, const struct dp_config *cfg);
/* Index of the device with that GpuNodeStatus id, or with that kubelet id; -1. */
int dp_inventory_find(const struct dp_inventory *inv, int id);
int dp_inventory_find_kubelet_id(const struct dp_inventory *inv, const char *kid);
/* Whether two inventories give kubelet the same lists and the containers the same files. */
bool dp_inventory_same(const struct dp_inventory *a, const struct dp_inventory *b);

/* One device as ListAndWatch lists it. */
struct dp_kdev {
	char id[DP_ID_MAX];
	bool healthy;
};
/*
 * The device list of resource r: DP_GPU one per device; DP_SHARE
 * share_slots per whole GPU ("<kubelet id>::<k>"); DP_CLAIM claim_tickets
 * tickets ("claim-<k>", healthy while any device is). Returns a heap array
 * (caller frees) and its length in *n; NULL with *n 0 when empty or out
 * of memory.
 */
struct dp_kdev *dp_resource_devices(const struct dp_inventory *inv, const struct dp_config *cfg,
				    enum dp_resource r, int *n);
/* The GPU a share slot id names ("GPU-x::3" -> "GPU-x") into out; false if not a slot id. */
bool dp_slot_device(const char *slot_id, char *out, size_t size);

/* ---- the pods bound to this node (pods.c) ---- */

#define DP_MAX_CONTAINERS 16

struct dp_container {
	char name[64];
	bool init;
	bool restartable;                       /* a sidecar (init, restartPolicy Always): keeps its devices */
	int want[DP_NRES];                      /* its limits of each resource */
	bool done[DP_NRES];                     /* kubelet allocated them (Allocate answered) */
};

struct dp_pod {
	char uid[64];
	char ns[64];
	char name[254];
	uint64_t seen;                          /* when the plugin first saw it bound here (order) */
	int64_t rv;                             /* resourceVersion as a number (0: not one); see dp_pod_order */
	bool relisted;                          /* in the batch kubelet's restart listed: creation order */
	int64_t created;                        /* creationTimestamp, seconds */
	bool admitted;                          /* kubelet is past admission (started or ended) */
	bool finished;                          /* Succeeded or Failed (kubelet refused it, or it ended) */
	bool deleting;                          /* deletionTimestamp set: kubelet admits it no more */
	int nids;
	int ids[GPU_MAX_DEVICES];               /* the bound GpuNodeStatus ids */
	char uuids[GPU_MAX_DEVICES][96];        /* the UUIDs the binding named, "" when not given */
	bool shared;
	uint32_t mem_mib;                       /* shared: per GPU */
	uint32_t core_pct;
	int ncontainers;
	struct dp_container c[DP_MAX_CONTAINERS];
};

/*
 * A Pod object -> what the binding gave it on this node. Returns 1 when the
 * extender bound it here (gpu.scheduling/allocated names node), 0 when it
 * is none of ours (not bound here, no allocation), -1 with err when the
 * allocation annotations do not parse.
 */
int dp_pod_parse(const cJSON *pod, const char *node, struct dp_pod *out, char *err, size_t errlen);
/*
 * Kubelet's order of admission: first seen; among pods that arrived in one
 * list, the order kubelet's watch saw them bound (resourceVersion: a pod
 * kubelet has not admitted is not written after its binding), except in
 * the batch of kubelet's restart, which it admits by creation; then
 * created, then name.
 */
int dp_pod_order(const struct dp_pod *a, const struct dp_pod *b);

/*
 * The pods bound to this node, kept current by a watch (spec.nodeName=node)
 * and refreshed on demand. Thread-safe; dp_pods_copy gives a snapshot.
 */
struct dp_pods;
struct dp_pods *dp_pods_start(struct kube_client *kube, const char *node, char *err, size_t errlen);
void dp_pods_stop(struct dp_pods *p);
/* Whether the watch has listed once. */
bool dp_pods_ready(const struct dp_pods *p);
/* A copy of the store (caller frees); *n pods. NULL with *n 0 when empty. */
struct dp_pod *dp_pods_copy(struct dp_pods *p, int *n);
/* Lists the node's pods now (a bound pod the watch has not shown yet). 0 or -1 with err. */
int dp_pods_refresh(struct dp_pods *p, char *err, size_t errlen);
/* Applies the pods of a list (items of a PodList) as one arrival, removing none (what a refresh read). */
void dp_pods_apply_list(struct dp_pods *p, const cJSON *items);
struct reflector_sink;
/* The store's watch sink (the reflector's; the reservation simulator feeds it directly). */
void dp_pods_sink(struct dp_pods *p, struct reflector_sink *out);
/* Records that kubelet allocated resource r of a pod's container (matching survives updates). */
void dp_pods_mark_done(struct dp_pods *p, const char *uid, int container, enum dp_resource r);
/* The same by names (from kubelet's PodResources record); false when no such pod or container. */
bool dp_pods_mark_named(struct dp_pods *p, const char *ns, const char *name, const char *container,
			enum dp_resource r);
/*
 * kubelet restarted: it lists the node's pods anew and admits those it has
 * not admitted yet in creation order (one batch), whatever order they were
 * bound in. Makes every such pod one arrival, so dp_pod_order falls back
 * to creation time for them. Pods new to the store join that batch until
 * the store has read a list (kubelet's list may hold pods the watch has
 * not shown yet).
 */
void dp_pods_kubelet_restarted(struct dp_pods *p);
/* Whether kubelet restarted and no list was read since: refresh before matching. */
bool dp_pods_restart_unread(struct dp_pods *p);
/* Adds pods built elsewhere (tests; PodResources at start marks pods done). */
void dp_pods_put(struct dp_pods *p, const struct dp_pod *pod);

/* ---- matching kubelet's requests to pods (alloc.c, pure) ---- */

struct dp_choice {
	int pod;                                /* index into the pods array */
	int container;                          /* index into pods[pod].c */
	int ndev;
	int dev[GPU_MAX_DEVICES];               /* inventory indexes the container gets */
	int nid;
	char (*id)[DP_ID_MAX];                  /* kubelet ids (GetPreferredAllocation); heap, see dp_choice_release */
};
void dp_choice_release(struct dp_choice *c);

/*
 * GetPreferredAllocation of one container: kubelet is admitting some pod
 * whose container asks size of resource r; available are the device ids it
 * may choose from, must those it already chose (devices reused from an
 * init container). The pod is the one bound here that still waits for r of
 * that size and whose bound devices are available: current (the pod of the
 * last call, while it has containers left) first, then in kubelet's order
 * (dp_pod_order). out gets its container and size ids: must, then its
 * bound devices in the binding's order. Returns 0, or -1 with why (no such
 * pod: then kubelet chooses itself, and Allocate decides).
 */
int dp_prefer(const struct dp_inventory *inv, enum dp_resource r, const struct dp_pod *pods, int npods,
	      const char *current, const char *const *available, size_t navail, const char *const *must,
	      size_t nmust, int size, struct dp_choice *out, char *why, size_t whylen);

/*
 * Allocate of one container: the pod whose binding holds every device kubelet
 * chose (ids), with a container that waits for that many of r: for DP_GPU
 * the ids are bound UUIDs, for DP_SHARE slots on bound GPUs, for DP_CLAIM
 * tickets of a claim-only pod (current first, then dp_pod_order). out gets
 * the devices the container receives: DP_GPU and DP_SHARE the named GPUs,
 * DP_CLAIM all the pod's devices. Returns 0, or -1 with err (kubelet then
 * fails the pod's admission: no device is ever handed out that the
 * extender did not bind to it).
 */
int dp_match(const struct dp_inventory *inv, enum dp_resource r, const struct dp_pod *pods, int npods,
	     const char *current, const char *const *ids, size_t nids, struct dp_choice *out,
	     char *err, size_t errlen);

/* What one container gets (ContainerAllocateResponse). */
struct dp_env {
	char name[64];
	char value[1024];
};
struct dp_mount {
	char container_path[DP_PATH_MAX];
	char host_path[DP_PATH_MAX];
	bool read_only;
};
#define DP_MAX_ENV 12
#define DP_MAX_SPECS (GPU_MAX_DEVICES * DP_MAX_NODES + DP_MAX_COMMON)

struct dp_response {
	int nenv;
	struct dp_env env[DP_MAX_ENV];
	int nmount;
	struct dp_mount mount[GPU_MAX_DEVICES + 1];
	int nspec;
	struct dp_devnode spec[DP_MAX_SPECS];   /* DeviceSpec, permissions "rw" */
	int ncdi;
	char cdi[GPU_MAX_DEVICES][DP_ID_MAX + 32];
};

/*
 * How the container gets devs (inventory indexes) under cfg->delivery
 * (docs/node.md, "Delivery"). share: the pod's share (MPS limits and the
 * informational GPU_SCHEDULING_* variables), or NULL. Returns 0 or -1 with
 * err (a device with no device files, a list too long).
 */
int dp_response_build(const struct dp_inventory *inv, const struct dp_config *cfg, const int *devs, int ndev,
		      const struct dp_pod *share, struct dp_response *out, char *err, size_t errlen);

/* ---- checking what kubelet did against the bindings (verify.c, pure) ---- */

/* One container's devices of one of our resources, as kubelet recorded them (PodResources). */
struct dp_held {
	char ns[64];
	char pod[254];
	char container[64];
	enum dp_resource r;
	int nids;
	char ids[GPU_MAX_DEVICES][DP_ID_MAX];
};
/* kubelet's whole record: every live pod's containers that hold our resources. */
struct dp_record {
	int n, cap;
	struct dp_held *h;
};
void dp_record_init(struct dp_record *rec);
void dp_record_release(struct dp_record *rec);
/* Adds one (container, resource); resources that are not ours are skipped. 0, or -1 out of memory. */
int dp_record_add(struct dp_record *rec, const char *ns, const char *pod, const char *container,
		  const char *resource, const char *const *ids, size_t nids);

/* What dp_prestart_check found. */
enum dp_verdict {
	DP_REFUSED = -1,     /* the container must not start: msg names the pods */
	DP_VERIFIED = 0,     /* the devices are in the binding of the pod kubelet gave them to */
	DP_UNVERIFIED = 1,   /* kubelet's record names no holder (msg says why): nothing to compare */
};

/*
 * PreStartContainer: kubelet is about to start a container it gave ids of r.
 * Which pod's container that is, kubelet's own record says (rec: the
 * containers holding these ids; kubelet never gives one device to two
 * pods). That pod must be bound here by the extender and the ids must be
 * in its binding: for DP_GPU the bound UUIDs, for DP_SHARE slots on its
 * bound GPUs (and, when delivered names the pod Allocate answered for these
 * ids, a share of the same size), for DP_CLAIM a claim-only pod, and the one
 * whose devices Allocate delivered for the ticket (delivered: that pod's
 * uid, "" when the agent does not know). *holder gets the index in pods of
 * the pod kubelet gave the ids to, *owner that of the pod the devices are
 * bound to when that is another (-1 when none). Anything else is
 * DP_REFUSED with a message naming the pod kubelet chose and the pod the
 * devices are bound to.
 */
enum dp_verdict dp_prestart_check(const struct dp_inventory *inv, enum dp_resource r, const char *const *ids,
				  size_t nids, const struct dp_record *rec, const struct dp_pod *pods, int npods,
				  const char *delivered, int *holder, int *owner, char *msg, size_t msglen);

/* What the audit finds wrong (metric label in parentheses). */
enum dp_problem_kind {
	DP_PROB_TWICE = 0,        /* (held_twice) a GPU held by two live pods, not both shares */
	DP_PROB_UNBOUND,          /* (unbound) a container holds our devices; the extender bound its pod nothing here */
	DP_PROB_OUTSIDE,          /* (outside_binding) a container holds a GPU outside its pod's binding */
	DP_PROB_NOT_IN_LEDGER,    /* (not_in_ledger) a bound device the node's ledger does not reserve for the pod */
	DP_NPROB,
};
const char *dp_problem_name(enum dp_problem_kind k);

struct dp_problem {
	enum dp_problem_kind kind;
	char ns[64], pod[254];              /* the pod the Event goes on */
	char other_ns[64], other[254];      /* held_twice: the second pod; else "" */
	char key[400];                      /* the same problem has the same key next time */
	char msg[512];
};

struct ledger;
/*
 * Compares kubelet's record (rec) with the bindings of the node's pods and
 * with the node's ledger (NULL: not read; that comparison is skipped).
 * Writes at most max problems to out; returns how many there are in all.
 */
int dp_audit(const struct dp_inventory *inv, const struct dp_record *rec, const struct dp_pod *pods, int npods,
	     const struct ledger *ledger, struct dp_problem *out, int max);

/* ---- CDI (cdi.c) ---- */

/* The CDI spec (JSON) of every device: kind DP_CDI_KIND, one entry per kubelet id. Heap; NULL on no memory. */
char *dp_cdi_spec(const struct dp_inventory *inv);
/* Writes it as <dir>/gpu.scheduling-gpu.json, atomically (temp file + rename). 0 or -1 with err. */
int dp_cdi_write(const char *dir, const char *json, char *err, size_t errlen);

/* ---- kubelet's record (podresources.c) ---- */

/* One container's devices of one resource, as kubelet recorded them. */
typedef void (*dp_podres_fn)(void *ctx, const char *ns, const char *pod, const char *container,
			     const char *resource, const char *const *ids, size_t nids);
/*
 * Calls fn for every (pod, container, resource) kubelet's PodResources API
 * (List, on socket) reports devices for. 0, or -1 with err (kubelet not
 * reachable, an answer that does not decode).
 */
int dp_podresources_each(const char *socket, dp_podres_fn fn, void *ctx, char *err, size_t errlen);
/* kubelet's record of our resources into rec (emptied first). 0, or -1 with err. */
int dp_record_read(const char *socket, struct dp_record *rec, char *err, size_t errlen);

/* ---- the audit (audit.c) ---- */

/*
 * The auditor: a thread that compares kubelet's record with the bindings
 * and the ledger (dp_audit) every cfg->audit_every_s seconds and soon after
 * each kick, and reports each problem that lasts AUDIT_PERSIST_S: a log
 * line, a Warning Event on the pod (at most one per problem, a few a
 * minute in all) and the /metrics gauges and counters (docs/node.md,
 * "Watching it"). PreStart verdicts are counted and refusals reported at
 * once. Serves /metrics on cfg->metrics_listen when set.
 */
#define DP_AUDIT_PERSIST_S 10
struct dp_auditor;
struct events;
/* events: where its Warnings go (NULL: none; the caller frees it after dp_auditor_stop). */
struct dp_auditor *dp_auditor_start(const struct dp_config *cfg, struct kube_client *kube, struct events *events,
				    struct dp_pods *pods, char *err, size_t errlen);
/* The devices to audit against (copied). */
void dp_auditor_inventory(struct dp_auditor *a, const struct dp_inventory *inv);
/* Audit soon (after an Allocate or a PreStart). */
void dp_auditor_kick(struct dp_auditor *a);
/* A PreStart verdict; a refusal is reported on pod (and other, when set) with msg at once. */
void dp_auditor_prestart(struct dp_auditor *a, enum dp_verdict v, const char *ns, const char *pod,
			 const char *other_ns, const char *other, const char *msg);
/* The Prometheus text of the counters and gauges (tests; /metrics). */
void dp_auditor_metrics(struct dp_auditor *a, struct buf *out);
/* The table of those metrics (n: how many), and its Markdown reference (`gpu-agent metrics`, docs/metrics.md). */
struct metric_family;
const struct metric_family *dp_auditor_families(int *n);
void dp_auditor_reference(FILE *out);
void dp_auditor_stop(struct dp_auditor *a);

/* ---- the plugin (plugin.c) ---- */

struct devplugin;

/*
 * Starts the plugin's thread: serves each resource on its socket in
 * plugin_dir, registers it with kubelet (again whenever kubelet restarts
 * and wipes the directory), and watches the node's pods through kube
 * (borrowed; must outlive the plugin). The devices come from
 * devplugin_update(); until the first one, the lists are empty.
 */
struct devplugin *devplugin_start(const struct dp_config *cfg, struct kube_client *kube, char *err,
				  size_t errlen);
/*
 * The devices of this round's detection (copied); ListAndWatch streams get
 * the changes. node is also brought in line with what the plugin can hand
 * out, for the GpuNodeStatus: a device whose device files are missing turns
 * Unhealthy (with the reason), and status.shareSlots is set.
 */
void devplugin_update(struct devplugin *dp, struct agent_node *node);
/* Stops serving (sockets removed; the CDI spec stays for containers kubelet restarts). */
void devplugin_stop(struct devplugin *dp);

#endif
