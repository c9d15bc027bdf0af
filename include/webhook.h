/*
 * webhook: the mutating admission webhook (admission.k8s.io/v1) that makes
 * a GPU pod see the devices the extender gives it.
 *
 * The devices are only known at bind time, long after admission, so the
 * webhook cannot inject values. It injects downward-API references instead:
 * every container and init container of a GPU pod gets
 *
 *   CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES   (NVIDIA)
 *   ROCR_VISIBLE_DEVICES                           (AMD)
 *   ZE_AFFINITY_MASK                               (Intel)
 *
 * each as valueFrom.fieldRef.fieldPath metadata.annotations['<ANN_*>'],
 * which the kubelet resolves when it starts the container (the binding
 * writes the annotations together with spec.nodeName; a missing annotation
 * reads as ""). A variable the container already sets is left alone.
 *
 * "A GPU pod" is a pod with the gpu.scheduling/claim annotation, or with a
 * configured GPU resource name (api_resources_has) in the requests or
 * limits of any container or init container. Such a pod also gets the label
 * gpu.scheduling/managed=true (the extender watches those pods to release
 * their reservations). A claim-only pod (annotation, no GPU resource) also
 * gets the marker resource ("1" in the first container's limits and
 * requests) so that kube-scheduler, whose extender entry lists the marker in
 * managedResources, sends it to the extender. Every other pod, and every
 * operation but CREATE on pods, is allowed unchanged.
 *
 * Applying a patch again (reinvocationPolicy IfNeeded) is a no-op: what is
 * already there is not added twice.
 */
#ifndef GPU_WEBHOOK_H
#define GPU_WEBHOOK_H

#include "api.h"
#include "buf.h"
#include "httpd.h"

#include <cjson/cJSON.h>
#include <stddef.h>

struct webhook_opts {
	const struct api_resources *res;   /* the GPU resource names */
	const char *marker_resource;       /* e.g. "gpu.scheduling/claim"; NULL or "" = never add one */
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
 * when the pod is changed. A body that is not JSON gets HTTP 400 with a
 * JSON error; a JSON body that is not a usable review (wrong apiVersion or
 * kind, no request.uid, an object that is not a Pod) gets HTTP 200 with
 * allowed:false and status {code:400, message}. Keeps no cJSON tree.
 */
void webhook_mutate(void *ctx, const struct http_request *req, struct http_response *resp);

/*
 * Pure: the RFC 6902 JSON patch (a JSON array as text) that pod needs,
 * appended to patch. Appends nothing when the pod is not a GPU pod or has
 * everything already. Returns 0, or -1 with a one-line reason in err when
 * the pod is malformed (no spec.containers list, a container that is not an
 * object, env that is not a list, ...) or the patch passes patch's cap.
 */
int webhook_patch(const cJSON *pod, const struct webhook_opts *o, struct buf *patch, char *err,
		  size_t errlen);

#endif
