/* The mutating admission webhook: AdmissionReview v1 in, RFC 6902 JSON patch out. */
#include "webhook.h"
#include "base64.h"
#include "jsonarena.h"
#include "log.h"
#include "vendor.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REVIEW_API "admission.k8s.io/v1"
#define REVIEW_KIND "AdmissionReview"
/* A patch is about 600 bytes per container; this is far more than any pod needs. */
#define PATCH_CAP ((size_t)4 << 20)
#define PATH_CAP 1024

struct webhook {
	struct api_resources res;
	char marker[API_NAME_MAX];
	char system_namespaces[WEBHOOK_NAMESPACES_MAX];
	char extender_user[API_NAME_MAX];
	struct webhook_opts o;        /* points at the members above */
};

/*
 * The annotations only the extender's binding writes, besides the vendors'
 * lists. The variables every container of a GPU pod gets, those a pod may
 * not set, and the host paths it may not mount are the vendor table's
 * (vendor.h).
 */
static const char *const allocation_annotations[] = { ANN_ALLOCATED, ANN_UUIDS, ANN_ALLOCATION_VERSION };
static const char *const share_annotations[] = { ANN_SHARED_MEMORY, ANN_SHARED_CORE };

/* Annotations with this prefix make containerd or CRI-O inject CDI devices. */
#define CDI_ANNOTATION_PREFIX "cdi.k8s.io/"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
/* Where a container names its resources; extended resources must agree in both. */
static const char *const resource_lists[] = { "limits", "requests" };
static const char *const container_lists[] = { "containers", "initContainers", "ephemeralContainers" };

/* ---- lifecycle ----------------------------------------------------------- */

struct webhook *webhook_new(const struct webhook_opts *opts)
{
	struct webhook *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	if (opts->res)
		w->res = *opts->res;
	snprintf(w->marker, sizeof(w->marker), "%s", opts->marker_resource ? opts->marker_resource : "");
	snprintf(w->system_namespaces, sizeof(w->system_namespaces), "%s",
		 opts->system_namespaces ? opts->system_namespaces : "");
	snprintf(w->extender_user, sizeof(w->extender_user), "%s",
		 opts->extender_user ? opts->extender_user : WEBHOOK_EXTENDER_USER);
	w->o = *opts;
	w->o.res = &w->res;
	w->o.extender_user = w->extender_user;
	w->o.marker_resource = w->marker;
	w->o.system_namespaces = w->system_namespaces;
	return w;
}

void webhook_free(struct webhook *w)
{
	free(w);
}

/* ---- the patch ------------------------------------------------------------ */

/* Operations are appended to ops; nops counts them; rc keeps the first buffer error. */
struct patcher {
	struct buf ops;
	int nops;
	int rc;
};

/* Appends "/" and token escaped as an RFC 6901 reference token (~ -> ~0, / -> ~1). */
static int ptr_add(struct buf *b, const char *token)
{
	int rc = buf_addc(b, '/');
	for (const char *s = token; !rc && *s; s++) {
		if (*s == '~')
			rc = buf_adds(b, "~0");
		else if (*s == '/')
			rc = buf_adds(b, "~1");
		else
			rc = buf_addc(b, *s);
	}
	return rc;
}

/* One {"op":verb,"path":path[,"value":value]}; value is JSON text, NULL for a remove. */
static void op_append(struct patcher *p, const char *verb, struct buf *path, const char *value)
{
	if (p->rc)
		return;
	int rc = buf_printf(&p->ops, "%s{\"op\":\"%s\",\"path\":", p->nops ? "," : "[", verb);
	if (!rc)
		rc = buf_add_json_str(&p->ops, buf_cstr(path));
	if (!rc && value)
		rc = buf_adds(&p->ops, ",\"value\":");
	if (!rc && value)
		rc = buf_adds(&p->ops, value);
	if (!rc)
		rc = buf_addc(&p->ops, '}');
	p->rc = rc;
	p->nops++;
}

static void op_add(struct patcher *p, struct buf *path, const char *value)
{
	op_append(p, "add", path, value);
}

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* The env entry for variable e: a downward-API reference to its annotation. */
static int env_value(struct buf *out, const struct vendor_env *e)
{
	char field[API_NAME_MAX + 32];
	snprintf(field, sizeof(field), "metadata.annotations['%s']", e->annotation);
	int rc = buf_adds(out, "{\"name\":");
	if (!rc)
		rc = buf_add_json_str(out, e->name);
	if (!rc)
		rc = buf_adds(out, ",\"valueFrom\":{\"fieldRef\":{\"apiVersion\":\"v1\",\"fieldPath\":");
	if (!rc)
		rc = buf_add_json_str(out, field);
	if (!rc)
		rc = buf_adds(out, "}}}");
	return rc;
}

