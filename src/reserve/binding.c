/*
 * The binding: the Binding POST with the allocation annotations (which the
 * API server stores with spec.nodeName in one write), and a reservation
 * made to hold the devices a bound pod's annotation names.
 */
#include "binding.h"
#include "api.h"
#include "clock.h"
#include "jsonarena.h"
#include "log.h"
#include "metrics.h"
#include "strnum.h"
#include "update.h"
#include "vendor.h"

#include <stdio.h>
#include <string.h>

/* The binding's annotations: the allocation, the UUIDs, one per visible-devices variable (vendor.h). */
static void add_annotations(struct buf *out, const struct gpu_node *n, const struct ledger_entry *e,
			    const char *node)
{
	struct buf uuids, list[VENDOR_COUNT];    /* list[v - 1]: vendor v's devices */
	buf_init(&uuids, 8192);
	for (int v = 0; v < VENDOR_COUNT; v++)
		buf_init(&list[v], 8192);
	char ids[256], alloc[512];
	alloc_ids(&e->a, ids, sizeof(ids));
	for (int k = 0; k < e->a.ndev; k++) {
		int i = gpu_node_find_device(n, alloc_id(&e->a, k));
		if (i < 0)
			continue;
		const struct gpu_device_info *in = &n->info[i];
		char idx[16];
		snprintf(idx, sizeof(idx), "%d", in->vendor_index);
		buf_printf(&uuids, "%s%s", uuids.len ? "," : "", in->uuid);
		const struct vendor *v = vendor_get(n->dev[i].vendor);
		if (!v)
			continue;
		/* UUIDs when known and the list takes them: stable across renumbering */
		const char *name = v->naming == VENDOR_NAME_UUID && in->uuid[0] ? in->uuid : idx;
		buf_printf(&list[v->id - 1], "%s%s", list[v->id - 1].len ? "," : "", name);
	}
	snprintf(alloc, sizeof(alloc), "%s:%s", node, ids);
	/* the format of the annotations below (0.2.0 wrote none: version 1) */
	buf_printf(out, "\"" ANN_ALLOCATION_VERSION "\":\"%d\",", API_ALLOCATION_VERSION);
	buf_add_json_str(out, ANN_ALLOCATED);
	buf_addc(out, ':');
	buf_add_json_str(out, alloc);
	buf_addc(out, ',');
	buf_add_json_str(out, ANN_UUIDS);
	buf_addc(out, ':');
	buf_add_json_str(out, buf_cstr(&uuids));
	const struct vendor_env *ve;
	for (size_t k = 0; (ve = vendor_env_at(k)); k++) {
		buf_addc(out, ',');
		buf_add_json_str(out, ve->annotation);
		buf_addc(out, ':');
		buf_add_json_str(out, buf_cstr(&list[ve->vendor - 1]));
	}
	if (e->a.mode == CLAIM_SHARED)
		buf_printf(out, ",\"" ANN_SHARED_MEMORY "\":\"%u\",\"" ANN_SHARED_CORE "\":\"%u\"", e->a.mem_mib,
			   e->a.core / 10);
	buf_release(&uuids);
	for (int v = 0; v < VENDOR_COUNT; v++)
		buf_release(&list[v]);
}

/*
 * Where the API server has the pod now: 0 with its node ("" while unbound)
 * and its allocation annotation ("" when none), 1 when it is gone, -1 when
 * it cannot tell.
 */
static int pod_node_now(struct reserve *r, const struct bind_request *req, char *node, size_t size, char *allocated,
			size_t asize)
{
	char path[768], err[256];
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", req->ns, req->name);
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = -1;
	if (!kube_request(r->o.client, "GET", path, NULL, NULL, 5, &resp, err, sizeof(err))) {
		if (resp.status == 404) {
			rc = 1;
		} else if (resp.status == 200) {
			cJSON *pod = cJSON_ParseWithLength(resp.body.data, resp.body.len);
			struct api_pod_ref ref;
			api_pod_ref(pod, &ref);
			const char *on = api_str(api_path(pod, "spec"), "nodeName");
			if (pod && req->uid[0] && strcmp(ref.uid, req->uid)) {
				rc = 1;                 /* another pod of that name */
			} else if (pod) {
				const char *ann = api_pod_allocated(pod, NULL, 0);
				snprintf(node, size, "%s", on ? on : "");
				snprintf(allocated, asize, "%s", ann ? ann : "");
				rc = 0;
			}
			jsonarena_delete(pod);  /* during /bind the tree is the request arena's */
		}
	}
	kube_response_release(&resp);
	return rc;
}

