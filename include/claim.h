/*
 * claim: what one pod asks for, whatever way it asked (a GpuClaim object,
 * extended resources on its containers, or a simulator trace row).
 */
#ifndef GPU_CLAIM_H
#define GPU_CLAIM_H

#include "buf.h"
#include "gpu.h"

enum claim_mode {
	CLAIM_NONE = 0,      /* no GPU: passes every node */
	CLAIM_EXCLUSIVE,     /* whole devices */
	CLAIM_SHARED,        /* memory and compute on each of count devices */
	CLAIM_MIG,           /* whole MIG instances */
};

enum claim_placement {
	PLACE_DEFAULT = 0,   /* the policy decides */
	PLACE_CONTIGUOUS,    /* consecutive device ids where possible */
	PLACE_SPREAD,        /* across islands */
	PLACE_PREFER_IDS,    /* the listed ids first */
};

enum topo_mode { TOPO_PREFERRED = 0, TOPO_REQUIRED, TOPO_IGNORE };

#define CLAIM_MAX_MATCH 16

/*
 * The gang name of a pod whose spec.schedulingGroup names a scheduling.k8s.io
 * PodGroup: ':' is in no object name, so it never meets the gang of a
 * coscheduling PodGroup (or a Workload's pod group) of the same name.
 */
#define CLAIM_PODGROUP_PREFIX "podgroup:"

struct claim {
	enum claim_mode mode;
	int count;
	uint32_t mem_mib;             /* shared: memory taken on each device */
	uint32_t core;                /* shared: milli-GPU taken on each device */
	enum claim_placement placement;
	int nprefer;
	int prefer_ids[GPU_MAX_DEVICES];
	/* Capability selectors; empty or zero means "any". */
	enum gpu_vendor vendor;
	char models[160];             /* '|'-separated alternatives */
	char arch[24];
	uint32_t min_mem_mib;
	int nmatch;                   /* node label selector (matchLabels) */
	struct label match[CLAIM_MAX_MATCH];
	enum topo_mode topo;
	double min_bw_gbps;
	int policy;                   /* enum policy_id, or -1 for the default */
	/* Host resources; only the simulator checks them (0 = not checked). */
	int64_t cpu_milli;
	int64_t mem_mib_host;
	char gpuclaim[254];           /* the GpuClaim it came from, or "" */
	/*
	 * A gang: the pods of one gang in one namespace are placed together, all
	 * of gang_size at once or none (docs/gang.md). From the GpuClaim's
	 * gangRef, the pod's scheduling.x-k8s.io/pod-group label, its
	 * spec.workloadRef (Kubernetes 1.35's Workload API, v1alpha1:
	 * "workload/podGroup[/replica]"), or its spec.schedulingGroup (1.36 on: a
	 * scheduling.k8s.io PodGroup, CLAIM_PODGROUP_PREFIX "name").
	 */
	enum gang_kind { GANG_NONE = 0, GANG_CLAIM, GANG_POD_GROUP, GANG_WORKLOAD, GANG_SCHEDULING_GROUP } gang_kind;
	char gang[128];               /* gang name, or "" */
	int gang_size;                /* members placed at once; 0: the PodGroup's minMember */
	int gang_timeout_s;           /* reserved places unused this long are released; 0: default */
	/* The resourceVersion of the pod it was read from (or ""): its binding's
	 * precondition, so that a binding carried out late is refused once the
	 * pod changed (docs/architecture.md, "Fencing a late binding"). */
	char pod_version[32];
};

/* An empty claim (mode NONE, policy -1). Call before filling one in. */
void claim_init(struct claim *c);
/* Frees the label strings of match[]; the claim is empty afterwards. */
void claim_release(struct claim *c);
/* Deep copy; 0 or -1 when out of memory (dst is then empty). */
int claim_copy(struct claim *dst, const struct claim *src);
/* Adds a matchLabels entry; 0, or -1 (full or no memory). */
int claim_add_match(struct claim *c, const char *key, const char *value);

/*
 * A claim packed for keeping: its numbers, then its preferred ids, strings
 * and labels at their length (about 100 bytes for a plain claim; a struct
 * claim takes 1208). claim_pack() appends it to out: 0, or -1 (no room).
 * claim_unpack() fills *out (claim_release() it); 0, or -1 when out of
 * memory (out empty).
 */
int claim_pack(const struct claim *c, struct buf *out);
int claim_unpack(const void *in, struct claim *out);

bool claim_wants_gpu(const struct claim *c);
/* The mode as GpuClaims and reservations spell it: Exclusive, Shared or MIG. */
const char *claim_mode_name(enum claim_mode m);
/* Whether its fit reads a node's labels or device strings (model, architecture, MIG profile). */
bool claim_reads_node_strings(const struct claim *c);
/* TASK_KIND_* bit of this claim. */
uint32_t claim_task_kind(const struct claim *c);
/* GPU demand in milli-GPU (count * 1000 for whole devices). */
int64_t claim_gpu_milli(const struct claim *c);
/*
 * An openb task as the FGD benchmark reads one: host CPU (milli) and memory
 * (MiB); count GPUs of milli each, below GPU_CORE_FULL a share of one GPU;
 * on one of models ('|'-separated, "" any, cut to fit). No GPU when count or
 * milli is 0.
 */
void claim_from_task(struct claim *c, int64_t cpu_milli, int64_t mem_mib, int count, uint32_t milli,
		     const char *models);

#endif