static bool env_has(const cJSON *env, const char *name)
{
	const cJSON *e;
	cJSON_ArrayForEach(e, env) {
		const char *n = api_str(e, "name");
		if (n && !strcmp(n, name))
			return true;
	}
	return false;
}

/* Adds the missing variables to each container of spec.<field> ("containers", "initContainers"). */
static int patch_env(struct patcher *p, const cJSON *spec, const char *field, char *err, size_t errlen)
{
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(spec, field);
	if (!list || cJSON_IsNull(list))
		return 0;
	if (!cJSON_IsArray(list))
		return fail(err, errlen, "spec.%s is not a list", field);
	struct buf path, value;
	buf_init(&path, PATH_CAP);
	buf_init(&value, PATCH_CAP);
	int i = 0, rc = 0;
	const cJSON *ctr;
	cJSON_ArrayForEach(ctr, list) {
		if (!cJSON_IsObject(ctr)) {
			rc = fail(err, errlen, "spec.%s[%d] is not an object", field, i);
			break;
		}
		const cJSON *env = cJSON_GetObjectItemCaseSensitive(ctr, "env");
		if (env && !cJSON_IsNull(env) && !cJSON_IsArray(env)) {
			rc = fail(err, errlen, "spec.%s[%d].env is not a list", field, i);
			break;
		}
		/* With no env list, add the whole list: ".../env/-" would fail to apply. */
		bool whole = !cJSON_IsArray(env);
		int added = 0;
		buf_clear(&value);
		const struct vendor_env *e;
		for (size_t k = 0; (e = vendor_env_at(k)) && !p->rc; k++) {
			if (env_has(env, e->name))
				continue;
			if (whole) {
				p->rc = buf_addc(&value, added ? ',' : '[');
				if (!p->rc)
					p->rc = env_value(&value, e);
			} else {
				buf_clear(&path);
				buf_clear(&value);
				p->rc = buf_printf(&path, "/spec/%s/%d/env/-", field, i);
				if (!p->rc)
					p->rc = env_value(&value, e);
				op_add(p, &path, buf_cstr(&value));
			}
			added++;
		}
		if (whole && added && !p->rc) {
			buf_clear(&path);
			p->rc = buf_addc(&value, ']');
			if (!p->rc)
				p->rc = buf_printf(&path, "/spec/%s/%d/env", field, i);
			op_add(p, &path, buf_cstr(&value));
		}
		i++;
	}
	buf_release(&path);
	buf_release(&value);
	return rc;
}

/* True if the container names one of the GPU resources in its limits or requests. */
static bool container_asks_gpu(const cJSON *ctr, const struct api_resources *res)
{
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(ctr, "resources");
	for (size_t k = 0; k < 2; k++) {
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, resource_lists[k]);
		if (!cJSON_IsObject(m))
			continue;
		const cJSON *q;
		cJSON_ArrayForEach(q, m)
			if (q->string && api_resources_has(res, q->string))
				return true;
	}
	return false;
}

static bool pod_asks_gpu_resource(const cJSON *spec, const struct api_resources *res)
{
	static const char *const fields[] = { "containers", "initContainers" };
	if (!res)
		return false;
	for (size_t k = 0; k < 2; k++) {
		const cJSON *list = cJSON_GetObjectItemCaseSensitive(spec, fields[k]);
		const cJSON *ctr;
		if (!cJSON_IsArray(list))
			continue;
		cJSON_ArrayForEach(ctr, list) {
			if (container_asks_gpu(ctr, res))
				return true;
		}
	}
	return false;
}

/* The gpu.scheduling/managed=true label, unless it is there. */
static int patch_label(struct patcher *p, const cJSON *pod, char *err, size_t errlen)
{
	const cJSON *meta = cJSON_GetObjectItemCaseSensitive(pod, "metadata");
	const cJSON *labels = cJSON_GetObjectItemCaseSensitive(meta, "labels");
	const char *cur = api_str(labels, LABEL_MANAGED);
	if (cur && !strcmp(cur, "true"))
		return 0;
	if (meta && !cJSON_IsObject(meta))
		return fail(err, errlen, "metadata is not an object");
	struct buf path, value;
	buf_init(&path, PATH_CAP);
	buf_init(&value, PATH_CAP);
	int rc;
	if (cJSON_IsObject(labels)) {
		rc = buf_adds(&path, "/metadata/labels");
		if (!rc)
			rc = ptr_add(&path, LABEL_MANAGED);
		if (!rc)
			rc = buf_adds(&value, "\"true\"");
	} else {
		rc = buf_adds(&path, meta ? "/metadata/labels" : "/metadata");
		if (!rc)
			rc = buf_adds(&value, meta ? "{" : "{\"labels\":{");
		if (!rc)
			rc = buf_add_json_str(&value, LABEL_MANAGED);
		if (!rc)
			rc = buf_adds(&value, meta ? ":\"true\"}" : ":\"true\"}}");
	}
	if (rc)
		p->rc = rc;
	else
		op_add(p, &path, buf_cstr(&value));
	buf_release(&path);
	buf_release(&value);
	return 0;
}

