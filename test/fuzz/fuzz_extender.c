/*
 * libFuzzer target for what reaches the extender from outside: the bodies of
 * filter, prioritize, preempt and bind, admission reviews, and the objects
 * watch events carry (GpuNodeStatus, GpuClaim, Node, ledger Lease). The first byte picks the
 * entry point; the rest is the input. Build and run: make fuzz-extender.
 */
#include "api.h"
#include "extender.h"
#include "inventory.h"
#include "jsonarena.h"
#include "ledger.h"
#include "webhook.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static struct cache *cache;
static struct extender *ext;
static struct api_resources res;
static struct webhook *wh;

static void setup(void)
{
	jsonarena_install();
	cache = cache_new();
	char err[256];
	if (inventory_load(cache, "config/demo-inventory.json", err, sizeof(err)))
		abort();   /* run from the repository root */
	api_resources_default(&res);
	struct extender_opts o = { .cache = cache, .res = &res, .default_policy = POLICY_BINPACK,
				   .bind = extender_bind_local, .bind_ctx = cache };
	ext = extender_new(&o);
	struct webhook_opts wo = { .res = &res, .marker_resource = "gpu.scheduling/claim" };
	wh = webhook_new(&wo);
}

static void verb(http_handler h, void *ctx, const char *body, size_t len)
{
	struct http_request req = { "POST", "/", body, len, NULL };
	struct http_response resp = { 200, NULL, { 0 } };
	buf_init(&resp.body, 1 << 24);
	struct jsonarena arena;
	jsonarena_begin(&arena, 1 << 28);
	h(ctx, &req, &resp);
	jsonarena_end(&arena);
	buf_release(&resp.body);
}

static void decode(int which, const char *text, size_t len)
{
	cJSON *obj = cJSON_ParseWithLength(text, len);
	if (!obj)
		return;
	char err[256];
	if (which == 0) {
		struct gpu_node *n = gpu_node_new("x");
		const char *name;
		api_gns_decode(obj, n, &name, err, sizeof(err));
		gpu_node_free(n);
	} else if (which == 1) {
		struct claim c;
		api_gpuclaim_decode(obj, &c, err, sizeof(err));
		claim_release(&c);
	} else if (which == 2) {
		gpu_node_free(api_node_decode(obj, err, sizeof(err)));
	} else {
		struct ledger l;
		if (!ledger_decode(obj, &l, err, sizeof(err)))
			ledger_release(&l);
	}
	cJSON_Delete(obj);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ext)
		setup();
	if (size < 1)
		return 0;
	/* The handlers get a NUL-terminated body, as the HTTP server gives them. */
	char *body = malloc(size);
	memcpy(body, data + 1, size - 1);
	body[size - 1] = '\0';
	static const http_handler verbs[] = { extender_filter, extender_prioritize, extender_preempt, extender_bind };
	unsigned pick = data[0] % 9;
	if (pick < 4)
		verb(verbs[pick], ext, body, size - 1);
	else if (pick < 8)
		decode((int)pick - 4, body, size - 1);
	else
		verb(webhook_mutate, wh, body, size - 1);
	free(body);
	return 0;
}
