/* Decoding of Node and GpuNodeStatus objects, API discovery documents, and small cJSON accessors. */
#include "api.h"
#include "vendor.h"
#include "intern.h"
#include "strnum.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *api_str(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

const cJSON *api_path(const cJSON *obj, const char *dotted)
{
	char part[128];
	const char *p = dotted;
	while (obj && *p) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		if (n >= sizeof(part))
			return NULL;
		memcpy(part, p, n);
		part[n] = '\0';
		obj = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, part) : NULL;
		p = dot ? dot + 1 : p + n;
	}
	return obj;
}

const char *api_annotation(const cJSON *obj, const char *key)
{
	return api_str(api_path(obj, "metadata.annotations"), key);
}

const char *api_label(const cJSON *obj, const char *key)
{
	return api_str(api_path(obj, "metadata.labels"), key);
}

int api_format_version(const cJSON *obj, const char *key, int known, int *version, char *err, size_t errlen)
{
	const char *v = api_annotation(obj, key);
	*version = 1;
	if (!v)
		return 0;
	int n;
	if (!strnum_int(v, 1, 1000000, &n)) {
		snprintf(err, errlen, "%s '%.40s' is not a format version (a whole number from 1)", key, v);
		return -1;
	}
	*version = n;
	if (n > known) {
		snprintf(err, errlen, "%s %d is newer than this program reads (up to %d): upgrade it "
			 "(docs/operations.md, \"Downgrades\")", key, n, known);
		return -1;
	}
	return 0;
}

const char *api_pod_allocated(const cJSON *pod, char *err, size_t errlen)
{
	char why[256];
	int version;
	if (api_format_version(pod, ANN_ALLOCATION_VERSION, API_ALLOCATION_VERSION, &version, why, sizeof(why))) {
		if (err)
			snprintf(err, errlen, "%s", why);
		return NULL;
	}
	return api_annotation(pod, ANN_ALLOCATED);
}

void api_pod_ref(const cJSON *pod, struct api_pod_ref *out)
{
	const cJSON *meta = api_path(pod, "metadata");
	out->ns = api_str(meta, "namespace");
	out->name = api_str(meta, "name");
	out->uid = api_str(meta, "uid");
	if (!out->ns)
		out->ns = "default";
	if (!out->name)
		out->name = "";
	if (!out->uid)
		out->uid = "";
}

bool api_pod_finished(const cJSON *pod)
{
	const char *phase = api_str(api_path(pod, "status"), "phase");
	return phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"));
}

static bool has_items(const cJSON *obj, const char *dotted)
{
	const cJSON *v = api_path(obj, dotted);
	return cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0;
}

bool api_pod_soft_preferences(const cJSON *pod)
{
	const cJSON *affinity = api_path(pod, "spec.affinity");
	if (has_items(affinity, "nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution") ||
	    has_items(affinity, "podAffinity.preferredDuringSchedulingIgnoredDuringExecution") ||
	    has_items(affinity, "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution"))
		return true;
	const cJSON *c;
	cJSON_ArrayForEach(c, api_path(pod, "spec.topologySpreadConstraints"))
	{
		const char *when = api_str(c, "whenUnsatisfiable");
		if (when && !strcmp(when, "ScheduleAnyway"))
			return true;
	}
	return false;
}

struct gpu_node *api_node_decode(const cJSON *node, char *err, size_t errlen)
{
	const char *name = api_str(api_path(node, "metadata"), "name");
	if (!name || !*name) {
		snprintf(err, errlen, "Node without metadata.name");
		return NULL;
	}
	struct gpu_node *n = gpu_node_new(name);
	if (!n) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	const cJSON *labels = api_path(node, "metadata.labels");
	const cJSON *l;
	cJSON_ArrayForEach(l, labels) {
		if (cJSON_IsString(l) && gpu_node_set_label(n, l->string, l->valuestring)) {
			gpu_node_free(n);
			snprintf(err, errlen, "out of memory");
			return NULL;
		}
	}
	return n;
}

const char *api_gns_node_name(const cJSON *gns)
{
	const char *name = api_str(api_path(gns, "spec"), "nodeName");
	return name && *name ? name : api_str(api_path(gns, "metadata"), "name");
}

bool api_whole(const cJSON *v, double lo, double hi, double *out)
{
	if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi ||
	    floor(v->valuedouble) != v->valuedouble)
		return false;
	*out = v->valuedouble;
	return true;
}

static bool int_member(const cJSON *obj, const char *key, double lo, double hi, double *out)
{
	return api_whole(cJSON_GetObjectItemCaseSensitive(obj, key), lo, hi, out);
}

/*
 * An optional whole-number member: absent is fine (*out untouched); present,
 * it must be in [0, hi], else -1 with err naming where.key and the value.
 */
static int count_member(const cJSON *obj, const char *where, const char *key, double hi, double *out, char *err,
			size_t errlen)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!v || api_whole(v, 0, hi, out))
		return 0;
	char *text = cJSON_PrintUnformatted(v);
	snprintf(err, errlen, "%s%s must be a non-negative integer, not %.40s", where, key, text ? text : "this");
	free(text);
	return -1;
}