/*
 * name: value (a quantity) in resources.limits and resources.requests of
 * spec.<field>[i], unless it is there already. Extended resources need
 * both to agree, so both get it.
 */
static void patch_resource(struct patcher *p, const char *field, int i, const cJSON *ctr, const char *name,
			   const char *value)
{
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(ctr, "resources");
	struct buf path, val;
	buf_init(&path, PATH_CAP);
	buf_init(&val, PATH_CAP);
	int rc = 0;
	if (!cJSON_IsObject(res)) {
		rc = buf_printf(&path, "/spec/%s/%d/resources", field, i);
		for (size_t k = 0; k < 2 && !rc; k++) {
			rc = buf_printf(&val, "%s\"%s\":{", k ? "," : "{", resource_lists[k]);
			if (!rc)
				rc = buf_add_json_str(&val, name);
			if (!rc)
				rc = buf_addc(&val, ':');
			if (!rc)
				rc = buf_add_json_str(&val, value);
			if (!rc)
				rc = buf_addc(&val, '}');
		}
		if (!rc)
			rc = buf_addc(&val, '}');
		if (!rc)
			op_add(p, &path, buf_cstr(&val));
	}
	for (size_t k = 0; k < 2 && !rc && cJSON_IsObject(res); k++) {
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(res, resource_lists[k]);
		const char *cur = api_str(m, name);
		if (cur && !strcmp(cur, value))
			continue;
		buf_clear(&path);
		buf_clear(&val);
		rc = buf_printf(&path, "/spec/%s/%d/resources/%s", field, i, resource_lists[k]);
		if (cJSON_IsObject(m)) {
			if (!rc)
				rc = ptr_add(&path, name);
			if (!rc)
				rc = buf_add_json_str(&val, value);
		} else {
			if (!rc)
				rc = buf_addc(&val, '{');
			if (!rc)
				rc = buf_add_json_str(&val, name);
			if (!rc)
				rc = buf_addc(&val, ':');
			if (!rc)
				rc = buf_add_json_str(&val, value);
			if (!rc)
				rc = buf_addc(&val, '}');
		}
		if (!rc)
			op_add(p, &path, buf_cstr(&val));
	}
	if (rc)
		p->rc = rc;
	buf_release(&path);
	buf_release(&val);
}

/* The container's quantity of any of names (limits first), as text; NULL when none. */
static const char *quantity_of(const cJSON *ctr, const char (*names)[API_NAME_MAX], int n)
{
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(ctr, "resources");
	for (int k = 0; k < n; k++) {
		const char *q = api_str(cJSON_GetObjectItemCaseSensitive(res, "limits"), names[k]);
		if (!q)
			q = api_str(cJSON_GetObjectItemCaseSensitive(res, "requests"), names[k]);
		if (q)
			return q;
	}
	return NULL;
}

static bool container_has_any(const cJSON *ctr, const char (*names)[API_NAME_MAX], int n)
{
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(ctr, "resources");
	for (size_t l = 0; l < 2; l++)
		for (int k = 0; k < n; k++)
			if (cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, resource_lists[l]), names[k]))
				return true;
	return false;
}

/*
 * A container that asks gpu-memory or gpu-core is a share, which kubelet
 * counts in share slots: it gets gpu-share (its gpu count, else 1) and
 * loses gpu, which would make kubelet hand it whole GPUs.
 */
static void patch_shares(struct patcher *p, const cJSON *spec, const struct api_resources *res)
{
	static const char *const fields[] = { "containers", "initContainers" };
	struct buf path;
	buf_init(&path, PATH_CAP);
	for (size_t f = 0; f < 2; f++) {
		int i = 0;
		const cJSON *ctr;
		cJSON_ArrayForEach(ctr, cJSON_GetObjectItemCaseSensitive(spec, fields[f])) {
			bool share = container_has_any(ctr, res->memory, res->nmemory) ||
				     container_has_any(ctr, res->core, res->ncore);
			if (share && !container_has_any(ctr, res->share, res->nshare)) {
				const char *n = quantity_of(ctr, res->gpu, res->ngpu);
				patch_resource(p, fields[f], i, ctr, res->share[0], n ? n : "1");
			}
			for (size_t l = 0; share && l < 2; l++) {
				const cJSON *m = cJSON_GetObjectItemCaseSensitive(
					cJSON_GetObjectItemCaseSensitive(ctr, "resources"), resource_lists[l]);
				/* one remove per member, so that a repeated key goes too */
				const cJSON *q, *members = cJSON_IsObject(m) ? m : NULL;
				cJSON_ArrayForEach(q, members) {
					if (!q->string || !api_names_has(res->gpu, res->ngpu, q->string))
						continue;
					buf_clear(&path);
					p->rc = p->rc ? p->rc : buf_printf(&path, "/spec/%s/%d/resources/%s", fields[f], i, resource_lists[l]);
					p->rc = p->rc ? p->rc : ptr_add(&path, q->string);
					op_append(p, "remove", &path, NULL);
				}
			}
			i++;
		}
	}
	buf_release(&path);
}

