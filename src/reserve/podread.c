/* Fresh reads of pods, for decisions the watches' word is not enough for. */
#include "podread.h"
#include "api.h"
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
