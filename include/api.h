/*
 * api: decodes the Kubernetes objects the product reads (Node,
 * GpuNodeStatus, GpuClaim, Pod) into the core model, and names the
 * annotations and resources that form the product's API (docs/api.md).
 * Pure: cJSON in, structs out, errors into a caller buffer.
 */
#ifndef GPU_API_H
#define GPU_API_H

#include "claim.h"
#include "gpu.h"

#include <cjson/cJSON.h>
#include <stdbool.h>

#define API_GROUP "gpu.scheduling"
#define API_VERSION "gpu.scheduling/v1"
#define ANN_CLAIM "gpu.scheduling/claim"
#define ANN_POLICY "gpu.scheduling/policy"
#define ANN_ALLOCATED "gpu.scheduling/allocated"          /* "node:0,1" */
#define ANN_UUIDS "gpu.scheduling/device-uuids"           /* "GPU-a,GPU-b" */
/* ANN_CUDA and the other visible-devices annotations: vendor.h, one list per vendor */
#define ANN_SHARED_MEMORY "gpu.scheduling/shared-memory-mib"    /* per GPU, for isolation layers */
#define ANN_SHARED_CORE "gpu.scheduling/shared-core-percent"
/*
 * On a pod waiting for a node: when the extender last wrote it (RFC 3339),
 * so that kube-scheduler tries the pod again: a nudge when GPUs it fits
 * free, and the fence before a reservation not bound in time goes
 * (docs/architecture.md, "Fencing a late binding").
 */
#define ANN_NUDGED "gpu.scheduling/nudged"
/*
 * The version of the allocation annotations' format, which the binding
 * writes beside them. None means 1, the format of 0.2.0. A reader takes
 * the versions up to its own and refuses a newer one rather than guess
 * (docs/architecture.md, "Stored formats").
 */
#define ANN_ALLOCATION_VERSION "gpu.scheduling/allocation-version"
#define API_ALLOCATION_VERSION 1
#define LABEL_MANAGED "gpu.scheduling/managed"                   /* set by the webhook on GPU pods */
#define LABEL_POD_GROUP "scheduling.x-k8s.io/pod-group"           /* coscheduling's gang of a pod */
#define GANG_SIZE_MAX 1024

#define API_MAX_ALIASES 4
#define API_NAME_MAX 254

/* Extended-resource names mapped onto a claim; each may have aliases. */
struct api_resources {
	char gpu[API_MAX_ALIASES][API_NAME_MAX];        /* whole GPUs (count) */
	char memory[API_MAX_ALIASES][API_NAME_MAX];     /* MiB per GPU, shared */
	char core[API_MAX_ALIASES][API_NAME_MAX];       /* percent per GPU, shared */
	char share[API_MAX_ALIASES][API_NAME_MAX];      /* how many GPUs a share spans (node slots) */
	int ngpu, nmemory, ncore, nshare;
};

/*
 * The defaults: gpu.scheduling/gpu, gpu.scheduling/gpu-memory,
 * gpu.scheduling/gpu-core, gpu.scheduling/gpu-share.
 */
void api_resources_default(struct api_resources *r);
/* Replaces one list from "a, b, c"; which is "gpu", "memory", "core" or "share". */
int api_resources_set(struct api_resources *r, const char *which, const char *list,
		      char *err, size_t errlen);
/* True if name is one of the configured names. */
bool api_resources_has(const struct api_resources *r, const char *name);
/* True if name is one of the n names of one kind (r->gpu, r->ngpu, ...). */
bool api_names_has(const char (*names)[API_NAME_MAX], int n, const char *name);

/* Small accessors that tolerate missing or wrongly typed members. */
const char *api_str(const cJSON *obj, const char *key);
const cJSON *api_path(const cJSON *obj, const char *dotted);    /* "metadata.name" */
const char *api_annotation(const cJSON *obj, const char *key);
const char *api_label(const cJSON *obj, const char *key);
/* A JSON number that is a whole value within [lo, hi] (safe to convert to an integer type). */
bool api_whole(const cJSON *v, double lo, double hi, double *out);

/*
 * The format version an object's annotation key states: 0 with *version
 * (1 when the key is missing: the formats of 0.2.0 carried none), or -1
 * with err when it is not a whole number from 1, or is newer than known
 * (this program cannot read it).
 */
int api_format_version(const cJSON *obj, const char *key, int known, int *version, char *err, size_t errlen);
/*
 * The pod's gpu.scheduling/allocated annotation when its format is one this
 * program reads; NULL when it has none, or when its allocation-version is
 * newer (err then says so, if err is not NULL).
 */