/*
 * What a claim-only pod's first container gets so that kube-scheduler sends
 * it to the extender and kubelet counts it: the claim's count of gpu
 * (Exclusive, MIG) or gpu-share (Shared) when the claim can be read, which
 * makes kubelet's record name its devices; else the marker ticket.
 */
static void patch_claim_count(struct patcher *p, const cJSON *pod, const char *ns, const cJSON *containers,
			      const struct webhook_opts *o)
{
	const cJSON *c0 = cJSON_GetArrayItem(containers, 0);
	if (!cJSON_IsObject(c0))
		return;
	const char *name = api_annotation(pod, ANN_CLAIM);
	struct claim c;
	claim_init(&c);
	if (o->claim_of && ns && o->claim_of(o->claim_ctx, ns, name, &c) == 0 && c.count > 0) {
		char count[16];
		snprintf(count, sizeof(count), "%d", c.count);
		patch_resource(p, "containers", 0, c0, c.mode == CLAIM_SHARED ? o->res->share[0] : o->res->gpu[0], count);
	} else if (o->marker_resource && o->marker_resource[0]) {
		patch_resource(p, "containers", 0, c0, o->marker_resource, "1");
	}
	claim_release(&c);
}

int webhook_patch(const cJSON *pod, const char *ns, const struct webhook_opts *o, struct buf *patch, char *err,
		  size_t errlen)
{
	const cJSON *spec = cJSON_GetObjectItemCaseSensitive(pod, "spec");
	const cJSON *containers = cJSON_GetObjectItemCaseSensitive(spec, "containers");
	if (!cJSON_IsObject(pod) || !cJSON_IsObject(spec) || !cJSON_IsArray(containers))
		return fail(err, errlen, "the object has no spec.containers list: not a Pod");
	bool claim = api_annotation(pod, ANN_CLAIM) != NULL;
	bool resources = pod_asks_gpu_resource(spec, o->res);
	if (!claim && !resources)
		return 0;
	if (!ns)
		ns = api_str(api_path(pod, "metadata"), "namespace");

	struct patcher p;
	memset(&p, 0, sizeof(p));
	buf_init(&p.ops, patch->cap);
	int rc = 0;
	if (!o->no_env)
		rc = patch_env(&p, spec, "containers", err, errlen);
	if (!rc && !o->no_env)
		rc = patch_env(&p, spec, "initContainers", err, errlen);
	if (!rc)
		rc = patch_label(&p, pod, err, errlen);
	if (!rc && resources)
		patch_shares(&p, spec, o->res);
	if (!rc && !resources)
		patch_claim_count(&p, pod, ns, containers, o);
	if (!rc && !p.rc && p.nops)
		p.rc = buf_addc(&p.ops, ']');
	if (!rc && !p.rc && p.nops)
		p.rc = buf_add(patch, p.ops.data, p.ops.len);
	if (!rc && p.rc == BUF_ETOOBIG)
		rc = fail(err, errlen, "the patch is over the size limit of %zu bytes", patch->cap);
	else if (!rc && p.rc)
		rc = fail(err, errlen, "out of memory building the patch");
	buf_release(&p.ops);
	return rc;
}

/* ---- the bypass ------------------------------------------------------------ */

static bool in_comma_list(const char *list, const char *s)
{
	size_t n = strlen(s);
	for (const char *p = list; p && *p;) {
		p += strspn(p, " ,");
		size_t len = strcspn(p, " ,");
		if (len == n && !strncmp(p, s, n))
			return true;
		p += len;
	}
	return false;
}

static bool is_privileged(const cJSON *ctr)
{
	return cJSON_IsTrue(api_path(ctr, "securityContext.privileged"));
}

/* A privileged pod in an allow-listed namespace (a vendor's own device plugin, DCGM). */
static bool trusted(const cJSON *pod, const char *ns, const struct webhook_opts *o)
{
	if (!ns || !in_comma_list(o->system_namespaces, ns))
		return false;
	for (size_t f = 0; f < NELEM(container_lists); f++) {
		const cJSON *ctr;
		cJSON_ArrayForEach(ctr, api_path(api_path(pod, "spec"), container_lists[f]))
			if (is_privileged(ctr))
				return true;
	}
	return false;
}

/* The webhook's own entry: a downward-API reference to the binding's annotation for that variable. */
static bool injected_form(const cJSON *e, const char *name)
{
	const char *path = api_str(api_path(e, "valueFrom.fieldRef"), "fieldPath");
	char want[API_NAME_MAX + 32];
	const struct vendor_env *v;
	for (size_t k = 0; path && (v = vendor_env_at(k)); k++) {
		if (strcmp(v->name, name))
			continue;
		snprintf(want, sizeof(want), "metadata.annotations['%s']", v->annotation);
		return !strcmp(path, want);
	}
	return false;
}

