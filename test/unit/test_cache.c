/* The capacity cache: snapshots, allocations, sweeping, concurrent readers. */
#include "testutil.h"

#include "cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>

static struct gpu_node *devices(const char *name, int n)
{
	return tu_node(name, n, GPU_VENDOR_NVIDIA, "H100", 81559);
}

static struct alloc make_alloc(const char *uid, int id)
{
	struct alloc a;
	memset(&a, 0, sizeof(a));
	snprintf(a.uid, sizeof(a.uid), "%s", uid);
	a.mode = CLAIM_EXCLUSIVE;
	assert_int_equal(alloc_add_id(&a, id), 0);
	return a;
}

/* Device ids as offsets from the lowest: any order, any id, as long as they lie close enough. */
static void test_alloc_ids(void **state)
{
	(void)state;
	struct alloc a;
	memset(&a, 0, sizeof(a));
	const int ids[] = { 1003, 1001, 2000, 65536 + 1000 };   /* MIG ids of two GPUs, then the farthest */
	for (int k = 0; k < 4; k++)
		assert_int_equal(alloc_add_id(&a, ids[k]), 0);
	assert_int_equal(a.ndev, 4);
	for (int k = 0; k < 4; k++)
		assert_int_equal(alloc_id(&a, k), ids[k]);   /* in the order added */
	assert_int_equal(alloc_add_id(&a, 999), -1);      /* would span 65538 */
	assert_int_equal(alloc_add_id(&a, 65536 + 1002), -1);
	assert_int_equal(alloc_add_id(&a, -1), -1);
	assert_int_equal(a.ndev, 4);                      /* refused: nothing changed */
	for (int k = 0; k < 4; k++)
		assert_int_equal(alloc_id(&a, k), ids[k]);
	char text[64];
	alloc_ids(&a, text, sizeof(text));
	assert_string_equal(text, "1003,1001,2000,66536");
	memset(&a, 0, sizeof(a));
	for (int k = 0; k < GPU_MAX_DEVICES; k++)
		assert_int_equal(alloc_add_id(&a, GPU_MAX_DEVICES - k), 0);
	assert_int_equal(alloc_add_id(&a, 0), -1);       /* full */
	assert_int_equal(alloc_id(&a, GPU_MAX_DEVICES - 1), 1);
}

/*
 * Records packed one after another read back field for field: no ids and
 * 64, the longest names and empty ones, a ledger entry's names whole (its
 * claim, gang and gang timeout too); each a multiple of 8 bytes, and
 * about 90 for a one-GPU pod.
 */
static void test_alloc_records(void **state)
{
	(void)state;
	struct alloc in[5];
	memset(in, 0, sizeof(in));
	snprintf(in[0].uid, sizeof(in[0].uid), "0d9a3c4e-5b6f-4a7b-8c9d-0e1f2a3b4c5d");
	alloc_set_pod(&in[0], "team-a", "train-0");
	in[0].mode = CLAIM_EXCLUSIVE;
	in[0].since = 1764000000;
	assert_int_equal(alloc_add_id(&in[0], 3), 0);
	memset(in[1].uid, 'u', sizeof(in[1].uid) - 1);
	memset(in[1].pod, 'p', sizeof(in[1].pod) - 1);
	in[1].mode = CLAIM_SHARED;
	in[1].mem_mib = 40960;
	in[1].core = 250;
	in[1].since = -1;
	for (int k = 0; k < GPU_MAX_DEVICES; k++)
		assert_int_equal(alloc_add_id(&in[1], 1000 * (k % 8 + 1) + k / 8), 0);
	in[2].mode = CLAIM_MIG;   /* no ids, no names */
	snprintf(in[3].uid, sizeof(in[3].uid), "x");
	assert_int_equal(alloc_add_id(&in[3], 65535), 0);
	assert_int_equal(alloc_add_id(&in[3], 0), 0);
	/* A ledger's entry: its names longer than a struct alloc's display name holds. */
	char name[201];
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	const struct alloc_names entry = { "team-b", name, "claim-1", "gang-1" };
	snprintf(in[4].uid, sizeof(in[4].uid), "gang-0123456789abcdef-1");
	alloc_set_pod(&in[4], entry.ns, entry.name);
	assert_int_equal(alloc_add_id(&in[4], 7), 0);
	const struct alloc_names *names[5] = { NULL, NULL, NULL, NULL, &entry };
	size_t total = 0;
	for (int i = 0; i < 5; i++) {
		assert_int_equal(alloc_rec_size(&in[i], names[i]) % 8, 0);
		total += alloc_rec_size(&in[i], names[i]);
	}
	assert_true(alloc_rec_size(&in[0], NULL) <= 96);
	struct alloc_block *block = alloc_block_new(total);
	for (int i = 0; i < 5; i++)
		assert_int_equal(alloc_block_append(block, &in[i], names[i], i == 4 ? 300 : 0), 0);
	assert_int_equal(block->len, total);
	assert_int_equal(alloc_block_append(block, &in[2], NULL, 0), -1);   /* no room left */
	const struct alloc_rec *c = alloc_block_recs(block);
	for (int i = 0; i < 5; i++, c = alloc_rec_next(c)) {
		assert_int_equal(c->size, alloc_rec_size(&in[i], names[i]));
		struct alloc out;
		memset(&out, 0x5a, sizeof(out));
		alloc_rec_unpack(c, &out);
		assert_string_equal(alloc_rec_uid(c), in[i].uid);
		assert_string_equal(out.uid, in[i].uid);
		assert_string_equal(out.pod, in[i].pod);
		assert_int_equal(out.mode, in[i].mode);
		assert_int_equal(out.mem_mib, in[i].mem_mib);
		assert_int_equal(out.core, in[i].core);
		assert_int_equal(out.since, in[i].since);
		assert_int_equal(out.ndev, in[i].ndev);
		for (int k = 0; k < in[i].ndev; k++)
			assert_int_equal(alloc_id(&out, k), alloc_id(&in[i], k));
		struct alloc_names x;
		alloc_rec_names(c, &x);
		assert_string_equal(x.claim, names[i] ? names[i]->claim : "");
		assert_string_equal(x.gang, names[i] ? names[i]->gang : "");
		assert_int_equal(c->gang_timeout_s, i == 4 ? 300 : 0);
	}
	assert_ptr_equal(c, (const char *)block->data + total);
	struct alloc_names x;
	alloc_rec_names(alloc_block_recs(block), &x);
	assert_string_equal(x.ns, "team-a");
	assert_string_equal(x.name, "train-0");
	for (c = alloc_block_recs(block); c != alloc_rec_next(c) && strcmp(alloc_rec_uid(c), in[4].uid);)
		c = alloc_rec_next(c);
	alloc_rec_names(c, &x);
	assert_string_equal(x.ns, "team-b");
	assert_string_equal(x.name, name);   /* whole, where the display name is cut */
	alloc_block_release(block);
}

