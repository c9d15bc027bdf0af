/*
 * webhook: the mutating admission webhook (admission.k8s.io/v1) for GPU
 * pods, and the second layer of the rule that no pod picks its own GPUs.
 *
 * "A GPU pod" is a pod with the gpu.scheduling/claim annotation, or with a
 * configured GPU resource name (api_resources_has) in the requests or
 * limits of any container or init container. On CREATE such a pod gets:
 *
 *   - the label gpu.scheduling/managed=true (the extender watches those
 *     pods to release their reservations);
 *   - for a container that asks gpu-memory or gpu-core: gpu-share (its gpu
 *     count, else 1) in limits and requests, and its gpu removed, so that
 *     kubelet counts it in share slots instead of handing it whole GPUs;
 *   - for a claim-only pod (annotation, no GPU resource): in the first
 *     container, the claim's count of gpu (Exclusive, MIG) or gpu-share
 *     (Shared) when claim_of reads the GpuClaim, else the marker resource
 *     ("1"), so that kube-scheduler sends it to the extender (its extender
 *     entry lists these in managedResources) and kubelet counts it;
 *   - unless no_env: in every container and init container, each vendor's
 *     list variables (vendor.h: CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES,
 *     ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK) as downward-API references
 *     (valueFrom.fieldRef) to the annotations the binding writes.
 *     For clusters without the node agent's device plugin, which sets them
 *     itself; a variable the container already sets is left alone.
 *
 * Every pod, GPU pod or not, on CREATE and UPDATE (pods/ephemeralcontainers
 * included) is refused (webhook_bypass) when it selects GPUs itself, and
 * (webhook_protect) when it is a GPU pod created with spec.nodeName or an
 * UPDATE changes the labels and annotations the reservation rests on. The
 * same rules ship as ValidatingAdmissionPolicies
 * (deploy/base/08-admission-policy.yaml), which no label opts out of and which
 * cannot be down; this is their second layer for clusters older than 1.30.
 *
 * Applying a patch again (reinvocationPolicy IfNeeded) is a no-op: what is
 * already there is not added twice.
 */
#ifndef GPU_WEBHOOK_H
#define GPU_WEBHOOK_H

#include "api.h"
#include "buf.h"
#include "claim.h"
#include "httpd.h"

#include <cjson/cJSON.h>
#include <stddef.h>

#define WEBHOOK_NAMESPACES_MAX 512
/* The extender's own identity (deploy/base/03-rbac.yaml): the only one that may change what webhook_protect guards. */
#define WEBHOOK_EXTENDER_USER "system:serviceaccount:gpu-system:gpu-extender"

struct webhook_opts {
	const struct api_resources *res;   /* the GPU resource names */
	const char *marker_resource;       /* e.g. "gpu.scheduling/claim"; NULL or "" = never add one */
	bool no_env;                       /* add no visible-devices variables (the device plugin sets them) */
	/* Comma-separated namespaces whose privileged pods may select GPUs themselves; NULL = none. */
	const char *system_namespaces;
	const char *extender_user;         /* NULL: WEBHOOK_EXTENDER_USER */
	/*
	 * Reads a claim-only pod's GpuClaim into out: 0, or -1 when it cannot
	 * (then the marker is added). NULL: always the marker. Called from any
	 * handler thread.
	 */
	int (*claim_of)(void *ctx, const char *ns, const char *name, struct claim *out);
	void *claim_ctx;
};

/* The handle is immutable after webhook_new(): handlers on any thread may share it. */
struct webhook;

/* Copies the options (the caller's res and string may go away). NULL on no memory. */
struct webhook *webhook_new(const struct webhook_opts *opts);
void webhook_free(struct webhook *w);

/*
 * http_handler for POST /mutate; ctx is the struct webhook. Body: an
 * AdmissionReview v1. Reply: an AdmissionReview v1 whose response echoes
 * request.uid, allowed:true, and patchType "JSONPatch" + the base64 patch
 * when the pod is changed; a pod webhook_bypass refuses gets allowed:false
 * with status {code:403, message} (the reason and what to do). A body that is not JSON gets HTTP 400 with a
 * JSON error; a JSON body that is not a usable review (wrong apiVersion or
 * kind, no request.uid, an object that is not a Pod) gets HTTP 200 with
 * allowed:false and status {code:400, message}. Keeps no cJSON tree.
 */