/* The first GPU-selecting variable a container sets itself, or NULL. */
static const char *selecting_var(const cJSON *ctr)
{
	const cJSON *e;
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(ctr, "env")) {
		const char *name = api_str(e, "name");
		for (int v = 1; name && v <= VENDOR_COUNT; v++)
			for (const char *const *s = vendor_get((enum gpu_vendor)v)->selecting_env; *s; s++)
				if (!strcmp(name, *s) && !injected_form(e, name))
					return name;
	}
	return NULL;
}

/* Whether annotation key is set or changed by this write (old NULL: a CREATE, where any value is new). */
static bool annotation_changed(const cJSON *pod, const cJSON *old, const char *key)
{
	const char *now = api_annotation(pod, key), *before = old ? api_annotation(old, key) : NULL;
	return now ? !before || strcmp(now, before) : before != NULL;
}

/* The first annotation only the binding writes that this write sets or changes, or NULL. */
static const char *binding_annotation_changed(const cJSON *pod, const cJSON *old)
{
	const struct vendor_env *e;
	for (size_t k = 0; k < NELEM(allocation_annotations); k++)
		if (annotation_changed(pod, old, allocation_annotations[k]))
			return allocation_annotations[k];
	for (size_t k = 0; (e = vendor_env_at(k)); k++)
		if (annotation_changed(pod, old, e->annotation))
			return e->annotation;
	for (size_t k = 0; k < NELEM(share_annotations); k++)
		if (annotation_changed(pod, old, share_annotations[k]))
			return share_annotations[k];
	return NULL;
}

/*
 * path normalised as the API server's CEL can do it: "" and "." segments
 * dropped, one "/" before and after each segment ("/" for the root), ".."
 * kept (resolving it needs the host's symlinks). False when it does not fit.
 */
static bool lexical_path(const char *path, char *out, size_t cap)
{
	size_t n = 0;
	out[n++] = '/';
	for (const char *p = path; *p;) {
		size_t len = strcspn(p, "/");
		if (len && !(len == 1 && p[0] == '.')) {
			if (n + len + 2 > cap)
				return false;
			memcpy(out + n, p, len);
			n += len;
			out[n++] = '/';
		}
		p += len;
		p += *p == '/';
	}
	out[n] = '\0';
	return true;
}

static bool has_prefix(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

/*
 * Whether normalised path n is at or under runtime device list dir (a
 * "/var/run/..." dir counts under /run too: images often link /var/run
 * there), or goes up ("/../") into a directory of that name.
 */
static bool under_device_list(const char *n, const char *dir)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/", dir);
	if (has_prefix(n, p))
		return true;
	if (has_prefix(dir, "/var/run/")) {
		snprintf(p, sizeof(p), "%s/", dir + strlen("/var"));
		if (has_prefix(n, p))
			return true;
	}
	const char *base = strrchr(dir, '/');
	snprintf(p, sizeof(p), "%s/", base ? base : dir);
	return strstr(n, "/../") && strstr(n, p);
}

/* The vendor whose runtime device list holds normalised mount destination n, or NULL. */
static const struct vendor *device_list_mount(const char *n)
{
	for (int v = 1; v <= VENDOR_COUNT; v++) {
		const struct vendor *e = vendor_get((enum gpu_vendor)v);
		if (e->runtime_dir[0] && under_device_list(n, e->runtime_dir))
			return e;
	}
	return NULL;
}

/*
 * A normalised host path that is a GPU device file or a directory holding
 * them: the root, /dev, the vendors' nodes and device-list directories,
 * /dev/char (links to every device), and the /proc links kubelet itself
 * would follow into the host's root or a process's open files.
 */
static bool gpu_host_path(const char *n)
{
	if (!strcmp(n, "/") || !strcmp(n, "/dev/") || strstr(n, "/../") || has_prefix(n, "/dev/char/"))
		return true;
	for (int v = 1; v <= VENDOR_COUNT; v++) {
		const struct vendor *e = vendor_get((enum gpu_vendor)v);
		for (const char *const *p = e->host_paths; *p; p++)
			if (has_prefix(n, *p))
				return true;
		if (e->runtime_dir[0] && under_device_list(n, e->runtime_dir))
			return true;
	}
	if (!has_prefix(n, "/proc/"))
		return false;
	const char *rest = strchr(n + strlen("/proc/"), '/');
	return rest && (has_prefix(rest, "/root/") || has_prefix(rest, "/cwd/") || has_prefix(rest, "/fd/") ||
			has_prefix(rest, "/map_files/"));
}

/*
 * A container mounting into the device list, or (CREATE only: volumes do
 * not change) a hostPath volume of GPU devices: 1 with why, else 0. On an
 * UPDATE only ephemeral containers can add mounts. A path too long to
 * normalise here (over 4 KiB) is refused rather than let through.
 */
