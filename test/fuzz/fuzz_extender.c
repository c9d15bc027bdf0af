/*
 * libFuzzer target: what reaches the extender from kube-scheduler and from
 * its watches. The first byte picks the entry point, the rest is the input:
 *
 *   0..3  the filter, prioritize, preempt and bind handlers (request JSON,
 *         NodeNames or Nodes form) on the demo inventory's cache
 *   4..7  the decoders of watched objects: GpuNodeStatus, GpuClaim, Node,
 *         ledger Lease
 *
 * Every reply must be JSON. A bind's allocation is removed again at once,
 * so each input meets the same cache (a crash reproduces from its input).
 * Run from the repository root (the inventory path is relative).
 */
#include "fuzz.h"

#include "api.h"
#include "extender.h"
#include "inventory.h"
#include "ledger.h"

static struct cache *cache;
static struct extender *ext;
static struct api_resources res;

/* The standalone binder, undone: the next input sees the same free devices. */
static int bind_and_undo(void *ctx, const struct bind_request *req, char *err, size_t errlen)
{
	int rc = extender_bind_local(ctx, req, err, errlen);
	cache_lock(cache);
	cache_remove_alloc(cache, req->uid, req->node);
	cache_unlock(cache);
	return rc;
}

static void setup(void)
{
	fuzz_quiet();
	cache = cache_new();
	char err[256];
	if (!cache || inventory_load(cache, "config/demo-inventory.json", err, sizeof(err))) {
		fprintf(stderr, "fuzz_extender: run from the repository root (%s)\n", err);
		abort();
	}
	api_resources_default(&res);
	struct extender_opts o = { .cache = cache, .res = &res, .default_policy = POLICY_BINPACK,
				   .bind = bind_and_undo, .bind_ctx = cache };
	ext = extender_new(&o);
	if (!ext)
		abort();
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ext)
		setup();
	if (size < 1)
		return 0;
	static const http_handler verbs[] = { extender_filter, extender_prioritize, extender_preempt,
					      extender_bind };
	char *body = fuzz_cstr(data + 1, size - 1);
	unsigned pick = data[0] % 8;
	if (pick < 4)
		cJSON_Delete(fuzz_handler(verbs[pick], ext, body, size - 1));
	else
		decode((int)pick - 4, body, size - 1);
	free(body);
	return 0;
}
