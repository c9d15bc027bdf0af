/*
 * Publishing the node: the Node's labels (JSON merge patch) and its
 * GpuNodeStatus (create, or update with the resourceVersion), through the
 * shared API client. The body builders, the change test and the backoff
 * are pure; agent_publish() does the calls. See include/agent_publish.h.
 */
#include "agent_publish.h"
#include "text.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BODY_CAP ((size_t)4 << 20)

/* ---- pure: bodies ---- */

bool agent_node_name_valid(const char *name)
{
	size_t n = name ? strlen(name) : 0;
	if (!n || n > AGENT_NODE_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
			return false;
	}
	return isalnum((unsigned char)name[0]) && isalnum((unsigned char)name[n - 1]);
}

int agent_labels_patch(const struct agent_labels *want, struct buf *out)
{
	int rc = buf_adds(out, "{\"metadata\":{\"labels\":{");
	bool first = true;
	for (int i = 0; i < want->n && !rc; i++) {
		rc = buf_adds(out, first ? "" : ",");
		if (!rc)
			rc = buf_add_json_str(out, want->l[i].key);
		if (!rc)
			rc = buf_addc(out, ':');
		if (!rc)
			rc = buf_add_json_str(out, want->l[i].value);
		first = false;
	}
	const char *const *keys;
	int nkeys = agent_label_managed_keys(&keys);
	for (int i = 0; i < nkeys && !rc; i++) {
		if (agent_labels_get(want, keys[i]))
			continue;
		rc = buf_adds(out, first ? "" : ",");
		if (!rc)
			rc = buf_add_json_str(out, keys[i]);
		if (!rc)
			rc = buf_adds(out, ":null");
		first = false;
	}
	if (!rc)
		rc = buf_adds(out, "}}}");
	return rc;
}

/* Sets metadata.ownerReferences: the others kept, the Node's one replaced. */
static bool set_owner(cJSON *meta, const char *node, const char *uid)
{
	cJSON *refs = cJSON_GetObjectItemCaseSensitive(meta, "ownerReferences");
	if (refs && !cJSON_IsArray(refs)) {
		cJSON_DeleteItemFromObjectCaseSensitive(meta, "ownerReferences");
		refs = NULL;
	}
	if (refs) {
		for (int i = cJSON_GetArraySize(refs) - 1; i >= 0; i--) {
			const cJSON *r = cJSON_GetArrayItem(refs, i);
			const cJSON *kind = cJSON_GetObjectItemCaseSensitive(r, "kind");
			const cJSON *api = cJSON_GetObjectItemCaseSensitive(r, "apiVersion");
			if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "Node") && cJSON_IsString(api) &&
			    !strcmp(api->valuestring, "v1"))
				cJSON_DeleteItemFromArray(refs, i);
		}
	}
	if (!uid || !uid[0]) {
		if (refs && !cJSON_GetArraySize(refs))
			cJSON_DeleteItemFromObjectCaseSensitive(meta, "ownerReferences");
		return true;
	}
	if (!refs && !(refs = cJSON_AddArrayToObject(meta, "ownerReferences")))
		return false;
	cJSON *r = cJSON_CreateObject();
	if (!r || !cJSON_AddItemToArray(refs, r)) {
		cJSON_Delete(r);
		return false;
	}
	return cJSON_AddStringToObject(r, "apiVersion", "v1") && cJSON_AddStringToObject(r, "kind", "Node") &&
	       cJSON_AddStringToObject(r, "name", node) && cJSON_AddStringToObject(r, "uid", uid);
}

static char *print_or_err(cJSON *root, char *err, size_t errlen)
{
	char *s = root ? cJSON_PrintUnformatted(root) : NULL;
	if (!s)
		snprintf(err, errlen, "out of memory");
	cJSON_Delete(root);
	return s;
}

char *agent_gns_create_body(const char *desired, const char *node_uid, char *err, size_t errlen)
{
	cJSON *root = cJSON_Parse(desired);
	cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "metadata");
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(meta, "name");
	if (!cJSON_IsObject(meta) || !cJSON_IsString(name)) {
		snprintf(err, errlen, "the GpuNodeStatus to write has no metadata.name");
		cJSON_Delete(root);
		return NULL;
	}
	if (!set_owner(meta, name->valuestring, node_uid)) {
		cJSON_Delete(root);
		root = NULL;
	}
	return print_or_err(root, err, errlen);
}

/*
 * status.allocation is the extender's (its counts with the reservations,
 * src/nodesum): moved from the object read into the one written, so that
 * the agent's update never takes it away.
 */