static int device_mounts(const cJSON *spec, bool create, char *why, size_t len)
{
	char n[4200];
	for (size_t f = create ? 0 : NELEM(container_lists) - 1; f < NELEM(container_lists); f++) {
		const cJSON *ctr, *m;
		cJSON_ArrayForEach(ctr, cJSON_GetObjectItemCaseSensitive(spec, container_lists[f])) {
			cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(ctr, "volumeMounts")) {
				const char *path = api_str(m, "mountPath"), *cname = api_str(ctr, "name");
				const struct vendor *v = NULL;
				if (!path || (lexical_path(path, n, sizeof(n)) && !(v = device_list_mount(n))))
					continue;
				/* a path too long to normalise: the first vendor with a device list names it */
				for (int k = 1; !v && k <= VENDOR_COUNT; k++)
					if (vendor_get((enum gpu_vendor)k)->runtime_dir[0])
						v = vendor_get((enum gpu_vendor)k);
				snprintf(why, len, "container %s mounts a volume at %s, inside the %s runtime's device list "
					 "(%s), which hands the container the GPUs those mounts name: GPUs are "
					 "given by the gpu-scheduler; ask for gpu.scheduling/gpu and mount elsewhere (docs/security.md)",
					 cname ? cname : "?", path, v ? v->title : "container", v ? v->runtime_dir : "?");
				return 1;
			}
		}
	}
	const cJSON *vol, *volumes = create ? cJSON_GetObjectItemCaseSensitive(spec, "volumes") : NULL;
	cJSON_ArrayForEach(vol, volumes) {
		const char *path = api_str(api_path(vol, "hostPath"), "path"), *vname = api_str(vol, "name");
		if (!path || (lexical_path(path, n, sizeof(n)) && !gpu_host_path(n)))
			continue;
		snprintf(why, len, "volume %s is hostPath %s, a GPU device or a directory that holds them: GPUs are given "
			 "by the gpu-scheduler; ask for gpu.scheduling/gpu and remove the volume (a node tool that needs it "
			 "runs privileged in a namespace the operator trusts, docs/security.md)", vname ? vname : "?", path);
		return 1;
	}
	return 0;
}

int webhook_bypass(const cJSON *pod, const cJSON *old, const char *ns, const struct webhook_opts *o, char *why,
		   size_t len)
{
	if (!ns)
		ns = api_str(api_path(pod, "metadata"), "namespace");
	if (trusted(pod, ns, o))
		return 0;
	const cJSON *spec = api_path(pod, "spec");
	if (device_mounts(spec, !old, why, len))
		return 1;
	for (size_t f = 0; f < NELEM(container_lists); f++) {
		const cJSON *ctr;
		cJSON_ArrayForEach(ctr, cJSON_GetObjectItemCaseSensitive(spec, container_lists[f])) {
			const char *var = selecting_var(ctr);
			if (var) {
				const char *cname = api_str(ctr, "name");
				snprintf(why, len, "container %s sets %s itself: GPUs are given by the gpu-scheduler; ask for "
					 "gpu.scheduling/gpu (or name a GpuClaim) and remove the variable (docs/node.md)",
					 cname ? cname : "?", var);
				return 1;
			}
		}
	}
	const cJSON *ann;
	cJSON_ArrayForEach(ann, api_path(pod, "metadata.annotations")) {
		if (ann->string && !strncmp(ann->string, CDI_ANNOTATION_PREFIX, strlen(CDI_ANNOTATION_PREFIX)) &&
		    annotation_changed(pod, old, ann->string)) {
			snprintf(why, len, "annotation %s asks the runtime for CDI devices: GPUs are given by the "
				 "gpu-scheduler; ask for gpu.scheduling/gpu and remove the annotation", ann->string);
			return 1;
		}
	}
	const char *key = binding_annotation_changed(pod, old);
	if (key) {
		snprintf(why, len, "annotation %s is written by the gpu-scheduler's binding only; remove it", key);
		return 1;
	}
	return 0;
}

/* ---- what the reservation rests on ------------------------------------------ */

/* Read by the extender from the pod: changing one after CREATE changes which pods it follows or what they hold. */
static const char *const protected_labels[] = { LABEL_MANAGED, LABEL_POD_GROUP };
static const char *const protected_annotations[] = { ANN_CLAIM, ANN_POLICY };

static bool same(const char *a, const char *b)
{
	return a ? b && !strcmp(a, b) : !b;
}