void webhook_mutate(void *ctx, const struct http_request *req, struct http_response *resp);

/*
 * Pure but for o->claim_of: the RFC 6902 JSON patch (a JSON array as text)
 * that pod, created in namespace ns (NULL: its metadata.namespace), needs,
 * appended to patch. Appends nothing when the pod is not a GPU pod or has
 * everything already. Returns 0, or -1 with a one-line reason in err when
 * the pod is malformed (no spec.containers list, a container that is not an
 * object, env that is not a list, ...) or the patch passes patch's cap.
 */
int webhook_patch(const cJSON *pod, const char *ns, const struct webhook_opts *o, struct buf *patch, char *err,
		  size_t errlen);

/*
 * Pure: 1 with the reason (and what to do) in why when the pod selects GPUs
 * itself, else 0. old is the pod before an UPDATE, NULL on CREATE; ns its
 * namespace (NULL: its metadata.namespace). Refused:
 *   - a container, init or ephemeral container whose env sets a vendor's
 *     selecting variable (vendor.h selecting_env: NVIDIA_VISIBLE_DEVICES,
 *     CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES,
 *     GPU_DEVICE_ORDINAL, ZE_AFFINITY_MASK), other than as the webhook's own
 *     reference to the binding's annotation;
 *   - a cdi.k8s.io/ annotation added or changed;
 *   - an allocation annotation (gpu.scheduling/allocated, device-uuids, the
 *     visible-devices and shared-* ones) set at CREATE or changed by an
 *     UPDATE: only the binding writes them;
 *   - a volumeMount (at CREATE; on an UPDATE, of an ephemeral container) at
 *     or under a vendor runtime's device list (vendor.h runtime_dir, and its
 *     /run twin: /var/run/nvidia-container-devices), where that runtime reads
 *     the devices to hand over from mount names;
 *   - at CREATE, a hostPath volume of GPU devices: /, /dev, /dev/char/, the
 *     vendors' device paths (vendor.h host_paths: /dev/nvidia*, /dev/dri/,
 *     /dev/kfd, /dev/accel*), the device-list directories,
 *     /proc/X/{root,cwd,fd,map_files}/, or a path with "..".
 *   Paths are compared lexically ("//", "/./" and a trailing "/" do not
 *   matter); symlinks on the host are not resolved.
 * Exempt: a pod in one of o->system_namespaces with a privileged container.
 * envFrom cannot be seen at admission (its values live in a ConfigMap or
 * Secret); the runtime setting closes it (docs/node.md).
 */
int webhook_bypass(const cJSON *pod, const cJSON *old, const char *ns, const struct webhook_opts *o, char *why,
		   size_t len);

/*
 * Pure: 1 with the reason (and what to do) in why, else 0. user is the
 * request's userInfo.username (NULL: unknown). Refused:
 *   - UPDATE (old set): a change of the label gpu.scheduling/managed or
 *     scheduling.x-k8s.io/pod-group or of the annotation
 *     gpu.scheduling/claim or gpu.scheduling/policy (added, changed or
 *     removed), unless user is o->extender_user; adding managed=true where
 *     it is missing passes (it only lets the extender follow the pod);
 *   - CREATE (old NULL): spec.nodeName set on a pod that asks for GPUs (the
 *     claim annotation, a configured GPU resource, the marker, any
 *     gpu.scheduling/ resource) in a container or init container: it skips
 *     the scheduler, so nothing is reserved for it. A static pod's mirror
 *     (annotation kubernetes.io/config.mirror) written by a node passes.
 * No namespace is exempt. The first layer is deploy/base/08-admission-policy.yaml.
 */
int webhook_protect(const cJSON *pod, const cJSON *old, const char *user, const struct webhook_opts *o, char *why,
		    size_t len);

#endif
