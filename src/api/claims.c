/* Pod and GpuClaim -> claim, and the extended-resource names. */
#include "api.h"
#include "vendor.h"
#include "policy.h"
#include "strnum.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

void api_resources_default(struct api_resources *r)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->gpu[0], API_NAME_MAX, "%s", API_GROUP "/gpu");
	snprintf(r->memory[0], API_NAME_MAX, "%s", API_GROUP "/gpu-memory");
	snprintf(r->core[0], API_NAME_MAX, "%s", API_GROUP "/gpu-core");
	snprintf(r->share[0], API_NAME_MAX, "%s", API_GROUP "/gpu-share");
	r->ngpu = r->nmemory = r->ncore = r->nshare = 1;
}

int api_resources_set(struct api_resources *r, const char *which, const char *list,
		      char *err, size_t errlen)
{
	char (*names)[API_NAME_MAX];
	int *count;
	if (!strcmp(which, "gpu")) {
		names = r->gpu;
		count = &r->ngpu;
	} else if (!strcmp(which, "memory")) {
		names = r->memory;
		count = &r->nmemory;
	} else if (!strcmp(which, "core")) {
		names = r->core;
		count = &r->ncore;
	} else if (!strcmp(which, "share")) {
		names = r->share;
		count = &r->nshare;
	} else {
		snprintf(err, errlen, "unknown resource kind '%s' (gpu, memory, core, share)", which);
		return -1;
	}
	int n = 0;
	const char *p = list;
	while (*p) {
		while (*p == ' ' || *p == ',')
			p++;
		size_t len = strcspn(p, ", ");
		if (!len)
			break;
		if (n == API_MAX_ALIASES || len >= API_NAME_MAX || !memchr(p, '/', len)) {
			snprintf(err, errlen, "resource names for %s: at most %d domain-prefixed names",
				 which, API_MAX_ALIASES);
			return -1;
		}
		memcpy(names[n], p, len);
		names[n][len] = '\0';
		n++;
		p += len;
	}
	if (!n) {
		snprintf(err, errlen, "resource names for %s: empty list", which);
		return -1;
	}
	*count = n;
	return 0;
}

bool api_names_has(const char (*names)[API_NAME_MAX], int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(names[i], name))
			return true;
	return false;
}

bool api_resources_has(const struct api_resources *r, const char *name)
{
	return api_names_has(r->gpu, r->ngpu, name) || api_names_has(r->memory, r->nmemory, name) ||
	       api_names_has(r->core, r->ncore, name) || api_names_has(r->share, r->nshare, name);
}

/* ---- GpuClaim ---------------------------------------------------------- */

static int bad(char *err, size_t errlen, const char *what)
{
	snprintf(err, errlen, "%s", what);
	return -1;
}

/* An optional integer member in [lo, hi]; *out untouched when absent. */
static int opt_int(const cJSON *obj, const char *key, double lo, double hi, double *out,
		   const char *path, char *err, size_t errlen)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi ||
	    floor(v->valuedouble) != v->valuedouble) {
		snprintf(err, errlen, "%s.%s must be an integer in %g..%g", path, key, lo, hi);
		return -1;
	}
	*out = v->valuedouble;
	return 0;
}

/* An optional string member that must be one of names[]; index in *out. */
static int opt_enum(const cJSON *obj, const char *key, const char *const *names, int n, int *out,
		    const char *path, char *err, size_t errlen)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!v || cJSON_IsNull(v))
		return 0;
	for (int i = 0; cJSON_IsString(v) && i < n; i++) {
		if (!strcmp(v->valuestring, names[i])) {
			*out = i;
			return 0;
		}
	}
	char list[128] = "";
	size_t len = 0;
	for (int i = 0; i < n; i++)
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", i ? ", " : "", names[i]);
	snprintf(err, errlen, "%s.%s must be one of %s", path, key, list);
	return -1;
}

static int opt_string(const cJSON *obj, const char *key, char *dst, size_t size,
		      const char *path, char *err, size_t errlen)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsString(v) || strlen(v->valuestring) >= size) {
		snprintf(err, errlen, "%s.%s must be a string of at most %zu characters", path, key, size - 1);
		return -1;
	}
	memcpy(dst, v->valuestring, strlen(v->valuestring) + 1);
	return 0;
}