/* The first protected label or annotation this UPDATE changes ("label x"), or 0. */
static int protected_change(const cJSON *pod, const cJSON *old, char *what, size_t len)
{
	for (size_t k = 0; k < NELEM(protected_labels); k++) {
		const char *now = api_label(pod, protected_labels[k]), *before = api_label(old, protected_labels[k]);
		/* managed=true added where missing (a pod created while the webhook was down) only lets the extender follow it */
		bool adds_managed = !before && now && !strcmp(protected_labels[k], LABEL_MANAGED) && !strcmp(now, "true");
		if (!same(now, before) && !adds_managed) {
			snprintf(what, len, "label %s", protected_labels[k]);
			return 1;
		}
	}
	for (size_t k = 0; k < NELEM(protected_annotations); k++) {
		if (!same(api_annotation(pod, protected_annotations[k]), api_annotation(old, protected_annotations[k]))) {
			snprintf(what, len, "annotation %s", protected_annotations[k]);
			return 1;
		}
	}
	return 0;
}

/* Whether the pod asks for GPUs: the claim annotation, or a GPU resource (configured or gpu.scheduling/). */
static bool asks_gpu(const cJSON *pod, const struct webhook_opts *o)
{
	if (api_annotation(pod, ANN_CLAIM))
		return true;
	const cJSON *spec = api_path(pod, "spec");
	if (pod_asks_gpu_resource(spec, o->res))
		return true;
	for (size_t f = 0; f < 2; f++) {
		const cJSON *ctr, *q;
		cJSON_ArrayForEach(ctr, cJSON_GetObjectItemCaseSensitive(spec, container_lists[f]))
			for (size_t l = 0; l < NELEM(resource_lists); l++)
				cJSON_ArrayForEach(q, api_path(api_path(ctr, "resources"), resource_lists[l]))
					if (q->string && (has_prefix(q->string, "gpu.scheduling/") ||
							  (o->marker_resource && !strcmp(q->string, o->marker_resource))))
						return true;
	}
	return false;
}

int webhook_protect(const cJSON *pod, const cJSON *old, const char *user, const struct webhook_opts *o, char *why,
		    size_t len)
{
	if (old) {
		const char *ext = o->extender_user ? o->extender_user : WEBHOOK_EXTENDER_USER;
		char what[API_NAME_MAX + 16];
		if ((user && !strcmp(user, ext)) || !protected_change(pod, old, what, sizeof(what)))
			return 0;
		snprintf(why, len, "%s cannot change after the pod is created: the gpu-scheduler's reservation for the pod "
			 "rests on it (without gpu.scheduling/managed the extender stops following the pod and would hand "
			 "its GPUs out again); to change it, delete the pod and create it again (docs/security.md)", what);
		return 1;
	}
	const char *node = api_str(api_path(pod, "spec"), "nodeName");
	if (!node || !node[0] || !asks_gpu(pod, o))
		return 0;
	/* A static pod's mirror, written by its node: the pod runs anyway, the mirror only shows it. */
	if (api_annotation(pod, "kubernetes.io/config.mirror") && user && has_prefix(user, "system:node:"))
		return 0;
	snprintf(why, len, "spec.nodeName %s with GPU resources: a pod that names its node skips the scheduler, so the "
		 "gpu-scheduler reserves no GPU for it and the node gives it none; remove spec.nodeName (a nodeSelector "
		 "on kubernetes.io/hostname keeps it on that node, docs/security.md)", node);
	return 1;
}

/* ---- the review ---------------------------------------------------------- */

static void review_head(struct buf *b, const char *uid)
{
	buf_adds(b, "{\"apiVersion\":\"" REVIEW_API "\",\"kind\":\"" REVIEW_KIND "\",\"response\":{\"uid\":");
	buf_add_json_str(b, uid ? uid : "");
}

/* HTTP 200, allowed:false, status code: 400 a review we cannot act on, 403 a pod the rules refuse. */
static void deny(struct http_response *resp, const char *uid, int code, const char *msg)
{
	log_warn("admission review rejected", "uid=%s code=%d error=\"%s\"", uid ? uid : "", code, LOG_Q(msg));
	resp->status = 200;
	buf_clear(&resp->body);
	review_head(&resp->body, uid);
	buf_printf(&resp->body, ",\"allowed\":false,\"status\":{\"code\":%d,\"message\":", code);
	buf_add_json_str(&resp->body, msg);
	if (buf_adds(&resp->body, "}}}\n"))
		httpd_error(resp, 500, "reply too large");
}

/* allowed:true, with the patch when there is one. */
static void allow(struct http_response *resp, const char *uid, const struct buf *patch)
{
	resp->status = 200;
	buf_clear(&resp->body);
	review_head(&resp->body, uid);
	buf_adds(&resp->body, ",\"allowed\":true");
	if (patch && patch->len) {
		buf_adds(&resp->body, ",\"patchType\":\"JSONPatch\",\"patch\":\"");
		base64_encode(patch->data, patch->len, &resp->body);
		buf_addc(&resp->body, '"');
	}
	if (buf_adds(&resp->body, "}}\n"))
		httpd_error(resp, 500, "reply too large");
}