static bool keep_allocation(cJSON *cur, cJSON *want)
{
	cJSON *status = cJSON_GetObjectItemCaseSensitive(cur, "status");
	cJSON *wstatus = cJSON_GetObjectItemCaseSensitive(want, "status");
	if (!cJSON_IsObject(status) || !cJSON_IsObject(wstatus) ||
	    !cJSON_GetObjectItemCaseSensitive(status, "allocation"))
		return true;
	cJSON_DeleteItemFromObjectCaseSensitive(wstatus, "allocation");
	cJSON *a = cJSON_DetachItemFromObjectCaseSensitive(status, "allocation");
	if (cJSON_AddItemToObject(wstatus, "allocation", a))
		return true;
	cJSON_Delete(a);
	return false;
}

char *agent_gns_update_body(const char *current, size_t current_len, const char *desired,
			    const char *node_uid, char *err, size_t errlen)
{
	cJSON *cur = cJSON_ParseWithLength(current, current_len);
	cJSON *want = cJSON_Parse(desired);
	cJSON *meta = cJSON_GetObjectItemCaseSensitive(cur, "metadata");
	const cJSON *rv = cJSON_GetObjectItemCaseSensitive(meta, "resourceVersion");
	const cJSON *wmeta = cJSON_GetObjectItemCaseSensitive(want, "metadata");
	const cJSON *wname = cJSON_GetObjectItemCaseSensitive(wmeta, "name");
	char *out = NULL;
	if (!cJSON_IsObject(cur) || !cJSON_IsObject(meta) || !cJSON_IsString(rv) || !rv->valuestring[0]) {
		snprintf(err, errlen, "the API server's GpuNodeStatus has no metadata.resourceVersion");
		goto out;
	}
	if (!cJSON_IsObject(want) || !cJSON_IsString(wname)) {
		snprintf(err, errlen, "the GpuNodeStatus to write has no metadata.name");
		goto out;
	}
	cJSON_DeleteItemFromObjectCaseSensitive(meta, "managedFields");
	if (!keep_allocation(cur, want)) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	/* everything but metadata (and the extender's counts) comes from what we want now */
	const char *const keys[] = { "apiVersion", "kind", "spec", "status" };
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		cJSON_DeleteItemFromObjectCaseSensitive(cur, keys[i]);
		cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(want, keys[i]);
		if (v && !cJSON_AddItemToObject(cur, keys[i], v)) {
			cJSON_Delete(v);
			snprintf(err, errlen, "out of memory");
			goto out;
		}
	}
	if (!set_owner(meta, wname->valuestring, node_uid)) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	out = cJSON_PrintUnformatted(cur);
	if (!out)
		snprintf(err, errlen, "out of memory");
out:
	cJSON_Delete(cur);
	cJSON_Delete(want);
	return out;
}

/* ---- pure: when to write ---- */

void agent_pub_state_init(struct agent_pub_state *s)
{
	memset(s, 0, sizeof(*s));
}

void agent_pub_state_release(struct agent_pub_state *s)
{
	free(s->gns);
	agent_pub_state_init(s);
}

bool agent_pub_gns_due(const struct agent_pub_state *s, const char *fingerprint, const char *node_uid,
		       int64_t now_ms, int64_t resync_ms)
{
	if (!s->gns || strcmp(s->gns, fingerprint) || strcmp(s->gns_uid, node_uid ? node_uid : ""))
		return true;
	return resync_ms > 0 && now_ms - s->gns_at_ms >= resync_ms;
}

bool agent_pub_labels_due(const struct agent_pub_state *s, const struct agent_labels *want,
			  int64_t now_ms, int64_t resync_ms)
{
	if (!s->labels_ok || !agent_labels_equal(&s->labels, want))
		return true;
	return resync_ms > 0 && now_ms - s->labels_at_ms >= resync_ms;
}

/* ---- pure: backoff ---- */

int64_t agent_backoff_fail(struct agent_backoff *b, int64_t now_ms, int64_t base_ms, int64_t cap_ms, double r)
{
	if (!b->failures)
		b->since_ms = now_ms;
	if (b->failures < 1000)
		b->failures++;
	if (base_ms < 1)
		base_ms = 1;
	if (cap_ms < base_ms)
		cap_ms = base_ms;
	int64_t d = base_ms;
	for (int i = 1; i < b->failures && d < cap_ms; i++)
		d *= 2;
	if (d > cap_ms)
		d = cap_ms;
	if (r < 0 || r != r)
		r = 0;
	if (r >= 1)
		r = 0.999999;
	return d / 2 + (int64_t)((double)(d - d / 2) * r);
}

int agent_backoff_ok(struct agent_backoff *b)
{
	int n = b->failures;
	b->failures = 0;
	b->since_ms = 0;
	return n;
}

/* ---- the API calls ---- */