/* The display name is "namespace/name" (the name alone without one), cut at the field's size as printf would cut it. */
static void test_alloc_pod_name(void **state)
{
	(void)state;
	char longest[300];
	memset(longest, 'x', sizeof(longest) - 1);
	longest[sizeof(longest) - 1] = '\0';
	const size_t lens[] = { 0, 1, 30, 61, 62, 63, 64, 299 };
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		for (size_t j = 0; j < sizeof(lens) / sizeof(lens[0]); j++) {
			char ns[300], name[300], want[64];
			snprintf(ns, sizeof(ns), "%.*s", (int)lens[i], longest);
			snprintf(name, sizeof(name), "%.*s", (int)lens[j], "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz");
			snprintf(want, sizeof(want), "%s%s%s", ns, ns[0] ? "/" : "", name);
			struct alloc a;
			memset(&a, 0x55, sizeof(a));
			alloc_set_pod(&a, ns, name);
			assert_string_equal(a.pod, want);
		}
	}
}

static void test_snapshots_are_immutable(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	cache_lock(c);
	assert_int_equal(cache_set_gpus(c, "n1", devices("n1", 2)), 0);
	cache_unlock(c);
	struct snapshot *old = cache_acquire(c);
	assert_int_equal(old->n, 1);
	const struct cache_node *n1 = snapshot_find(old, "n1");
	assert_non_null(n1);
	assert_true(n1->has_gns);
	assert_false(n1->has_node);

	struct alloc a = make_alloc("pod-1", 1);
	cache_lock(c);
	assert_int_equal(cache_add_alloc(c, "n1", &a), 0);
	assert_int_equal(cache_set_gpus(c, "n2", devices("n2", 1)), 0);
	cache_unlock(c);

	/* The old snapshot still shows the old world. */
	assert_int_equal(old->n, 1);
	assert_int_equal(snapshot_find(old, "n1")->node->dev[1].exclusive, 0);
	assert_null(snapshot_find(old, "n2"));
	struct snapshot *now = cache_acquire(c);
	assert_true(now->version > old->version);
	assert_int_equal(now->n, 2);
	assert_int_equal(snapshot_find(now, "n1")->node->dev[1].exclusive, 1);
	assert_int_equal(snapshot_find(now, "n1")->nallocs, 1);
	snapshot_release(old);
	snapshot_release(now);
	cache_free(c);
}

static void test_labels_merge_with_devices(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	struct gpu_node *labels = gpu_node_new("n1");
	gpu_node_set_label(labels, "zone", "a");
	cache_lock(c);
	cache_set_node(c, "n1", labels);
	cache_set_gpus(c, "n1", devices("n1", 4));
	cache_unlock(c);
	struct snapshot *s = cache_acquire(c);
	const struct cache_node *n = snapshot_find(s, "n1");
	assert_true(n->has_node && n->has_gns);
	assert_int_equal(n->node->ndev, 4);
	assert_string_equal(gpu_node_label(n->node, "zone"), "a");
	snapshot_release(s);
	/* Deleting the GpuNodeStatus keeps the node, without devices. */
	cache_lock(c);
	cache_set_gpus(c, "n1", NULL);
	cache_unlock(c);
	s = cache_acquire(c);
	n = snapshot_find(s, "n1");
	assert_non_null(n);
	assert_false(n->has_gns);
	assert_int_equal(n->node->ndev, 0);
	snapshot_release(s);
	cache_lock(c);
	cache_set_node(c, "n1", NULL);
	cache_unlock(c);
	s = cache_acquire(c);
	assert_int_equal(s->n, 0);
	snapshot_release(s);
	cache_free(c);
}

/*
 * A Node's labels are kept once and shared by its views: a snapshot taken
 * before the Node changes keeps the labels it had, views rebuilt for other
 * reasons (allocations) keep showing them, a copy of the node carries its
 * own, and a Node without labels still counts as seen.
 */