/*
 * Decides one review: 0 with *patch filled (empty: allowed unchanged), 1
 * with msg when the rules refuse the pod, or -1 with msg saying why the
 * review is unusable. *uid is request.uid or NULL.
 */
static int decide(const struct webhook *w, const cJSON *root, const char **uid, struct buf *patch,
		  char *msg, size_t msglen)
{
	const cJSON *request = cJSON_GetObjectItemCaseSensitive(root, "request");
	*uid = api_str(request, "uid");
	if (*uid && !(*uid)[0])
		*uid = NULL;
	if (!cJSON_IsObject(root))
		return fail(msg, msglen, "the body is not a JSON object (want an AdmissionReview)");
	const char *api = api_str(root, "apiVersion"), *kind = api_str(root, "kind");
	if (!api || strcmp(api, REVIEW_API) || !kind || strcmp(kind, REVIEW_KIND))
		return fail(msg, msglen, "want apiVersion %s kind %s, got %s %s", REVIEW_API, REVIEW_KIND,
			    api ? api : "(none)", kind ? kind : "(none)");
	if (!cJSON_IsObject(request))
		return fail(msg, msglen, "the AdmissionReview has no request object");
	if (!*uid)
		return fail(msg, msglen, "request.uid is missing");
	const char *op = api_str(request, "operation");
	if (!op)
		return fail(msg, msglen, "request.operation is missing");
	const cJSON *obj = cJSON_GetObjectItemCaseSensitive(request, "object");
	const char *what = api_str(cJSON_GetObjectItemCaseSensitive(request, "kind"), "kind");
	if (!what)
		what = api_str(obj, "kind");
	const char *sub = api_str(request, "subResource");
	if (sub && !sub[0])
		sub = NULL;
	/*
	 * Ours: a pod's CREATE (checked and mutated), its UPDATE and the
	 * ephemeralcontainers UPDATE (checked only). Anything else passes unchanged.
	 */
	bool create = !strcmp(op, "CREATE") && !sub;
	bool update = !strcmp(op, "UPDATE") && (!sub || !strcmp(sub, "ephemeralcontainers"));
	if ((!create && !update) || (what && strcmp(what, "Pod")))
		return 0;
	const char *okind = api_str(obj, "kind");
	if (!cJSON_IsObject(obj))
		return fail(msg, msglen, "request.object is missing or not an object, not a Pod");
	if (okind && strcmp(okind, "Pod"))
		return fail(msg, msglen, "request.object is a %s, not a Pod", okind);
	const char *ns = api_str(request, "namespace");   /* the object may not carry it yet */
	const cJSON *old = update ? cJSON_GetObjectItemCaseSensitive(request, "oldObject") : NULL;
	if (webhook_bypass(obj, cJSON_IsObject(old) ? old : NULL, ns, &w->o, msg, msglen))
		return 1;
	/* (an UPDATE without its oldObject has nothing to compare) */
	if ((create || (!sub && cJSON_IsObject(old))) &&
	    webhook_protect(obj, create ? NULL : old, api_str(api_path(request, "userInfo"), "username"), &w->o, msg,
			    msglen))
		return 1;
	char err[256];
	if (create && webhook_patch(obj, ns, &w->o, patch, err, sizeof(err)))
		return fail(msg, msglen, "request.object: %s", err);
	if (log_enabled(LOG_INFO)) {
		struct api_pod_ref ref;
		api_pod_ref(obj, &ref);
		if (ns)
			ref.ns = ns;
		/* A pod created with generateName has no name yet. */
		const char *name = ref.name[0] ? ref.name : api_str(api_path(obj, "metadata"), "generateName");
		if (!name)
			name = "";
		if (patch->len)
			log_info("GPU pod mutated", "uid=%s namespace=%s name=%s patch_bytes=%zu", *uid, ref.ns, name,
				 patch->len);
		else
			log_debug("pod admitted unchanged", "uid=%s namespace=%s name=%s", *uid, ref.ns, name);
	}
	return 0;
}

void webhook_mutate(void *ctx, const struct http_request *req, struct http_response *resp)
{
	const struct webhook *w = ctx;
	/* Strict: no NUL inside, nothing after the value (the body is NUL-terminated). */
	cJSON *root = NULL;
	if (req->body_len && !memchr(req->body, '\0', req->body_len))
		root = cJSON_ParseWithLengthOpts(req->body, req->body_len + 1, NULL, true);
	if (!root) {
		httpd_error(resp, 400, "the body is not JSON (want an AdmissionReview %s)", REVIEW_API);
		return;
	}
	struct buf patch;
	buf_init(&patch, PATCH_CAP);
	const char *uid;
	char msg[512];
	int verdict = decide(w, root, &uid, &patch, msg, sizeof(msg));
	if (verdict)
		deny(resp, uid, verdict > 0 ? 403 : 400, msg);
	else
		allow(resp, uid, &patch);
	buf_release(&patch);
	jsonarena_delete(root);
}