void agent_publisher_init(struct agent_publisher *p, struct kube_client *kube, const char *node)
{
	memset(p, 0, sizeof(*p));
	p->kube = kube;
	p->timeout_s = 15;
	snprintf(p->node, sizeof(p->node), "%s", node);
	agent_pub_state_init(&p->st);
}

void agent_publisher_release(struct agent_publisher *p)
{
	agent_pub_state_release(&p->st);
	memset(p, 0, sizeof(*p));
}

/* "HTTP 403 (...): message" plus a hint for the answers that mean a setup problem. */
static void http_error(struct agent_publisher *p, const char *what, const struct kube_response *r,
		       char *err, size_t errlen)
{
	char msg[300];
	kube_status_message(r, msg, sizeof(msg));
	agent_text_clean(msg);
	const char *hint = "";
	if (r->status == 401)
		hint = " (the API server rejected the agent's credentials)";
	else if (r->status == 403)
		hint = " (RBAC: the agent's ServiceAccount needs get/create/update on gpunodestatuses and patch on nodes, deploy/base/03-rbac.yaml)";
	if (r->status == 429 || r->status == 503)
		p->retry_after_s = r->retry_after;
	snprintf(err, errlen, "%s: HTTP %ld: %s%s", what, r->status, msg, hint);
}

static int path_for(struct buf *path, const char *prefix, const char *name)
{
	buf_clear(path);
	int rc = buf_adds(path, prefix);
	if (!rc)
		rc = buf_addc(path, '/');
	if (!rc)
		rc = kube_escape(path, name);
	return rc;
}

enum { PUB_OK = 0, PUB_HTTP = -1, PUB_NO_ANSWER = -2, PUB_NO_NODE = -3 };

/*
 * Patches the Node's labels; learns the Node's uid from the answer.
 * PUB_NO_ANSWER when the server could not be reached, PUB_NO_NODE when the
 * Node does not exist, PUB_HTTP for any other failure.
 */
static int patch_labels(struct agent_publisher *p, const struct agent_labels *want, int64_t now_ms,
			char *err, size_t errlen)
{
	struct buf body, path;
	buf_init(&body, BODY_CAP);
	buf_init(&path, 2048);
	struct kube_response r;
	kube_response_init(&r);
	int rc = PUB_HTTP;
	if (agent_labels_patch(want, &body) || path_for(&path, "/api/v1/nodes", p->node)) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	char cerr[512];
	if (kube_request(p->kube, "PATCH", buf_cstr(&path), buf_cstr(&body), "application/merge-patch+json",
			 p->timeout_s, &r, cerr, sizeof(cerr))) {
		snprintf(err, errlen, "patching the labels of node %s: %s", p->node, cerr);
		rc = PUB_NO_ANSWER;
		goto out;
	}
	if (r.status == 404) {
		snprintf(err, errlen, "node %s does not exist (is --node / NODE_NAME the Node's name?)", p->node);
		rc = PUB_NO_NODE;
		goto out;
	}
	if (r.status != 200) {
		char what[300];
		snprintf(what, sizeof(what), "patching the labels of node %s", p->node);
		http_error(p, what, &r, err, errlen);
		goto out;
	}
	cJSON *node = cJSON_ParseWithLength(buf_cstr(&r.body), r.body.len);
	const cJSON *uid = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(node, "metadata"), "uid");
	if (cJSON_IsString(uid))
		snprintf(p->node_uid, sizeof(p->node_uid), "%s", uid->valuestring);
	cJSON_Delete(node);
	p->st.labels = *want;
	p->st.labels_ok = true;
	p->st.labels_at_ms = now_ms;
	rc = PUB_OK;
out:
	kube_response_release(&r);
	buf_release(&body);
	buf_release(&path);
	return rc;
}

/*
 * Whether a 404 is about the object (a Status naming it) rather than the
 * resource type: without the CRD the server answers a bare NotFound.
 */
static bool names_object(const struct kube_response *r, const char *name)
{
	cJSON *j = cJSON_ParseWithLength(buf_cstr((struct buf *)&r->body), r->body.len);
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "details"), "name");
	bool yes = cJSON_IsString(n) && !strcmp(n->valuestring, name);
	cJSON_Delete(j);
	return yes;
}

