/* Fresh reads of pods, for decisions the watches' word is not enough for. */
#include "podread.h"
#include "api.h"
#include "buf.h"
#include "clock.h"
#include "log.h"
#include "watch.h"

#include <stdio.h>
#include <string.h>

int reserve_read_pod(struct reserve *r, const char *ns, const char *name, const char *uid, cJSON **out)
{
	char path[768], err[256];
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = -1;
	*out = NULL;
	if (kube_request(r->o.client, "GET", path, NULL, NULL, 10, &resp, err, sizeof(err))) {
		log_warn("reaper: cannot look a pod up; trying later", "pod=%s/%s error=\"%s\"", ns, name, LOG_Q(err));
	} else if (resp.status == 404) {
		rc = 0;
	} else if (resp.status == 200 && (*out = cJSON_ParseWithLength(resp.body.data, resp.body.len))) {
		struct api_pod_ref ref;
		api_pod_ref(*out, &ref);
		rc = !strcmp(ref.uid, uid);
		if (!rc) {
			cJSON_Delete(*out);
			*out = NULL;
		}
	}
	kube_response_release(&resp);
	return rc;
}

int reserve_fence_pod(struct reserve *r, const char *ns, const char *name, const char *uid, const char *version,
		      const char *node)
{
	char path[768], when[32], err[256] = "", msg[200];
	clock_wall_rfc3339(when, sizeof(when));
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
	struct buf body;
	buf_init(&body, 1024);
	buf_adds(&body, "{\"metadata\":{\"uid\":");
	buf_add_json_str(&body, uid);
	buf_adds(&body, ",\"resourceVersion\":");
	buf_add_json_str(&body, version);
	buf_printf(&body, ",\"annotations\":{\"" ANN_NUDGED "\":\"%s\"}}}", when);
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = -1;
	if (!kube_request(r->o.client, "PATCH", path, buf_cstr(&body), "application/merge-patch+json", 10, &resp, err,
			  sizeof(err))) {
		if (resp.status == 200) {
			/* (a write that changed nothing leaves the version as it was, and fences nothing) */
			cJSON *pod = cJSON_ParseWithLength(resp.body.data, resp.body.len);
			const char *now_version = api_str(api_path(pod, "metadata"), "resourceVersion");
			rc = now_version && strcmp(now_version, version) ? 0 : -1;
			cJSON_Delete(pod);
		} else if (resp.status != 409) {    /* (409: the pod changed since the read; read again) */
			snprintf(err, sizeof(err), "HTTP %ld: %s", resp.status, kube_status_message(&resp, msg, sizeof(msg)));
		}
	}
	if (err[0])
		log_warn("reaper: cannot fence a pod before its reservation goes; trying later",
			 "pod=%s/%s node=%s error=\"%s\"", ns, name, node, LOG_Q(err));
	kube_response_release(&resp);
	buf_release(&body);
	return rc;
}

#define MAX_CONFIRMS 16   /* pods a caller about to decide on one ledger reads at once */

void reserve_confirm_hints(struct reserve *r, const char *node)
{
	struct {
		char uid[64], ns[64], name[254];
	} look[MAX_CONFIRMS];
	int n = 0;
	pthread_mutex_lock(&r->lock);
	const struct ledger_box *box = keyset_get(&r->ledgers, node);
	struct ledger_packed_strs e;
	for (size_t pos = 0; box && n < MAX_CONFIRMS && ledger_packed_next_strs(&box->p, &pos, &e);) {
		if (!strmap_get(&r->check, e.uid) || strmap_get(&r->gone, e.uid) || keyset_get(&r->pods, e.uid))
			continue;
		snprintf(look[n].uid, sizeof(look[n].uid), "%s", e.uid);
		snprintf(look[n].ns, sizeof(look[n].ns), "%s", e.ns);
		snprintf(look[n].name, sizeof(look[n].name), "%s", e.name);
		n++;
	}
	pthread_mutex_unlock(&r->lock);
	for (int i = 0; i < n; i++) {
		cJSON *pod;
		if (!reserve_read_pod(r, look[i].ns, look[i].name, look[i].uid, &pod)) {
			pthread_mutex_lock(&r->lock);
			reserve_mark_gone(r, look[i].uid);
			pthread_mutex_unlock(&r->lock);
		}
		cJSON_Delete(pod);
	}
}