static int decode_devices(const cJSON *devs, struct claim *c, char *err, size_t errlen)
{
	static const char *const excl[] = { "Exclusive", "Shared", "MIG" };
	static const char *const place[] = { "contiguous", "spread", "preferIds" };
	const char *P = "spec.devices";
	double num = 1;
	if (opt_int(devs, "count", 1, GPU_MAX_DEVICES, &num, P, err, errlen))
		return -1;
	c->count = (int)num;
	int mode = 0;
	if (opt_enum(devs, "exclusivity", excl, 3, &mode, P, err, errlen))
		return -1;
	c->mode = mode == 1 ? CLAIM_SHARED : mode == 2 ? CLAIM_MIG : CLAIM_EXCLUSIVE;
	int pl = -1;
	if (opt_enum(devs, "policy", place, 3, &pl, P, err, errlen))
		return -1;
	c->placement = pl < 0 ? PLACE_DEFAULT : (enum claim_placement)(PLACE_CONTIGUOUS + pl);
	const cJSON *ids = cJSON_GetObjectItemCaseSensitive(devs, "preferIds");
	const cJSON *id;
	cJSON_ArrayForEach(id, ids) {
		double idnum;
		if (!api_whole(id, 0, 1e6, &idnum) || c->nprefer >= GPU_MAX_DEVICES)
			return bad(err, errlen, "spec.devices.preferIds must be a list of device ids");
		c->prefer_ids[c->nprefer++] = (int)idnum;
	}
	if (c->placement == PLACE_PREFER_IDS && !c->nprefer)
		return bad(err, errlen, "spec.devices.policy preferIds needs spec.devices.preferIds");
	char vendor[16] = "";
	if (opt_string(devs, "vendor", vendor, sizeof(vendor), P, err, errlen) ||
	    opt_string(devs, "model", c->models, sizeof(c->models), P, err, errlen) ||
	    opt_string(devs, "architecture", c->arch, sizeof(c->arch), P, err, errlen))
		return -1;
	if (vendor[0] && !gpu_vendor_parse(vendor, &c->vendor)) {
		char names[128];
		vendor_names_list(names, sizeof(names));
		snprintf(err, errlen, "spec.devices.vendor must be %s", names);
		return -1;
	}
	num = 0;
	if (opt_int(devs, "minMemoryMiB", 0, 4294967295.0, &num, P, err, errlen))
		return -1;
	c->min_mem_mib = (uint32_t)num;
	double mib = 0, pct = 0;
	if (opt_int(devs, "memoryMiB", 0, 4294967295.0, &mib, P, err, errlen) ||
	    opt_int(devs, "corePercent", 0, 100, &pct, P, err, errlen))
		return -1;
	if (c->mode == CLAIM_SHARED) {
		if (mib <= 0 && pct <= 0)
			return bad(err, errlen, "spec.devices.exclusivity Shared needs memoryMiB or corePercent");
		c->mem_mib = (uint32_t)mib;
		c->core = (uint32_t)pct * (GPU_CORE_FULL / 100);
	} else if (mib > 0 || pct > 0) {
		return bad(err, errlen, "spec.devices.memoryMiB and corePercent apply only to exclusivity Shared");
	}
	return 0;
}

int api_gpuclaim_decode(const cJSON *gc, struct claim *c, char *err, size_t errlen)
{
	claim_init(c);
	const cJSON *spec = api_path(gc, "spec");
	if (!cJSON_IsObject(spec))
		return bad(err, errlen, "GpuClaim has no spec");
	const cJSON *devs = cJSON_GetObjectItemCaseSensitive(spec, "devices");
	if (!cJSON_IsObject(devs))
		return bad(err, errlen, "GpuClaim has no spec.devices");
	if (decode_devices(devs, c, err, errlen))
		goto fail;
	const cJSON *ml = api_path(spec, "selector.matchLabels");
	const cJSON *l;
	cJSON_ArrayForEach(l, ml) {
		if (!cJSON_IsString(l)) {
			snprintf(err, errlen, "spec.selector.matchLabels.%s must be a string", l->string);
			goto fail;
		}
		if (claim_add_match(c, l->string, l->valuestring)) {
			snprintf(err, errlen, "spec.selector.matchLabels: at most %d labels", CLAIM_MAX_MATCH);
			goto fail;
		}
	}
	static const char *const topo[] = { "Preferred", "Required", "Ignore" };
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(spec, "topology");
	int mode = TOPO_PREFERRED;
	if (opt_enum(t, "mode", topo, 3, &mode, "spec.topology", err, errlen))
		goto fail;
	c->topo = (enum topo_mode)mode;
	const cJSON *bw = cJSON_GetObjectItemCaseSensitive(t, "minBandwidthGBps");
	if (bw && !cJSON_IsNull(bw)) {
		if (!cJSON_IsNumber(bw) || bw->valuedouble < 0) {
			snprintf(err, errlen, "spec.topology.minBandwidthGBps must be a number >= 0");
			goto fail;
		}
		c->min_bw_gbps = bw->valuedouble;
	}
	/* A gang: every pod of the namespace whose claim names it is a member (docs/gang.md). */
	double size = 0, timeout = 0;
	if (opt_string(spec, "gangRef", c->gang, sizeof(c->gang), "spec", err, errlen) ||
	    opt_int(spec, "gangSize", 1, GANG_SIZE_MAX, &size, "spec", err, errlen) ||
	    opt_int(spec, "gangTimeoutSeconds", 1, 86400, &timeout, "spec", err, errlen))
		goto fail;
	if (size && !c->gang[0]) {
		snprintf(err, errlen, "spec.gangSize needs spec.gangRef");
		goto fail;
	}
	c->gang_size = (int)size;
	c->gang_timeout_s = (int)timeout;
	c->gang_kind = c->gang[0] ? GANG_CLAIM : GANG_NONE;
	return 0;
fail:
	claim_release(c);
	return -1;
}