int binding_post(struct reserve *r, const struct bind_request *req, const struct gpu_node *n,
		 const struct ledger_entry *e, long timeout_s, char *had, size_t hadsize, char *err, size_t errlen)
{
	had[0] = '\0';
	struct buf body;
	buf_init(&body, 1 << 16);
	buf_adds(&body, "{\"apiVersion\":\"v1\",\"kind\":\"Binding\",\"metadata\":{\"name\":");
	buf_add_json_str(&body, req->name);
	buf_adds(&body, ",\"namespace\":");
	buf_add_json_str(&body, req->ns);
	if (req->uid[0]) {
		buf_adds(&body, ",\"uid\":");
		buf_add_json_str(&body, req->uid);
	}
	if (e && req->claim->pod_version[0]) {
		/* The pod as it was before this reservation was written: once the reaper has
		 * fenced the pod to release it, this binding is refused, however late it comes. */
		buf_adds(&body, ",\"resourceVersion\":");
		buf_add_json_str(&body, req->claim->pod_version);
	}
	if (e) {
		buf_adds(&body, ",\"annotations\":{");
		add_annotations(&body, n, e, req->node);
		buf_addc(&body, '}');
	}
	buf_adds(&body, "},\"target\":{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"name\":");
	buf_add_json_str(&body, req->node);
	buf_adds(&body, "}}");
	char path[768], msg[512], on[256] = "";
	/* (the API server's own deadline too: it gives the binding up when the client does) */
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s/binding?timeout=%lds", req->ns, req->name, timeout_s);
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = kube_request(r->o.client, "POST", path, buf_cstr(&body), NULL, timeout_s, &resp, err, errlen);
	if (!rc && resp.status != 201 && resp.status != 200) {
		kube_status_message(&resp, msg, sizeof(msg));
		char want[300];
		snprintf(want, sizeof(want), "already assigned to node \"%s\"", req->node);
		snprintf(err, errlen, "binding the pod: HTTP %ld: %s", resp.status, msg);
		if (resp.status == 409) {
			/* Bound already (a retried bind, or an earlier one's binding carried out late), or
			 * the pod changed since it was read (the precondition): where it is now says. */
			int known = pod_node_now(r, req, on, sizeof(on), had, hadsize);
			if (!known && !strcmp(on, req->node))
				rc = 0;
			else if (known < 0 && strstr(msg, want))
				rc = 0;         /* (its devices unread: as reserved) */
			else
				rc = known < 0 ? BINDING_UNKNOWN : BINDING_REFUSED;
		} else {
			rc = resp.status >= 500 ? BINDING_UNKNOWN : BINDING_REFUSED;
		}
	} else if (rc) {
		rc = BINDING_UNKNOWN;
	}
	if (rc == BINDING_UNKNOWN) {
		int known = pod_node_now(r, req, on, sizeof(on), had, hadsize);
		if (!known && !strcmp(on, req->node)) {
			log_info("the binding went through; its answer was lost", "pod=%s/%s node=%s error=\"%s\"", req->ns,
				 req->name, req->node, LOG_Q(err));
			rc = 0;
		} else if (known > 0 || (!known && on[0])) {
			rc = BINDING_REFUSED;   /* the pod is gone, or on another node */
		}
	}
	if (rc || !e || strcmp(on, req->node))
		had[0] = '\0';         /* (the annotation only of a pod bound here by this binding's try) */
	kube_response_release(&resp);
	buf_release(&body);
	return rc;
}