static void test_labels_shared_and_kept(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	struct gpu_node *l = gpu_node_new("n1");
	char key[64], value[64];
	for (int i = 0; i < 30; i++) {
		snprintf(key, sizeof(key), "cloud.example.com/label-%02d", i);
		snprintf(value, sizeof(value), "value-%d", i * 7);
		assert_int_equal(gpu_node_set_label(l, key, value), 0);
	}
	cache_lock(c);
	cache_set_node(c, "n1", l);
	cache_set_gpus(c, "n1", devices("n1", 2));
	cache_unlock(c);
	struct snapshot *before = cache_acquire(c);
	struct alloc a = make_alloc("pod-a", 0);
	cache_lock(c);
	assert_int_equal(cache_set_allocs(c, "n1", &a, 1), 0);
	cache_unlock(c);
	struct snapshot *after = cache_acquire(c);
	const struct cache_node *x = snapshot_find(before, "n1"), *y = snapshot_find(after, "n1");
	assert_ptr_not_equal(x, y);
	assert_int_equal(y->node->dev[0].exclusive, 1);
	assert_int_equal(y->node->nlabels, 30);
	assert_ptr_equal(x->node->labels, y->node->labels);   /* one copy */
	assert_string_equal(gpu_node_label(y->node, "cloud.example.com/label-29"), "value-203");
	struct gpu_node *copy = cache_clone_devices(c, "n1");
	assert_non_null(copy);
	assert_int_equal(copy->nlabels, 30);
	/* The Node changes: new snapshots see the new labels, the old ones still theirs. */
	l = gpu_node_new("n1");
	assert_int_equal(gpu_node_set_label(l, "zone", "b"), 0);
	cache_lock(c);
	cache_set_node(c, "n1", l);
	cache_unlock(c);
	struct snapshot *now = cache_acquire(c);
	const struct cache_node *z = snapshot_find(now, "n1");
	assert_int_equal(z->node->nlabels, 1);
	assert_string_equal(gpu_node_label(z->node, "zone"), "b");
	assert_int_equal(z->node->dev[0].exclusive, 1);
	snapshot_release(now);
	assert_string_equal(gpu_node_label(x->node, "cloud.example.com/label-00"), "value-0");
	snapshot_release(before);
	assert_string_equal(gpu_node_label(y->node, "cloud.example.com/label-01"), "value-7");
	snapshot_release(after);
	assert_string_equal(gpu_node_label(copy, "cloud.example.com/label-02"), "value-14");
	gpu_node_free(copy);
	/* A Node without labels is a Node. */
	cache_lock(c);
	cache_set_node(c, "n2", gpu_node_new("n2"));
	cache_unlock(c);
	now = cache_acquire(c);
	z = snapshot_find(now, "n2");
	assert_non_null(z);
	assert_true(z->has_node);
	assert_int_equal(z->node->nlabels, 0);
	snapshot_release(now);
	/*
	 * What nodes repeat is kept once for all of them (n3's and n4's zone,
	 * key and value); a value longer than the shared pool keeps lies in the
	 * node's own block, whole.
	 */
	char longest[301];
	memset(longest, 'v', sizeof(longest) - 1);
	longest[sizeof(longest) - 1] = '\0';
	for (int i = 3; i <= 4; i++) {
		char name[8];
		snprintf(name, sizeof(name), "n%d", i);
		l = gpu_node_new(name);
		assert_int_equal(gpu_node_set_label(l, "topology.kubernetes.io/zone", "us-central1-a"), 0);
		assert_int_equal(gpu_node_set_label(l, "example.com/long", longest), 0);
		cache_lock(c);
		cache_set_node(c, name, l);
		cache_unlock(c);
	}
	now = cache_acquire(c);
	const struct cache_node *n3 = snapshot_find(now, "n3"), *n4 = snapshot_find(now, "n4");
	assert_ptr_equal(n3->node->labels[1].key, n4->node->labels[1].key);
	assert_ptr_equal(gpu_node_label(n3->node, "topology.kubernetes.io/zone"),
			 gpu_node_label(n4->node, "topology.kubernetes.io/zone"));
	assert_string_equal(gpu_node_label(n3->node, "topology.kubernetes.io/zone"), "us-central1-a");
	assert_ptr_not_equal(gpu_node_label(n3->node, "example.com/long"), gpu_node_label(n4->node, "example.com/long"));
	assert_string_equal(gpu_node_label(n4->node, "example.com/long"), longest);
	snapshot_release(now);
	cache_free(c);
}

/* A Node named name with a cloud node's labels in pool pool, and hostname its hostname label. */
static struct gpu_node *pool_node(const char *name, const char *hostname, int pool)
{
	struct gpu_node *l = gpu_node_new(name);
	char value[32];
	snprintf(value, sizeof(value), "gpu-pool-%d", pool);
	assert_int_equal(gpu_node_set_label(l, "cloud.google.com/gke-nodepool", value), 0);
	assert_int_equal(gpu_node_set_label(l, "kubernetes.io/hostname", hostname), 0);
	assert_int_equal(gpu_node_set_label(l, "kubernetes.io/arch", "amd64"), 0);
	assert_int_equal(gpu_node_set_label(l, "topology.kubernetes.io/zone", pool ? "us-central1-b" : "us-central1-a"), 0);
	return l;
}

/*
 * Nodes labelled alike share one array of labels: their hostname label,
 * which is each node's own name, reads as that name (through
 * gpu_node_label and a copy of the node; the debug view: blackbox). A node of
 * another pool, or whose hostname is not its name, has an array of its
 * own. The shared array outlives the nodes that used it until the cache
 * goes (ASan checks no reference is lost or released twice).
 */
static void test_labels_shared_by_nodes_alike(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	cache_lock(c);
	cache_set_node(c, "a1", pool_node("a1", "a1", 0));
	cache_set_node(c, "a2", pool_node("a2", "a2", 0));
	cache_set_node(c, "b1", pool_node("b1", "b1", 1));
	cache_set_node(c, "c1", pool_node("c1", "c1.internal", 0));
	cache_set_gpus(c, "a1", devices("a1", 2));
	cache_unlock(c);
	struct snapshot *s = cache_acquire(c);
	const struct gpu_node *a1 = snapshot_find(s, "a1")->node, *a2 = snapshot_find(s, "a2")->node;
	const struct gpu_node *b1 = snapshot_find(s, "b1")->node, *c1 = snapshot_find(s, "c1")->node;
	assert_ptr_equal(a1->labels, a2->labels);
	assert_ptr_not_equal(a1->labels, b1->labels);
	assert_ptr_not_equal(a1->labels, c1->labels);
	assert_string_equal(gpu_node_label(a1, "kubernetes.io/hostname"), "a1");
	assert_string_equal(gpu_node_label(a2, "kubernetes.io/hostname"), "a2");
	assert_string_equal(gpu_node_label(b1, "kubernetes.io/hostname"), "b1");
	assert_string_equal(gpu_node_label(c1, "kubernetes.io/hostname"), "c1.internal");
	assert_string_equal(gpu_node_label(a2, "cloud.google.com/gke-nodepool"), "gpu-pool-0");
	assert_string_equal(gpu_node_label(b1, "topology.kubernetes.io/zone"), "us-central1-b");
	uint64_t a2_id = snapshot_find(s, "a2")->id, b1_id = snapshot_find(s, "b1")->id;
	assert_int_not_equal(a2_id, b1_id);   /* each view its own id */
	snapshot_release(s);
	struct gpu_node *copy = cache_clone_devices(c, "a1");
	assert_non_null(copy);
	assert_string_equal(gpu_node_label(copy, "kubernetes.io/hostname"), "a1");
	struct gpu_node *again = gpu_node_clone(copy);
	assert_string_equal(gpu_node_label(again, "kubernetes.io/hostname"), "a1");
	gpu_node_free(again);
	gpu_node_free(copy);
	/* a2 moves to pool 1: it shares b1's array now; a1 keeps the old one, alone. */
	cache_lock(c);
	cache_set_node(c, "a2", pool_node("a2", "a2", 1));
	cache_unlock(c);
	s = cache_acquire(c);
	a1 = snapshot_find(s, "a1")->node;
	a2 = snapshot_find(s, "a2")->node;
	b1 = snapshot_find(s, "b1")->node;
	assert_ptr_equal(a2->labels, b1->labels);
	assert_ptr_not_equal(a1->labels, a2->labels);
	/* A view rebuilt has an id never used before; one the change left alone keeps its own. */
	assert_true(snapshot_find(s, "a2")->id > a2_id);
	assert_int_equal(snapshot_find(s, "b1")->id, b1_id);
	assert_string_equal(gpu_node_label(a2, "kubernetes.io/hostname"), "a2");
	assert_string_equal(gpu_node_label(a1, "cloud.google.com/gke-nodepool"), "gpu-pool-0");
	snapshot_release(s);
	/* Every node gone: the arrays stay for nodes to come, and go with the cache. */
	cache_lock(c);
	cache_set_node(c, "a1", NULL);
	cache_set_gpus(c, "a1", NULL);
	cache_set_node(c, "a2", NULL);
	cache_set_node(c, "b1", NULL);
	cache_set_node(c, "c1", NULL);
	cache_set_node(c, "a3", pool_node("a3", "a3", 0));
	cache_unlock(c);
	s = cache_acquire(c);
	assert_int_equal(s->n, 1);
	assert_string_equal(gpu_node_label(snapshot_find(s, "a3")->node, "kubernetes.io/hostname"), "a3");
	snapshot_release(s);
	cache_free(c);
}