/* ---- Pod --------------------------------------------------------------- */

/* The container's value for any of names (limits first, then requests). */
static int container_amount(const cJSON *ctr, char (*names)[API_NAME_MAX], int n, int64_t *out,
			    char *err, size_t errlen)
{
	*out = 0;
	const cJSON *lim = api_path(ctr, "resources.limits");
	const cJSON *req = api_path(ctr, "resources.requests");
	for (int i = 0; i < n; i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(lim, names[i]);
		if (!v)
			v = cJSON_GetObjectItemCaseSensitive(req, names[i]);
		if (!v)
			continue;
		int64_t q = -1;
		if (cJSON_IsString(v) ? !strnum_quantity(v->valuestring, 1, &q) : !cJSON_IsNumber(v))
			q = -1;
		else if (cJSON_IsNumber(v))   /* in range before the conversion */
			q = v->valuedouble >= 0 && v->valuedouble <= 1e15 ? (int64_t)ceil(v->valuedouble) : -1;
		if (q < 0) {
			snprintf(err, errlen, "container %s: %s is not a valid quantity",
				 api_str(ctr, "name") ? api_str(ctr, "name") : "?", names[i]);
			return -1;
		}
		*out += q;
	}
	return 0;
}

struct amounts {
	int64_t gpu, mem, core, share;
};

static int container_amounts(const cJSON *ctr, const struct api_resources *res, struct amounts *a,
			     char *err, size_t errlen)
{
	struct api_resources *r = (struct api_resources *)res;
	return container_amount(ctr, r->gpu, r->ngpu, &a->gpu, err, errlen) ||
	       container_amount(ctr, r->memory, r->nmemory, &a->mem, err, errlen) ||
	       container_amount(ctr, r->core, r->ncore, &a->core, err, errlen) ||
	       container_amount(ctr, r->share, r->nshare, &a->share, err, errlen) ? -1 : 0;
}

static void amounts_add(struct amounts *to, const struct amounts *a)
{
	to->gpu += a->gpu;
	to->mem += a->mem;
	to->core += a->core;
	to->share += a->share;
}

static void amounts_max(struct amounts *to, const struct amounts *a)
{
	to->gpu = a->gpu > to->gpu ? a->gpu : to->gpu;
	to->mem = a->mem > to->mem ? a->mem : to->mem;
	to->core = a->core > to->core ? a->core : to->core;
	to->share = a->share > to->share ? a->share : to->share;
}

bool api_container_restartable(const cJSON *ctr)
{
	const char *rp = api_str(ctr, "restartPolicy");
	return rp && strcmp(rp, "Always") == 0;
}

/*
 * As Kubernetes counts a pod's effective request: init containers run in
 * order, each beside the sidecars (restartable init containers) started
 * before it; the app containers run beside all of them. So each ordinary
 * init container counts with the sidecars before it, and the result is the
 * maximum of those and of the app containers' sum plus every sidecar.
 */
static int pod_amounts(const cJSON *pod, const struct api_resources *res, struct amounts *total,
		       char *err, size_t errlen)
{
	struct amounts sidecars = { 0 }, init = { 0 };
	memset(total, 0, sizeof(*total));
	const cJSON *ctr;
	cJSON_ArrayForEach(ctr, api_path(pod, "spec.initContainers")) {
		struct amounts a;
		if (container_amounts(ctr, res, &a, err, errlen))
			return -1;
		amounts_add(&a, &sidecars);
		if (api_container_restartable(ctr))
			sidecars = a;
		amounts_max(&init, &a);
	}
	cJSON_ArrayForEach(ctr, api_path(pod, "spec.containers")) {
		struct amounts a;
		if (container_amounts(ctr, res, &a, err, errlen))
			return -1;
		amounts_add(total, &a);
	}
	amounts_add(total, &sidecars);
	amounts_max(total, &init);
	return 0;
}