void binding_adopt(struct reserve *r, const struct bind_request *req, const struct alloc *reserved, uint32_t token,
		   const struct gpu_node *devices, const char *had, char *ids, size_t idsize)
{
	struct resv_id mine = resv_id_of(reserved);
	struct adopt_ctx ac = { .r = r, .uid = req->uid, .only_id = &mine, .token = token, .want = *reserved,
				.devices = devices };
	char err[256] = "";
	if (reserve_parse_allocated(had, req->node, &ac.want)) {
		log_error("a bound pod's allocation annotation names no devices of its node; its reservation stays as reserved",
			  "pod=%s/%s node=%s allocated=\"%s\" reserved=%s", req->ns, req->name, req->node, LOG_Q(had), ids);
		return;
	}
	char want[256];
	alloc_ids(&ac.want, want, sizeof(want));
	if (!strcmp(want, ids))
		return;
	int rc = reserve_ledger_update(r, req->node, reserve_edit_adopt, &ac, err, sizeof(err));
	if (rc == 0) {
		log_warn("the pod was bound already with other devices; its reservation now holds those",
			 "pod=%s/%s node=%s gpus=%s reserved=%s", req->ns, req->name, req->node, want, ids);
		cache_lock(r->o.cache);
		cache_remove_alloc(r->o.cache, req->uid, req->node);
		cache_add_alloc(r->o.cache, req->node, &ac.now);
		cache_unlock(r->o.cache);
		snprintf(ids, idsize, "%s", want);
	} else if (ac.clash) {
		log_error("a bound pod's GPUs are reserved by another pod; both stay held, check the ledger",
			  "pod=%s/%s node=%s gpus=%s reserved=%s", req->ns, req->name, req->node, want, ids);
	} else {
		log_warn("cannot make a bound pod's reservation hold its devices now; the reaper will",
			 "pod=%s/%s node=%s gpus=%s reserved=%s error=\"%s\"", req->ns, req->name, req->node, want, ids,
			 LOG_Q(err));
	}
}

int reserve_parse_allocated(const char *allocated, const char *node, struct alloc *a)
{
	const char *ids = alloc_ids_on(allocated, node);
	if (!ids)
		return -1;
	a->ndev = 0;
	a->id_base = 0;
	char num[16];
	for (const char *s = ids; *s;) {
		size_t len = strcspn(s, ",");
		int id;
		snprintf(num, sizeof(num), "%.*s", (int)(len < sizeof(num) - 1 ? len : sizeof(num) - 1), s);
		if (!strnum_int(num, 0, 1000000, &id) || alloc_add_id(a, id))
			return -1;
		s += len + (s[len] == ',');
	}
	return a->ndev ? 0 : -1;
}

int reserve_devices_free(const struct gpu_node *devices, const struct ledger *l, int skip, const struct alloc *a)
{
	struct gpu_node *n = gpu_node_clone(devices);
	if (!n)
		return -1;
	for (int k = 0; k < l->n; k++)
		if (k != skip)
			alloc_apply(n, &l->e[k].a);
	int fits = 1;
	for (int k = 0; k < a->ndev; k++) {
		int i = gpu_node_find_device(n, alloc_id(a, k));
		const struct gpu_device *d = i >= 0 ? &n->dev[i] : NULL;
		bool ok = d && !d->exclusive && (a->mode == CLAIM_SHARED
			? gpu_free_mib(d) >= a->mem_mib && gpu_free_core(d) >= a->core : !d->shared);
		if (!ok)
			fits = 0;
	}
	gpu_node_free(n);
	return fits;
}

static bool same_ids(const struct alloc *a, const struct alloc *b)
{
	char x[256], y[256];
	alloc_ids(a, x, sizeof(x));
	alloc_ids(b, y, sizeof(y));
	return !strcmp(x, y);
}

int reserve_edit_adopt(void *ctx, struct ledger *l, char *err, size_t errlen)
{
	struct adopt_ctx *ac = ctx;
	ac->clash = false;
	int i = ledger_find(l, ac->uid);
	if (i < 0)
		return LEDGER_UNCHANGED;    /* released meanwhile, or lost: a lost one is put back from the annotation */
	struct alloc *a = &l->e[i].a;
	if (ac->only_id && !resv_id_eq(resv_id_of(a), *ac->only_id))
		return LEDGER_UNCHANGED;
	if (same_ids(a, &ac->want)) {
		ac->now = *a;
		return LEDGER_UNCHANGED;
	}
	struct alloc was = *a;
	a->ndev = 0;
	a->id_base = 0;
	for (int k = 0; k < ac->want.ndev; k++)
		alloc_add_id(a, alloc_id(&ac->want, k));   /* (as many as want holds: it parsed) */
	int fits = reserve_devices_free(ac->devices, l, i, a);
	if (fits <= 0) {
		*a = was;
		ac->clash = fits == 0;
		snprintf(err, errlen, fits ? "out of memory" : "its devices are reserved by another pod");
		return fits ? -BIND_ERROR : LEDGER_UNCHANGED;
	}
	a->since = clock_wall_s();
	a->token = ac->token;
	ac->now = *a;
	return LEDGER_WRITE;
}