/*
 * Each device's UUID, of any length up to the longest the API takes, is the
 * one its GpuNodeStatus gave: in a snapshot (where the cache packs them
 * after the devices), after the writer side changes, and in a copy of the
 * node, which owns its own.
 */
static void test_uuids_kept_whole(void **state)
{
	(void)state;
	char longest[GPU_UUID_MAX + 1];
	memset(longest, 'u', GPU_UUID_MAX);
	longest[GPU_UUID_MAX] = '\0';
	const char *uuid[4] = { "GPU-2545335d-3baa-188c-36b5-f645e39e1923", "", longest, "MIG-x" };
	struct gpu_node *g = devices("n1", 4);
	for (int i = 0; i < 4; i++) {
		free((void *)g->info[i].uuid);
		g->info[i].uuid = strdup(uuid[i]);
	}
	struct cache *c = cache_new();
	cache_lock(c);
	cache_set_gpus(c, "n1", g);
	cache_unlock(c);
	struct alloc a = make_alloc("pod-a", 1);
	cache_lock(c);
	assert_int_equal(cache_set_allocs(c, "n1", &a, 1), 0);   /* a new view, the same strings */
	cache_unlock(c);
	struct snapshot *s = cache_acquire(c);
	const struct cache_node *n = snapshot_find(s, "n1");
	assert_int_equal(n->node->dev[1].exclusive, 1);
	struct gpu_node *copy = cache_clone_devices(c, "n1");
	assert_non_null(copy);
	for (int i = 0; i < 4; i++) {
		assert_string_equal(n->node->info[i].uuid, uuid[i]);
		assert_string_equal(copy->info[i].uuid, uuid[i]);
		assert_ptr_not_equal(copy->info[i].uuid, n->node->info[i].uuid);
	}
	/* The copy outlives the cache: its strings are its own. */
	snapshot_release(s);
	cache_free(c);
	assert_string_equal(copy->info[2].uuid, longest);
	gpu_node_free(copy);
}

/* Device 0's usage, device 1's and device 3's holders in n1's view, as published. */
static void expect_usage_at(struct cache *c, uint32_t used_mib, int exclusive, int exclusive3)
{
	struct snapshot *s = cache_acquire(c);
	const struct cache_node *n = snapshot_find(s, "n1");
	assert_non_null(n);
	assert_int_equal(n->node->dev[0].used_mib, used_mib);
	assert_int_equal(n->node->dev[0].shared, used_mib ? 1 : 0);
	assert_int_equal(n->node->dev[1].exclusive, exclusive);
	assert_true(n->node->dev[2].external);
	assert_true(!n->node->dev[3].used_mib);
	assert_int_equal(n->node->dev[3].exclusive, exclusive3);
	assert_int_equal(n->node->nisland, 1);
	assert_string_equal(n->node->islands[0].name, "nvlink-0");
	assert_int_equal(n->node->cpu_cap, 64000);
	snapshot_release(s);
}

static void expect_usage(struct cache *c, uint32_t used_mib, int exclusive)
{
	expect_usage_at(c, used_mib, exclusive, 0);
}

/*
 * The writer side keeps no copy of a node's devices once a view holds
 * them: each rebuild starts from the current view with its usage left out.
 * Usage must come out exact however often a node is rebuilt, what the
 * GpuNodeStatus says of itself (external, islands, host) must stay, and a
 * copy of the devices carries no usage.
 */