const char *api_pod_allocated(const cJSON *pod, char *err, size_t errlen);

/* Who a pod is. Strings point into the cJSON tree. */
struct api_pod_ref {
	const char *ns, *name, *uid;
};
void api_pod_ref(const cJSON *pod, struct api_pod_ref *out);
/* Whether the pod has run to its end (phase Succeeded or Failed): it uses no devices any more. */
bool api_pod_finished(const cJSON *pod);
/*
 * Whether the pod states a soft preference that kube-scheduler's scoring
 * weighs among the nodes that fit: a preferred node affinity, a preferred
 * pod affinity or anti-affinity, or a topology spread constraint with
 * whenUnsatisfiable ScheduleAnyway.
 */
bool api_pod_soft_preferences(const cJSON *pod);
/*
 * Whether an init container is restartable (restartPolicy Always, a
 * "sidecar"): it keeps running beside the init containers after it and the
 * app containers, so its devices add to theirs instead of being reused.
 */
bool api_container_restartable(const cJSON *ctr);

/*
 * GpuClaim spec -> claim. Validates every field (enums, ranges); on error
 * returns -1 with a one-line reason ("spec.devices.count must be 1..64").
 */
int api_gpuclaim_decode(const cJSON *gpuclaim, struct claim *out, char *err, size_t errlen);

/* How a pod's GpuClaim is found: the caller's lookup (cache or inventory). */
typedef const cJSON *(*api_claim_lookup)(void *ctx, const char *ns, const char *name);

/*
 * A pod -> its claim: the gpu.scheduling/claim annotation (looked up), else
 * the extended resources on its containers, counted as Kubernetes counts a
 * pod's effective request: the maximum of (the app containers' sum plus
 * every sidecar) and of (each ordinary init container plus the sidecars
 * before it); else CLAIM_NONE. Resources: gpu alone is whole
 * GPUs; gpu-memory or gpu-core make a share spanning gpu-share GPUs (or,
 * as before gpu-share existed, gpu; default 1). A pod that asks whole GPUs
 * and shares, or a share count without memory or compute, is invalid; so
 * is a claim pod whose gpu/gpu-share count disagrees with its GpuClaim
 * (kubelet would hand it a different number of devices). The gpu.scheduling/policy
 * annotation sets claim->policy. Returns 0, or -1 with a reason when the
 * request is invalid (missing GpuClaim, bad quantity, unknown policy).
 */
int api_pod_claim(const cJSON *pod, const struct api_resources *res, api_claim_lookup lookup,
		  void *lookup_ctx, struct claim *out, char *err, size_t errlen);

/*
 * The gang policy of Kubernetes' own gang API, for a claim's gang_kind:
 * api_workload_gang reads pod group `group` of a scheduling.k8s.io/v1alpha1
 * Workload (1.35: spec.podGroups[].policy.gang.minCount), api_podgroup_gang
 * a scheduling.k8s.io PodGroup (1.36 on, v1alpha2, v1alpha3 and v1beta1 alike:
 * spec.schedulingPolicy.gang.minCount). Each returns 1 with *size for a gang,
 * 0 for a group that is not one (the basic policy), -1 with a reason.
 */
int api_workload_gang(const cJSON *workload, const char *group, int *size, char *err, size_t errlen);
int api_podgroup_gang(const cJSON *podgroup, int *size, char *err, size_t errlen);
/* The versions of scheduling.k8s.io that serve PodGroups, newest first (read alike). */
#define API_PODGROUP_VERSIONS "v1beta1", "v1alpha3", "v1alpha2"

/* Discovery: an APIGroup (GET /apis/<group>) lists version; an APIResourceList has resource. */
bool api_group_serves(const cJSON *apigroup, const char *version);
bool api_resource_list_has(const cJSON *list, const char *resource);

/* Node object -> fresh gpu_node with name, labels and allocatable cpu/memory. */
struct gpu_node *api_node_decode(const cJSON *node, char *err, size_t errlen);

/*
 * GpuNodeStatus -> devices and islands added to n (which keeps its name and
 * labels). *node_name gets spec.nodeName (or metadata.name); it points into
 * the tree. Returns 0 or -1 with a reason.
 */
int api_gns_decode(const cJSON *gns, struct gpu_node *n, const char **node_name,
		   char *err, size_t errlen);
/* spec.nodeName, or metadata.name when that is missing. */
const char *api_gns_node_name(const cJSON *gns);

#endif
