/* GpuClaim status, and the status patches reserve_gang.c writes. */
#include "status.h"
#include "log.h"

#include <stdio.h>

void reserve_claim_status(struct reserve *r, const char *ns, const char *claim, const char *phase,
			  const char *node, const char *ids, const char *pod, const char *message)
{
	if (!claim || !claim[0])
		return;
	char path[768], now[40], what[400];
	snprintf(path, sizeof(path), "/apis/gpu.scheduling/v1/namespaces/%s/gpuclaims/%s/status", ns, claim);
	snprintf(what, sizeof(what), "GpuClaim %s/%s", ns, claim);
	reserve_status_time(now, sizeof(now));
	struct buf body;
	buf_init(&body, 1 << 16);
	buf_printf(&body, "{\"status\":{\"phase\":\"%s\",\"nodeName\":", phase);
	buf_add_json_str(&body, node ? node : "");
	buf_adds(&body, ",\"gpuIds\":");
	buf_add_json_str(&body, ids ? ids : "");
	buf_adds(&body, ",\"pod\":");
	buf_add_json_str(&body, pod ? pod : "");
	buf_adds(&body, ",\"message\":");
	buf_add_json_str(&body, message ? message : "");
	buf_printf(&body, ",\"lastTransitionTime\":\"%s\"}}", now);
	reserve_patch_status(r, path, buf_cstr(&body), what);
	buf_release(&body);
}

void reserve_status_time(char *out, size_t size)
{
	ledger_microtime(out, size);
	if (size > 20) {
		out[19] = 'Z';     /* date-time, whole seconds */
		out[20] = '\0';
	}
}

void reserve_patch_status(struct reserve *r, const char *path, const char *body, const char *what)
{
	char err[256] = "";
	struct kube_response resp;
	kube_response_init(&resp);
	if (kube_request(r->o.client, "PATCH", path, body, "application/merge-patch+json", 10, &resp, err,
			 sizeof(err)) || resp.status >= 300)
		log_warn("cannot update a status", "object=\"%s\" status=%ld error=\"%s\"", LOG_Q(what), resp.status,
			 LOG_Q(err));
	kube_response_release(&resp);
}