static void test_devices_kept_in_the_view(void **state)
{
	(void)state;
	struct gpu_node *g = devices("n1", 4);
	tu_island(g, "nvlink-0", 900, 0, 3);
	g->cpu_cap = 64000;
	g->dev[2].external = true;
	g->dev[3].used_mib = 77;   /* usage in a GpuNodeStatus is left out: allocations give it */
	g->dev[3].exclusive = 2;
	struct cache *c = cache_new();
	cache_lock(c);
	cache_set_gpus(c, "n1", g);
	cache_unlock(c);
	expect_usage(c, 0, 0);
	struct alloc shared = make_alloc("pod-s", 0), whole = make_alloc("pod-w", 1);
	shared.mode = CLAIM_SHARED;
	shared.mem_mib = 1000;
	shared.core = 100;
	/* Rebuilds on rebuilds: with both, with one, with none, and a bind in flight. */
	for (int round = 0; round < 20; round++) {
		struct alloc both[2] = { shared, whole };
		cache_lock(c);
		cache_set_allocs(c, "n1", both, round % 3 == 2 ? 0 : 2 - round % 3);
		cache_unlock(c);
		expect_usage(c, round % 3 == 2 ? 0 : 1000, round % 3 == 0);
		struct alloc flight = make_alloc("pod-f", 1);
		cache_lock(c);
		cache_assume(c, "n1", &flight);
		cache_unlock(c);
		/* Counted once: on device 1, or on device 3 while pod-w holds 1 (0 is shared, 2 external). */
		expect_usage_at(c, round % 3 == 2 ? 0 : 1000, 1, round % 3 == 0);
		cache_lock(c);
		cache_forget(c, "pod-f", "n1");
		cache_unlock(c);
	}
	struct gpu_node *copy = cache_clone_devices(c, "n1");
	assert_non_null(copy);
	for (int i = 0; i < 4; i++)
		assert_true(!copy->dev[i].used_mib && !copy->dev[i].shared && !copy->dev[i].exclusive);
	assert_true(copy->dev[2].external);
	assert_int_equal(copy->nisland, 1);
	gpu_node_free(copy);
	/* A new GpuNodeStatus and new allocations in one turn: the view has both. */
	cache_lock(c);
	cache_set_gpus(c, "n1", devices("n1", 2));
	cache_set_allocs(c, "n1", &whole, 1);
	cache_unlock(c);
	struct snapshot *s = cache_acquire(c);
	const struct cache_node *n = snapshot_find(s, "n1");
	assert_int_equal(n->node->ndev, 2);
	assert_int_equal(n->node->dev[1].exclusive, 1);
	assert_int_equal(n->node->nisland, 0);
	snapshot_release(s);
	/* Without a GpuNodeStatus the node goes (its allocations stay); with one again it is back. */
	cache_lock(c);
	cache_set_gpus(c, "n1", NULL);
	cache_unlock(c);
	s = cache_acquire(c);
	assert_null(snapshot_find(s, "n1"));
	snapshot_release(s);
	assert_null(cache_clone_devices(c, "n1"));
	cache_lock(c);
	cache_set_gpus(c, "n1", devices("n1", 3));
	cache_unlock(c);
	s = cache_acquire(c);
	n = snapshot_find(s, "n1");
	assert_int_equal(n->node->ndev, 3);
	assert_int_equal(n->node->dev[1].exclusive, 1);
	assert_int_equal(n->node->dev[2].used_mib, 0);
	snapshot_release(s);
	cache_free(c);
}

static void test_allocations(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	cache_lock(c);
	cache_set_gpus(c, "n1", devices("n1", 4));
	cache_set_gpus(c, "n2", devices("n2", 4));
	struct alloc a = make_alloc("pod-1", 0), b = make_alloc("pod-2", 1);
	assert_int_equal(cache_add_alloc(c, "n1", &a), 0);
	assert_int_equal(cache_add_alloc(c, "n1", &b), 0);
	/* The same pod again, elsewhere: it moves. */
	b.id_base = 3;
	assert_int_equal(cache_add_alloc(c, "n2", &b), 0);
	struct alloc got;
	char node[64];
	assert_true(cache_find_alloc(c, "pod-2", &got, node, sizeof(node)));
	assert_string_equal(node, "n2");
	assert_int_equal(alloc_id(&got, 0), 3);
	assert_int_equal(cache_peek(c, "n1")->dev[1].exclusive, 0);
	assert_int_equal(cache_peek(c, "n2")->dev[3].exclusive, 1);
	/* A ledger replaces everything on its node. */
	struct alloc ledger[2] = { make_alloc("pod-3", 2), make_alloc("pod-4", 3) };
	assert_int_equal(cache_set_allocs(c, "n1", ledger, 2), 0);
	assert_false(cache_find_alloc(c, "pod-1", &got, node, sizeof(node)));
	assert_true(cache_find_alloc(c, "pod-4", &got, node, sizeof(node)));
	assert_true(cache_remove_alloc(c, "pod-3", NULL));
	assert_false(cache_remove_alloc(c, "pod-3", NULL));
	cache_unlock(c);
	struct cache_stats st;
	cache_stats(c, &st);
	assert_int_equal(st.nodes, 2);
	assert_int_equal(st.devices, 8);
	assert_int_equal(st.allocs, 2);
	cache_free(c);
}

/*
 * Which node a pod's record is found on, against a model, over random
 * binds (a pod moves), ledgers (a pod may be on two nodes; the newest
 * counts), releases by node and by pod, and relists: the index keeps the
 * node of the pod's newest record while that record lasts. Enough pods
 * that the index grows, and deletes that leave it mostly deleted slots.
 */
