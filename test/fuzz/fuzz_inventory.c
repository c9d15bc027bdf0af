/*
 * libFuzzer target: the standalone inventory file (a Kubernetes List of
 * Node, GpuNodeStatus and GpuClaim objects, JSON or YAML) through
 * inventory_load into a cache, as `serve --inventory` reads it, and the
 * same text through inventory_parse_nodes, as the simulator reads it.
 * Each input gets a fresh cache, so a crash reproduces from its input.
 */
#include "fuzz.h"

#include "inventory.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int quiet;
	if (!quiet++)
		fuzz_quiet();
	char err[512];
	struct cache *c = cache_new();
	if (!c)
		abort();
	if (!inventory_load(c, fuzz_file(data, size), err, sizeof(err)))
		snapshot_release(cache_acquire(c));   /* the views a request would read */
	cache_free(c);

	char *text = fuzz_cstr(data, size);
	struct gpu_node **nodes;
	size_t n;
	if (!inventory_parse_nodes(text, size, &nodes, &n, err, sizeof(err)))
		inventory_free_nodes(nodes, n);
	free(text);
	return 0;
}