static int claim_from_resources(const cJSON *pod, const struct api_resources *res, struct claim *c,
				char *err, size_t errlen)
{
	struct amounts a;
	if (pod_amounts(pod, res, &a, err, errlen))
		return -1;
	if (a.gpu > GPU_MAX_DEVICES || a.share > GPU_MAX_DEVICES)
		return bad(err, errlen, "pod asks for more GPUs than any node can have");
	if (a.share && a.gpu) {
		snprintf(err, errlen, "pod asks whole GPUs (%s) and shares (%s): a pod gets one or the other",
			 res->gpu[0], res->share[0]);
		return -1;
	}
	if (a.share && !a.mem && !a.core) {
		snprintf(err, errlen, "%s needs %s or %s: say how much of each GPU the share takes",
			 res->share[0], res->memory[0], res->core[0]);
		return -1;
	}
	if (a.core > 100) {
		snprintf(err, errlen, "%s is percent of one GPU: %lld is over 100", res->core[0], (long long)a.core);
		return -1;
	}
	if (a.mem > UINT32_MAX)
		return bad(err, errlen, "GPU memory request too large");
	if (a.mem || a.core) {
		c->mode = CLAIM_SHARED;
		c->count = a.share ? (int)a.share : a.gpu ? (int)a.gpu : 1;
		c->mem_mib = (uint32_t)a.mem;
		c->core = (uint32_t)a.core * (GPU_CORE_FULL / 100);
	} else if (a.gpu) {
		c->mode = CLAIM_EXCLUSIVE;
		c->count = (int)a.gpu;
	}
	return 0;
}

/*
 * A claim pod may also name the counted resources (the webhook adds them so
 * that kubelet's record names the devices): they must say what the claim
 * says, or kubelet would hand over another number or kind of device.
 */
static int claim_matches_resources(const cJSON *pod, const struct api_resources *res, const struct claim *c,
				   const char *claim_name, char *err, size_t errlen)
{
	struct amounts a;
	if (pod_amounts(pod, res, &a, err, errlen))
		return -1;
	if (!a.gpu && !a.share)
		return 0;
	bool shared = c->mode == CLAIM_SHARED;
	const char *want = shared ? res->share[0] : res->gpu[0];
	int64_t n = shared ? a.share : a.gpu;
	if (n != c->count || (shared ? a.gpu : a.share)) {
		snprintf(err, errlen, "GpuClaim %s is %d GPU(s) of %s, the containers ask %lld %s and %lld %s: "
			 "drop those or make them match", claim_name, c->count, want, (long long)a.gpu,
			 res->gpu[0], (long long)a.share, res->share[0]);
		return -1;
	}
	return 0;
}

/* The gang a pod names itself (when its GpuClaim names none): 0, or -1 with err. */
static int pod_gang(const cJSON *pod, struct claim *c, char *err, size_t errlen)
{
	/* The coscheduling convention (scheduler-plugins, Kubeflow, Kueue): its PodGroup gives the size. */
	const char *group = api_label(pod, LABEL_POD_GROUP);
	if (group && !c->gang[0] && claim_wants_gpu(c)) {
		if (!*group || strlen(group) >= sizeof(c->gang)) {
			snprintf(err, errlen, "label %s must be a PodGroup name", LABEL_POD_GROUP);
			return -1;
		}
		snprintf(c->gang, sizeof(c->gang), "%s", group);
		c->gang_kind = GANG_POD_GROUP;
	}
	/* Kubernetes' own (scheduling.k8s.io Workload): the pod group of the workload, per replica. */
	const cJSON *wref = api_path(pod, "spec.workloadRef");
	if (wref && !c->gang[0] && claim_wants_gpu(c)) {
		const char *w = api_str(wref, "name"), *g = api_str(wref, "podGroup"), *rk = api_str(wref, "podGroupReplicaKey");
		int n = w && g && *w && *g ? snprintf(c->gang, sizeof(c->gang), "%s/%s%s%s", w, g, rk && *rk ? "/" : "",
						       rk && *rk ? rk : "") : -1;
		if (n < 0 || (size_t)n >= sizeof(c->gang)) {
			snprintf(err, errlen, "spec.workloadRef needs a name and a podGroup (%zu characters in all at most)",
				 sizeof(c->gang) - 3);
			return -1;
		}
		c->gang_kind = GANG_WORKLOAD;
	}
	/* 1.36 on (spec.workloadRef is gone): a PodGroup object of scheduling.k8s.io names the gang. */
	const cJSON *sg = api_path(pod, "spec.schedulingGroup");
	if (sg && !c->gang[0] && claim_wants_gpu(c)) {
		const char *g = api_str(sg, "podGroupName");
		int n = g && *g ? snprintf(c->gang, sizeof(c->gang), CLAIM_PODGROUP_PREFIX "%s", g) : -1;
		if (n < 0 || (size_t)n >= sizeof(c->gang)) {
			c->gang[0] = 0;
			snprintf(err, errlen, "spec.schedulingGroup.podGroupName must be a name of at most %zu characters",
				 sizeof(c->gang) - sizeof(CLAIM_PODGROUP_PREFIX));
			return -1;
		}
		c->gang_kind = GANG_SCHEDULING_GROUP;
	}
	return 0;
}