static void test_pod_index_model(void **state)
{
	(void)state;
	enum { NODES = 12, PODS = 400, NONE = -1 };
	static int holds[NODES][PODS];   /* records of the pod on the node */
	static int owner[PODS];
	memset(holds, 0, sizeof(holds));
	for (int p = 0; p < PODS; p++)
		owner[p] = NONE;
	struct cache *c = cache_new();
	srand(7);
	char uid[16], name[16], got_node[64];
	for (int step = 0; step < 20000; step++) {
		int n = rand() % NODES, p = rand() % PODS, op = rand() % 10;
		snprintf(name, sizeof(name), "n%d", n);
		snprintf(uid, sizeof(uid), "pod-%d", p);
		cache_lock(c);
		if (op < 4) {                       /* a bind: the pod's record moves here */
			struct alloc a = make_alloc(uid, p % 8);
			if (owner[p] != NONE) {
				holds[owner[p]][p]--;
				owner[p] = NONE;
			}
			assert_int_equal(cache_add_alloc(c, name, &a), 0);
			holds[n][p]++;
			owner[p] = n;
		} else if (op < 6) {                /* a ledger: a few pods, some held elsewhere too */
			struct alloc l[4];
			int k = 0;
			for (int q = 0; q < PODS && k < 1 + step % 4; q += 1 + rand() % 150) {
				snprintf(uid, sizeof(uid), "pod-%d", (p + q) % PODS);
				bool dup = false;
				for (int j = 0; j < k; j++)
					dup = dup || !strcmp(l[j].uid, uid);
				if (!dup) {
					l[k] = make_alloc(uid, k);
					k++;
				}
			}
			for (int q = 0; q < PODS; q++)
				if (holds[n][q]) {
					holds[n][q] = 0;
					if (owner[q] == n)
						owner[q] = NONE;
				}
			assert_int_equal(cache_set_allocs(c, name, l, k), 0);
			for (int j = 0; j < k; j++) {
				int q = atoi(l[j].uid + 4);
				holds[n][q] = 1;
				owner[q] = n;
			}
		} else if (op < 8) {                /* a release on a named node */
			bool had = holds[n][p] > 0;
			assert_int_equal(cache_remove_alloc(c, uid, name), had);
			if (had) {
				holds[n][p]--;
				if (owner[p] == n)
					owner[p] = NONE;
			}
		} else if (op < 9) {                /* a release by the pod alone: its newest record */
			int o = owner[p];
			assert_int_equal(cache_remove_alloc(c, uid, NULL), o != NONE);
			if (o != NONE) {
				holds[o][p]--;
				owner[p] = NONE;
			}
		} else if (step % 50 == 0) {        /* a relist that saw no ledgers: every record goes */
			cache_relist_begin(c, CACHE_ALLOCS);
			cache_relist_sweep(c, CACHE_ALLOCS);
			memset(holds, 0, sizeof(holds));
			for (int q = 0; q < PODS; q++)
				owner[q] = NONE;
		}
		if (step % 97 == 0) {
			for (int q = 0; q < PODS; q++) {
				struct alloc got;
				snprintf(uid, sizeof(uid), "pod-%d", q);
				bool found = cache_find_alloc(c, uid, &got, got_node, sizeof(got_node));
				assert_int_equal(found, owner[q] != NONE);
				if (found) {
					snprintf(name, sizeof(name), "n%d", owner[q]);
					assert_string_equal(got_node, name);
					assert_string_equal(got.uid, uid);
				}
			}
		}
		cache_unlock(c);
	}
	cache_free(c);
}

/* A bind in flight counts from cache_assume until cache_forget, once, whatever the ledger says meanwhile. */
static void test_assumed_allocations(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	cache_lock(c);
	cache_set_gpus(c, "n1", devices("n1", 4));
	struct alloc a = make_alloc("pod-1", 0), b = make_alloc("pod-2", 1);
	assert_int_equal(cache_assume(c, "nowhere", &a), -1);
	assert_int_equal(cache_assume(c, "n1", &a), 0);
	assert_int_equal(cache_assume(c, "n1", &b), 0);
	cache_unlock(c);
	struct snapshot *s = cache_acquire(c);
	const struct cache_node *v = snapshot_find(s, "n1");
	assert_int_equal(v->nallocs, 2);
	assert_int_equal(v->node->dev[0].exclusive, 1);
	assert_int_equal(v->node->dev[1].exclusive, 1);
	snapshot_release(s);
	cache_lock(c);
	/* The ledger arrives with pod-1's own record (on device 2): counted once, there. */
	struct alloc own = make_alloc("pod-1", 2);
	assert_int_equal(cache_set_allocs(c, "n1", &own, 1), 0);
	assert_int_equal(cache_peek(c, "n1")->dev[0].exclusive, 0);
	assert_int_equal(cache_peek(c, "n1")->dev[2].exclusive, 1);
	assert_int_equal(cache_peek(c, "n1")->dev[1].exclusive, 1);   /* pod-2 still in flight */
	/* Not a record of the pod: lookups and stats do not see it. */
	struct alloc got;
	char node[64];
	assert_false(cache_find_alloc(c, "pod-2", &got, node, sizeof(node)));
	cache_forget(c, "pod-2", "n1");
	cache_forget(c, "pod-1", "n1");
	cache_forget(c, "pod-9", "n1");   /* nothing assumed: no change */
	assert_int_equal(cache_peek(c, "n1")->dev[1].exclusive, 0);
	assert_int_equal(cache_peek(c, "n1")->dev[2].exclusive, 1);
	cache_unlock(c);
	s = cache_acquire(c);
	assert_int_equal(snapshot_find(s, "n1")->nallocs, 1);
	snapshot_release(s);
	cache_free(c);
}

/* Two binds of one pod raced: both ledgers hold it until the loser releases its own. */
/*
 * A view's uid bits hold every pod with a record there, ledger's or
 * assumed, so that "may hold" is never wrong when it says no; and it says
 * no for most other pods (a full node is asked for every pod filtered).
 */
static void test_view_knows_whose_records_it_may_hold(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	cache_lock(c);
	cache_set_gpus(c, "n1", devices("n1", 8));
	struct alloc held[7];
	char uid[64];
	for (int i = 0; i < 7; i++) {
		snprintf(uid, sizeof(uid), "3f0c2a4e-0000-4000-8000-%012d", i);
		held[i] = make_alloc(uid, i);
	}
	assert_int_equal(cache_set_allocs(c, "n1", held, 7), 0);
	struct alloc flight = make_alloc("3f0c2a4e-0000-4000-8000-in-flight", 7);
	assert_int_equal(cache_assume(c, "n1", &flight), 0);
	cache_unlock(c);
	struct snapshot *s = cache_acquire(c);
	const struct cache_node *v = snapshot_find(s, "n1");
	assert_int_equal(v->nallocs, 8);
	for (int i = 0; i < 7; i++)
		assert_true(cache_node_may_hold(v, cache_uid_bits(held[i].uid)));
	assert_true(cache_node_may_hold(v, cache_uid_bits(flight.uid)));
	int maybe = 0;
	for (int i = 0; i < 1000; i++) {
		snprintf(uid, sizeof(uid), "9b1d7c30-1111-4000-8000-%012d", i);
		maybe += cache_node_may_hold(v, cache_uid_bits(uid));
	}
	assert_true(maybe < 80);   /* about 25 expected */
	snapshot_release(s);
	cache_lock(c);
	cache_forget(c, flight.uid, "n1");
	assert_int_equal(cache_set_allocs(c, "n1", NULL, 0), 0);
	cache_unlock(c);
	s = cache_acquire(c);
	v = snapshot_find(s, "n1");
	assert_int_equal(v->uid_bits, 0);
	assert_false(cache_node_may_hold(v, cache_uid_bits(held[0].uid)));
	snapshot_release(s);
	cache_free(c);
}