/* A device's string member, interned into *out ("" when absent). -1 with err when it cannot be. */
static int device_string(const cJSON *jd, int index, const char *key, const char **out, char *err, size_t errlen)
{
	const char *s = api_str(jd, key);
	if (s && strlen(s) > INTERN_MAX_LEN) {
		snprintf(err, errlen, "status.devices[%d].%s is longer than %d bytes", index, key, INTERN_MAX_LEN);
		return -1;
	}
	if (!(*out = intern(s))) {
		snprintf(err, errlen, "status.devices[%d].%s: more than %d distinct device strings in this process, or out of memory",
			 index, key, INTERN_MAX_STRINGS);
		return -1;
	}
	return 0;
}

static int decode_device(const cJSON *jd, int index, struct gpu_node *n, char *err, size_t errlen)
{
	struct gpu_device d;
	struct gpu_device_info in;
	memset(&d, 0, sizeof(d));
	memset(&in, 0, sizeof(in));
	d.island = -1;
	double num;
	if (!int_member(jd, "id", 0, 1e6, &num)) {
		snprintf(err, errlen, "status.devices[%d].id must be a non-negative integer", index);
		return -1;
	}
	d.id = (int)num;
	if (gpu_node_find_device(n, d.id) >= 0) {
		snprintf(err, errlen, "status.devices[%d].id %d is listed twice", index, d.id);
		return -1;
	}
	const char *s;
	if ((s = api_str(jd, "vendor")) && !gpu_vendor_parse(s, &d.vendor)) {
		char names[128];
		vendor_names_list(names, sizeof(names));
		snprintf(err, errlen, "status.devices[%d].vendor '%s' is not %s", index, s, names);
		return -1;
	}
	d.health = GPU_HEALTHY;
	if ((s = api_str(jd, "health")) && !gpu_health_parse(s, &d.health)) {
		snprintf(err, errlen, "status.devices[%d].health '%s' is not Healthy, Unhealthy or Unknown",
			 index, s);
		return -1;
	}
	char where[48];
	snprintf(where, sizeof(where), "status.devices[%d].", index);
	num = 0;
	if (count_member(jd, where, "memoryMiB", 4294967295.0, &num, err, errlen))
		return -1;
	d.memory_mib = (uint32_t)num;
	in.vendor_index = int_member(jd, "index", 0, 1e6, &num) ? (int)num : d.id;
	if ((s = api_str(jd, "uuid")) && strlen(s) > GPU_UUID_MAX) {
		/* refused, not cut: cut, it would name another device to the container */
		snprintf(err, errlen, "status.devices[%d].uuid is longer than %d bytes", index, GPU_UUID_MAX);
		return -1;
	}
	in.uuid = s;
	if (device_string(jd, index, "model", &in.model, err, errlen) ||
	    device_string(jd, index, "architecture", &in.arch, err, errlen) ||
	    device_string(jd, index, "driverVersion", &in.driver, err, errlen) ||
	    device_string(jd, index, "migProfile", &in.mig_profile, err, errlen))
		return -1;
	d.external = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(jd, "inUseBy")) > 0;
	const char *island = api_str(jd, "island");
	if (island && *island) {
		const cJSON *bw = cJSON_GetObjectItemCaseSensitive(jd, "bandwidthGBps");
		d.island = gpu_node_island(n, island, cJSON_IsNumber(bw) ? bw->valuedouble : 0);
		if (d.island < 0) {
			snprintf(err, errlen, "more than %d islands", GPU_MAX_ISLANDS);
			return -1;
		}
	}
	if (gpu_node_add_device(n, &d, &in)) {
		snprintf(err, errlen, "more than %d devices", GPU_MAX_DEVICES);
		return -1;
	}
	return 0;
}

int api_gns_decode(const cJSON *gns, struct gpu_node *n, const char **node_name,
		   char *err, size_t errlen)
{
	*node_name = api_gns_node_name(gns);
	if (!*node_name || !**node_name) {
		snprintf(err, errlen, "GpuNodeStatus without spec.nodeName or metadata.name");
		return -1;
	}
	const cJSON *status = api_path(gns, "status");
	double slots = 0;
	if (cJSON_GetObjectItemCaseSensitive(status, "shareSlots") && !int_member(status, "shareSlots", 1, 1000, &slots)) {
		snprintf(err, errlen, "status.shareSlots must be a whole number 1..1000");
		return -1;
	}
	n->share_slots = (int)slots;
	/* Counts the agent writes; not used here, but a wrong one says the object is not to be trusted. */
	double count;
	if (count_member(status, "status.", "total", 1e6, &count, err, errlen) ||
	    count_member(status, "status.", "free", 1e6, &count, err, errlen))
		return -1;
	const cJSON *devs = api_path(gns, "status.devices");
	if (devs && !cJSON_IsArray(devs)) {
		snprintf(err, errlen, "status.devices must be a list");
		return -1;
	}
	int i = 0;
	const cJSON *jd;
	cJSON_ArrayForEach(jd, devs) {
		if (!cJSON_IsObject(jd)) {
			snprintf(err, errlen, "status.devices[%d] must be an object", i);
			return -1;
		}
		if (decode_device(jd, i++, n, err, errlen))
			return -1;
	}
	return 0;
}

/* Whether the array at path of o has an element whose string key is value. */
static bool array_has(const cJSON *o, const char *path, const char *key, const char *value)
{
	const cJSON *e;
	cJSON_ArrayForEach(e, api_path(o, path)) {
		const char *s = api_str(e, key);
		if (s && !strcmp(s, value))
			return true;
	}
	return false;
}

bool api_group_serves(const cJSON *apigroup, const char *version)
{
	return array_has(apigroup, "versions", "version", version);
}

bool api_resource_list_has(const cJSON *list, const char *resource)
{
	return array_has(list, "resources", "name", resource);
}