int api_pod_claim(const cJSON *pod, const struct api_resources *res, api_claim_lookup lookup,
		  void *lookup_ctx, struct claim *c, char *err, size_t errlen)
{
	claim_init(c);
	if (!cJSON_IsObject(pod) || !cJSON_IsObject(api_path(pod, "spec")))
		return bad(err, errlen, "Pod has no spec");
	struct api_pod_ref ref;
	api_pod_ref(pod, &ref);
	const char *claim_name = api_annotation(pod, ANN_CLAIM);
	if (claim_name) {
		const cJSON *gc = lookup ? lookup(lookup_ctx, ref.ns, claim_name) : NULL;
		if (!gc) {
			snprintf(err, errlen, "GpuClaim %s/%s not found", ref.ns, claim_name);
			return -1;
		}
		char why[200];
		if (api_gpuclaim_decode(gc, c, why, sizeof(why))) {
			snprintf(err, errlen, "GpuClaim %s/%s is invalid: %s", ref.ns, claim_name, why);
			return -1;
		}
		snprintf(c->gpuclaim, sizeof(c->gpuclaim), "%s", claim_name);
		if (claim_matches_resources(pod, res, c, claim_name, err, errlen)) {
			claim_release(c);
			return -1;
		}
	} else if (claim_from_resources(pod, res, c, err, errlen)) {
		return -1;
	}
	if (pod_gang(pod, c, err, errlen)) {
		claim_release(c);
		return -1;
	}
	const char *policy = api_annotation(pod, ANN_POLICY);
	if (policy) {
		enum policy_id id;
		if (!policy_parse(policy, &id)) {
			snprintf(err, errlen, "annotation %s: unknown policy '%s'", ANN_POLICY, policy);
			claim_release(c);
			return -1;
		}
		c->policy = (int)id;
	}
	const char *version = api_str(api_path(pod, "metadata"), "resourceVersion");
	if (version && strlen(version) < sizeof(c->pod_version))
		snprintf(c->pod_version, sizeof(c->pod_version), "%s", version);
	return 0;
}

/* policy.gang.minCount of a gang policy object: 1 with *size, 0 without "gang", -1 when invalid. */
static int gang_min_count(const cJSON *policy, int *size)
{
	const cJSON *g = cJSON_GetObjectItemCaseSensitive(policy, "gang");
	double min;
	if (!g)
		return 0;
	if (!api_whole(cJSON_GetObjectItemCaseSensitive(g, "minCount"), 1, GANG_SIZE_MAX, &min))
		return -1;
	*size = (int)min;
	return 1;
}

int api_workload_gang(const cJSON *workload, const char *group, int *size, char *err, size_t errlen)
{
	const cJSON *pg;
	cJSON_ArrayForEach(pg, api_path(workload, "spec.podGroups")) {
		const char *name = api_str(pg, "name");
		if (!name || strcmp(name, group))
			continue;
		int rc = gang_min_count(api_path(pg, "policy"), size);
		if (rc < 0)
			snprintf(err, errlen, "pod group %s: policy.gang.minCount must be 1..%d", group, GANG_SIZE_MAX);
		return rc;
	}
	snprintf(err, errlen, "no pod group %s", group);
	return -1;
}

int api_podgroup_gang(const cJSON *podgroup, int *size, char *err, size_t errlen)
{
	int rc = gang_min_count(api_path(podgroup, "spec.schedulingPolicy"), size);
	if (rc < 0)
		snprintf(err, errlen, "spec.schedulingPolicy.gang.minCount must be 1..%d", GANG_SIZE_MAX);
	return rc;
}