static void test_pod_in_two_ledgers(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	cache_lock(c);
	cache_set_gpus(c, "n1", devices("n1", 2));
	cache_set_gpus(c, "n2", devices("n2", 2));
	struct alloc a = make_alloc("pod-1", 0);
	assert_int_equal(cache_set_allocs(c, "n1", &a, 1), 0);
	assert_int_equal(cache_set_allocs(c, "n2", &a, 1), 0);
	assert_int_equal(cache_peek(c, "n1")->dev[0].exclusive, 1);   /* both stay held */
	assert_int_equal(cache_peek(c, "n2")->dev[0].exclusive, 1);
	/* The loser (n1) releases; n2 keeps the pod's GPU. */
	assert_true(cache_remove_alloc(c, "pod-1", "n1"));
	assert_int_equal(cache_peek(c, "n1")->dev[0].exclusive, 0);
	assert_int_equal(cache_peek(c, "n2")->dev[0].exclusive, 1);
	struct alloc got;
	char node[32];
	assert_true(cache_find_alloc(c, "pod-1", &got, node, sizeof(node)));
	assert_string_equal(node, "n2");
	/* Or the winner's ledger is written again first: still both, until n1 drops it. */
	assert_int_equal(cache_set_allocs(c, "n1", &a, 1), 0);
	assert_int_equal(cache_set_allocs(c, "n1", NULL, 0), 0);
	assert_int_equal(cache_peek(c, "n2")->dev[0].exclusive, 1);
	cache_unlock(c);
	cache_free(c);
}

static void test_shared_allocation_usage(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	cache_lock(c);
	cache_set_gpus(c, "n1", devices("n1", 1));
	struct alloc a = make_alloc("pod-1", 0);
	a.mode = CLAIM_SHARED;
	a.mem_mib = 1000;
	a.core = 250;
	struct alloc b = a;
	snprintf(b.uid, sizeof(b.uid), "pod-2");
	cache_add_alloc(c, "n1", &a);
	cache_add_alloc(c, "n1", &b);
	const struct gpu_node *n = cache_peek(c, "n1");
	assert_int_equal(n->dev[0].shared, 2);
	assert_int_equal(n->dev[0].used_mib, 2000);
	assert_int_equal(n->dev[0].used_core, 500);
	struct gpu_node *copy = gpu_node_clone(n);
	alloc_unapply(copy, &a);
	assert_int_equal(copy->dev[0].used_core, 250);
	gpu_node_free(copy);
	cache_unlock(c);
	cache_free(c);
}

static void test_relist_sweeps_what_was_not_seen(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	cache_lock(c);
	cache_set_gpus(c, "keep", devices("keep", 1));
	cache_set_gpus(c, "gone", devices("gone", 1));
	cache_set_gpus(c, "busy", devices("busy", 1));
	struct gpu_node *labels = gpu_node_new("gone");
	cache_set_node(c, "gone", labels);
	struct alloc a = make_alloc("pod-1", 0);
	cache_add_alloc(c, "busy", &a);
	/* A relist of the devices that still has "keep" only. */
	cache_relist_begin(c, CACHE_GPUS);
	cache_set_gpus(c, "keep", devices("keep", 1));
	cache_relist_sweep(c, CACHE_GPUS);
	cache_unlock(c);
	struct snapshot *s0 = cache_acquire(c);
	/* "gone" still has its Node object, just no devices. */
	assert_non_null(snapshot_find(s0, "gone"));
	assert_false(snapshot_find(s0, "gone")->has_gns);
	snapshot_release(s0);
	cache_lock(c);
	cache_relist_begin(c, CACHE_NODES);
	cache_relist_sweep(c, CACHE_NODES);
	cache_unlock(c);
	struct snapshot *s = cache_acquire(c);
	assert_non_null(snapshot_find(s, "keep"));
	assert_null(snapshot_find(s, "gone"));
	assert_null(snapshot_find(s, "busy"));   /* no devices left: not visible */
	snapshot_release(s);
	struct alloc got;
	char node[32];
	cache_lock(c);
	/* The allocation survives its node's status going away. */
	assert_true(cache_find_alloc(c, "pod-1", &got, node, sizeof(node)));
	cache_unlock(c);
	cache_free(c);
}

static void test_gpuclaims(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	assert_int_equal(cache_set_gpuclaim(c, "ml", "a", cJSON_Parse("{\"x\":1}")), 0);
	cache_claims_rdlock(c);
	assert_non_null(cache_gpuclaim_lookup(c, "ml", "a"));
	assert_null(cache_gpuclaim_lookup(c, "ml", "b"));
	cache_claims_unlock(c);
	assert_int_equal(cache_set_gpuclaim(c, "ml", "a", NULL), 0);
	cache_claims_rdlock(c);
	assert_null(cache_gpuclaim_lookup(c, "ml", "a"));
	cache_claims_unlock(c);
	/* A relist keeps what it saw and drops the rest. */
	cache_set_gpuclaim(c, "ml", "x", cJSON_Parse("{}"));
	cache_set_gpuclaim(c, "ml", "y", cJSON_Parse("{}"));
	cache_relist_begin(c, CACHE_GPUCLAIMS);
	cache_set_gpuclaim(c, "ml", "y", cJSON_Parse("{}"));
	cache_relist_sweep(c, CACHE_GPUCLAIMS);
	cache_claims_rdlock(c);
	assert_null(cache_gpuclaim_lookup(c, "ml", "x"));
	assert_non_null(cache_gpuclaim_lookup(c, "ml", "y"));
	cache_claims_unlock(c);
	cache_free(c);
}

/* Readers keep checking that each snapshot is internally consistent. */
struct race {
	struct cache *c;
	_Atomic int stop;
	_Atomic long reads;
};

static void *reader(void *arg)
{
	struct race *r = arg;
	while (!atomic_load(&r->stop)) {
		struct snapshot *s = cache_acquire(r->c);
		long used = 0;
		for (size_t i = 0; i < s->n; i++) {
			const struct cache_node *cn = snapshot_node(s, i);
			int held = 0;
			for (int d = 0; d < cn->node->ndev; d++)
				held += cn->node->dev[d].exclusive;
			/* Usage always matches the allocations of the same view. */
			if (held != cn->nallocs)
				abort();
			used += held;
		}
		(void)used;
		snapshot_release(s);
		atomic_fetch_add(&r->reads, 1);
	}
	return NULL;
}