/* GET, then POST (404) or PUT with its resourceVersion; 409 starts over. */
static int write_gns(struct agent_publisher *p, const char *desired, struct agent_pub_result *res,
		     char *err, size_t errlen)
{
	struct buf path;
	buf_init(&path, 2048);
	struct kube_response r;
	kube_response_init(&r);
	char cerr[512];
	int rc = -1;
	if (path_for(&path, AGENT_GNS_API, p->node)) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (int attempt = 0; attempt < AGENT_PUT_TRIES; attempt++) {
		if (kube_request(p->kube, "GET", buf_cstr(&path), NULL, NULL, p->timeout_s, &r, cerr, sizeof(cerr))) {
			snprintf(err, errlen, "reading GpuNodeStatus %s: %s", p->node, cerr);
			goto out;
		}
		char *body;
		const char *method, *url;
		if (r.status == 404) {
			if (!names_object(&r, p->node)) {
				snprintf(err, errlen, "the GpuNodeStatus CRD is not installed (kubectl apply -f deploy/base/02-crd-gpunodestatus.yaml)");
				goto out;
			}
			body = agent_gns_create_body(desired, p->node_uid, err, errlen);
			method = "POST";
			url = AGENT_GNS_API;
		} else if (r.status == 200) {
			body = agent_gns_update_body(buf_cstr(&r.body), r.body.len, desired, p->node_uid, err, errlen);
			method = "PUT";
			url = buf_cstr(&path);
		} else {
			char what[300];
			snprintf(what, sizeof(what), "reading GpuNodeStatus %s", p->node);
			http_error(p, what, &r, err, errlen);
			goto out;
		}
		if (!body)
			goto out;
		int qrc = kube_request(p->kube, method, url, body, NULL, p->timeout_s, &r, cerr, sizeof(cerr));
		free(body);
		if (qrc) {
			snprintf(err, errlen, "writing GpuNodeStatus %s: %s", p->node, cerr);
			goto out;
		}
		if (r.status == 200 || r.status == 201) {
			res->gns_written = true;
			res->gns_created = !strcmp(method, "POST");
			rc = 0;
			goto out;
		}
		if (r.status != 409) {
			char what[300];
			snprintf(what, sizeof(what), "%s GpuNodeStatus %s", !strcmp(method, "POST") ? "creating" : "updating",
				 p->node);
			http_error(p, what, &r, err, errlen);
			goto out;
		}
		/* someone else wrote it (or created it) in between: read it again */
		res->conflicts++;
	}
	snprintf(err, errlen, "updating GpuNodeStatus %s: still conflicting after %d tries", p->node, AGENT_PUT_TRIES);
out:
	kube_response_release(&r);
	buf_release(&path);
	return rc;
}

int agent_publish(struct agent_publisher *p, const struct agent_node *node, const char *timestamp,
		  int64_t now_ms, int64_t resync_ms, bool force, struct agent_pub_result *res,
		  char *err, size_t errlen)
{
	memset(res, 0, sizeof(*res));
	p->retry_after_s = 0;
	err[0] = '\0';
	int rc = 0;
	char lerr[768] = "", gerr[768] = "";

	struct agent_labels want;
	agent_node_label_set(node, &want);
	int lrc = PUB_OK;
	/* the uid comes with the label patch's answer; without it the status has no owner yet */
	if (force || !p->node_uid[0] || agent_pub_labels_due(&p->st, &want, now_ms, resync_ms)) {
		lrc = patch_labels(p, &want, now_ms, lerr, sizeof(lerr));
		if (lrc) {
			p->st.labels_ok = false;
			rc = -1;
		} else {
			res->labels_patched = true;
		}
	}

	/* no server (one cause, one message), or no Node (no status for a Node that is not there) */
	if (lrc == PUB_NO_ANSWER || lrc == PUB_NO_NODE)
		goto done;
	char *fp = agent_gns_json(node, NULL, false);
	if (!fp) {
		snprintf(gerr, sizeof(gerr), "out of memory");
		rc = -1;
	} else if (force || agent_pub_gns_due(&p->st, fp, p->node_uid, now_ms, resync_ms)) {
		res->gns_changed = agent_pub_gns_due(&p->st, fp, p->node_uid, now_ms, 0);
		char *desired = agent_gns_json(node, timestamp, false);
		if (!desired) {
			snprintf(gerr, sizeof(gerr), "out of memory");
			rc = -1;
		} else if (write_gns(p, desired, res, gerr, sizeof(gerr))) {
			rc = -1;
		} else {
			free(p->st.gns);
			p->st.gns = fp;   /* written: it is what the server has now */
			fp = NULL;
			snprintf(p->st.gns_uid, sizeof(p->st.gns_uid), "%s", p->node_uid);
			p->st.gns_at_ms = now_ms;
		}
		free(desired);
	}
	free(fp);
done:
	if (lerr[0] && gerr[0])
		snprintf(err, errlen, "%s; %s", gerr, lerr);
	else if (lerr[0] || gerr[0])
		snprintf(err, errlen, "%s", gerr[0] ? gerr : lerr);
	return rc;
}