/*
 * A publish patches the nodes that changed into a copy of the last snapshot,
 * or rebuilds it when nodes come or go. Random edits against a model: every
 * snapshot has exactly the visible nodes, each with its allocations, found
 * through the index; a snapshot held meanwhile does not change.
 */
static void test_publish_patches_or_rebuilds(void **state)
{
	(void)state;
	enum { NODES = 150, STEPS = 4000, HELD = 4 };   /* nodes in three snapshot chunks */
	struct cache *c = cache_new();
	bool has_node[NODES] = { false }, has_gpus[NODES] = { false };
	int nallocs[NODES] = { 0 };
	struct snapshot *held[HELD] = { NULL };
	size_t held_n[HELD] = { 0 };
	int held_allocs[HELD][NODES];
	unsigned seed = 7;
	char name[32], uid[32];
	int next_pod = 0;
	for (int step = 0; step < STEPS; step++) {
		cache_lock(c);
		for (int op = rand_r(&seed) % 4; op >= 0; op--) {
			int n = rand_r(&seed) % NODES;
			snprintf(name, sizeof(name), "node-%03d", n);
			switch (rand_r(&seed) % 6) {
			case 0:
				assert_int_equal(cache_set_gpus(c, name, has_gpus[n] ? NULL : devices(name, 8)), 0);
				has_gpus[n] = !has_gpus[n];
				break;
			case 1:
				assert_int_equal(cache_set_node(c, name, has_node[n] ? NULL : tu_node(name, 0, GPU_VENDOR_NVIDIA, "", 0)), 0);
				has_node[n] = !has_node[n];
				break;
			case 2:
			case 3: {
				snprintf(uid, sizeof(uid), "pod-%d", next_pod++);
				struct alloc a = make_alloc(uid, nallocs[n] % 8);
				assert_int_equal(cache_add_alloc(c, name, &a), 0);
				nallocs[n]++;
				break;
			}
			case 4: {
				struct alloc none;
				assert_int_equal(cache_set_allocs(c, name, &none, 0), 0);
				nallocs[n] = 0;
				break;
			}
			default:
				break;     /* a lock with nothing changed */
			}
		}
		cache_unlock(c);
		struct snapshot *s = cache_acquire(c);
		size_t visible = 0;
		for (int n = 0; n < NODES; n++) {
			snprintf(name, sizeof(name), "node-%03d", n);
			const struct cache_node *cn = snapshot_find(s, name);
			if (!has_node[n] && !has_gpus[n]) {
				assert_null(cn);
				continue;
			}
			visible++;
			assert_non_null(cn);
			assert_string_equal(cn->node->name, name);
			assert_int_equal(cn->has_gns, has_gpus[n]);
			assert_int_equal(cn->nallocs, nallocs[n]);
		}
		assert_int_equal(s->n, visible);
		/* Held snapshots stay as they were when taken. */
		int h = step % HELD;
		for (int k = 0; k < HELD; k++) {
			if (!held[k])
				continue;
			assert_int_equal(held[k]->n, held_n[k]);
			for (int n = 0; n < NODES; n++) {
				snprintf(name, sizeof(name), "node-%03d", n);
				const struct cache_node *cn = snapshot_find(held[k], name);
				assert_int_equal(cn ? cn->nallocs : -1, held_allocs[k][n]);
			}
		}
		snapshot_release(held[h]);
		held[h] = s;
		held_n[h] = s->n;
		for (int n = 0; n < NODES; n++) {
			snprintf(name, sizeof(name), "node-%03d", n);
			const struct cache_node *cn = snapshot_find(s, name);
			held_allocs[h][n] = cn ? cn->nallocs : -1;
		}
	}
	for (int k = 0; k < HELD; k++)
		snapshot_release(held[k]);
	cache_free(c);
}

static void test_concurrent_readers_and_writers(void **state)
{
	(void)state;
	struct race r = { cache_new(), 0, 0 };
	cache_lock(r.c);
	for (int i = 0; i < 50; i++) {
		char name[16];
		snprintf(name, sizeof(name), "n%d", i);
		cache_set_gpus(r.c, name, devices(name, 8));
	}
	cache_unlock(r.c);
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, reader, &r);
	for (int round = 0; round < 2000; round++) {
		char name[16], uid[32];
		snprintf(name, sizeof(name), "n%d", round % 50);
		snprintf(uid, sizeof(uid), "pod-%d", round % 300);
		struct alloc a = make_alloc(uid, round % 8);
		cache_lock(r.c);
		cache_remove_alloc(r.c, uid, NULL);
		if (!cache_peek(r.c, name)->dev[round % 8].exclusive)
			cache_add_alloc(r.c, name, &a);
		cache_unlock(r.c);
	}
	atomic_store(&r.stop, 1);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	assert_true(atomic_load(&r.reads) > 0);
	cache_free(r.c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_snapshots_are_immutable),
		cmocka_unit_test(test_labels_merge_with_devices),
		cmocka_unit_test(test_uuids_kept_whole),
		cmocka_unit_test(test_labels_shared_and_kept),
		cmocka_unit_test(test_labels_shared_by_nodes_alike),
		cmocka_unit_test(test_devices_kept_in_the_view),
		cmocka_unit_test(test_allocations),
		cmocka_unit_test(test_assumed_allocations),
		cmocka_unit_test(test_view_knows_whose_records_it_may_hold),
		cmocka_unit_test(test_pod_in_two_ledgers),
		cmocka_unit_test(test_shared_allocation_usage),
		cmocka_unit_test(test_relist_sweeps_what_was_not_seen),
		cmocka_unit_test(test_gpuclaims),
		cmocka_unit_test(test_publish_patches_or_rebuilds),
		cmocka_unit_test(test_concurrent_readers_and_writers),
		cmocka_unit_test(test_alloc_ids),
		cmocka_unit_test(test_alloc_pod_name),
		cmocka_unit_test(test_alloc_records),
		cmocka_unit_test(test_pod_index_model),
	};
	return cmocka_run_group_tests_name("cache", tests, NULL, NULL);
}
